package proxy

import (
	"net/http"
	"testing"

	"github.com/portico-gw/portico/gateway/auth"
)

// BenchmarkOutboundHeader is the upstream header of a typical API call:
// the client's headers filtered (hop-by-hop, credentials, the gateway's
// own names in any spelling) and the gateway's added.
func BenchmarkOutboundHeader(b *testing.B) {
	r, _ := http.NewRequest("GET", "http://api.example.com/v1/items?limit=10", nil)
	for k, v := range map[string]string{
		"User-Agent": "client/1.0", "Accept": "application/json", "Accept-Encoding": "gzip",
		"X-Api-Key": "ak_live_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "X-Api-Version": "2026-01",
		"Cookie": "session=abc", "Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"Connection": "keep-alive",
	} {
		r.Header.Set(k, v)
	}
	t := &Target{RequestID: "0123456789abcdef0123456789abcdef", Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-0123456789abcdef-01",
		ClientIP: "192.0.2.10", RealIP: "192.0.2.10", Identity: auth.Identity{Kind: auth.APIKey, ClientID: "app-1", KeyID: "key-1", Tenant: "t-1", Plan: "pro", Scopes: "a b"}}
	b.ReportAllocs()
	var o outbound
	for b.Loop() {
		o = outbound{}
		_ = o.header(r, t, false, 0)
	}
}
