package router_test

import (
	"testing"

	"github.com/portico-gw/portico/gateway/router"
)

func TestCanonicalHost(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"api.example.com":      "api.example.com",
		"API.Example.COM:8443": "api.example.com",
		"api.example.com.":     "api.example.com",
		"api.example.com.:80":  "api.example.com",
		"[::1]:8080":           "::1",
		"[::1]":                "::1",
		"127.0.0.1:1":          "127.0.0.1",
		"":                     "",
	} {
		if got := router.CanonicalHost(in); got != want {
			t.Errorf("CanonicalHost(%q) = %q, want %q", in, got, want)
		}
	}
}
