package svcauth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/internal/svcauth"
)

func TestHashAndCheck(t *testing.T) {
	t.Parallel()
	const token = "ptk_0123456789abcdef0123456789abcdef"
	hash := svcauth.Hash(token)
	if len(hash) != 64 || svcauth.Hash(token) != hash || svcauth.Hash(token+"x") == hash {
		t.Fatalf("Hash = %q", hash)
	}
	if !svcauth.Matches(token, hash) || svcauth.Matches("other", hash) || svcauth.Matches(token, "") {
		t.Error("Matches")
	}
	for _, tc := range []struct {
		header, hash string
		ok           bool
	}{
		{"Bearer " + token, hash, true},
		{"Bearer " + token, "", true}, // no token required
		{"", "", true},
		{"", hash, false},
		{"Bearer ", hash, false},
		{"Basic " + token, hash, false},
		{"bearer " + token, hash, false},
		{"Bearer other", hash, false},
		{"Bearer " + hash, hash, false}, // the hash is no token
	} {
		h := http.Header{}
		if tc.header != "" {
			h.Set("Authorization", tc.header)
		}
		err := svcauth.Check(h, tc.hash, "a token is required")
		if (err == nil) != tc.ok || err != nil && connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("Check(%q, %q) = %v, want ok %v", tc.header, tc.hash, err, tc.ok)
		}
	}
}

func TestTransportAndInterceptor(t *testing.T) {
	t.Parallel()
	got := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
	}))
	t.Cleanup(srv.Close)
	for _, token := range []string{"secret", ""} {
		c := &http.Client{Transport: svcauth.Transport(token, nil)}
		req, _ := http.NewRequest("GET", srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := ""
		if token != "" {
			want = "Bearer " + token
		}
		if h := <-got; h != want {
			t.Errorf("Transport(%q) sent %q, want %q", token, h, want)
		}
		if req.Header.Get("Authorization") != "" {
			t.Error("Transport changed the caller's request")
		}
	}

	// The interceptor sets the header of a unary call.
	var seen string
	next := connect.UnaryFunc(func(_ context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		seen = req.Header().Get("Authorization")
		return nil, nil
	})
	_, _ = svcauth.Interceptor("tok").WrapUnary(next)(context.Background(), connect.NewRequest(&struct{}{}))
	if seen != "Bearer tok" {
		t.Errorf("the unary interceptor sent %q", seen)
	}
}
