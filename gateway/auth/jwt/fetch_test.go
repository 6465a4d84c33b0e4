package jwt_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/gateway/auth/jwt"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// jwksServer serves a key set over TLS and counts what it was asked.
type jwksServer struct {
	*httptest.Server
	mu       sync.Mutex
	body     string
	status   int
	requests atomic.Int64
	failures atomic.Int64
	badAsks  atomic.Int64 // requests without Accept: application/json
	other    atomic.Int64 // requests for any other path
}

func newJWKSServer(t *testing.T, body string) *jwksServer {
	s := &jwksServer{body: body, status: http.StatusOK}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/jwks":
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		default:
			s.other.Add(1)
			_, _ = w.Write([]byte(s.get()))
			return
		}
		s.requests.Add(1)
		if r.Header.Get("Accept") != "application/json" {
			s.badAsks.Add(1)
		}
		s.mu.Lock()
		body, status := s.body, s.status
		s.mu.Unlock()
		if status != http.StatusOK {
			s.failures.Add(1)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) get() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.body
}

func (s *jwksServer) set(body string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body, s.status = body, status
}

func urlIssuer(url string, mods ...func(*configv1.Issuer)) *configv1.Issuer {
	return issuer("", append([]func(*configv1.Issuer){func(is *configv1.Issuer) {
		is.JwksUrl = url
		is.JwksMinRefresh = durationpb.New(time.Second)
		is.JwksRefresh = durationpb.New(time.Hour)
	}}, mods...)...)
}

func verifies(v *jwt.Verifier, tok string) func() bool {
	return func() bool { _, err := v.Verify(tok); return err == nil }
}

// unknownKIDs makes n tokens for the main issuer with kids nobody published
// and a made-up signature: refused before any signature check.
func unknownKIDs(n int) []string {
	body := payloadJSON(claims())
	out := make([]string, n)
	for i := range out {
		out[i] = raw(fmt.Sprintf(`{"alg":"ES256","kid":"forged-%d"}`, i), body, make([]byte, 64))
	}
	return out
}

func TestFetchNewKeyOnUnknownKID(t *testing.T) {
	t.Parallel()
	a := newSigner(t, "ES256", "a")
	b := newSigner(t, "ES256", "b")
	srv := newJWKSServer(t, jwksOf(a))
	v := newVerifier(t, nil, jwt.Options{HTTPClient: srv.Client()}, urlIssuer(srv.URL+"/jwks"))
	eventually(t, 5*time.Second, "the first fetch", verifies(v, a.mint(t, claims())))

	srv.set(jwksOf(a, b), http.StatusOK)
	tok := b.mint(t, claims())
	wantReason(t, v, tok, "unknown kid")
	eventually(t, 5*time.Second, "the new key", verifies(v, tok))
	if n := srv.badAsks.Load(); n != 0 {
		t.Errorf("%d fetches without Accept: application/json", n)
	}
	if n := srv.requests.Load(); n > 3 {
		t.Errorf("%d fetches, want at most 3", n)
	}
}

func TestFetchFloodOfUnknownKIDs(t *testing.T) {
	t.Parallel()
	a := newSigner(t, "ES256", "a")
	srv := newJWKSServer(t, jwksOf(a))
	v := newVerifier(t, nil, jwt.Options{HTTPClient: srv.Client()}, urlIssuer(srv.URL+"/jwks"))
	eventually(t, 5*time.Second, "the first fetch", verifies(v, a.mint(t, claims())))
	// Let a refresh the polling above may have asked for happen first.
	eventually(t, 5*time.Second, "quiet", func() bool {
		n := srv.requests.Load()
		return n >= 2 || n == 1 && verifies(v, a.mint(t, claims()))()
	})
	before := srv.requests.Load()
	for _, tok := range unknownKIDs(1000) {
		wantReason(t, v, tok, "unknown kid")
	}
	eventually(t, 5*time.Second, "the refresh the flood asked for", func() bool { return srv.requests.Load() > before })
	if got := srv.requests.Load() - before; got > 2 {
		t.Errorf("1000 unknown kids caused %d fetches, want at most 2", got)
	}
}

func TestFetchErrorsKeepKeys(t *testing.T) {
	t.Parallel()
	a := newSigner(t, "ES256", "a")
	srv := newJWKSServer(t, jwksOf(a))
	v := newVerifier(t, nil, jwt.Options{HTTPClient: srv.Client(), CacheSize: -1}, urlIssuer(srv.URL+"/jwks"))
	eventually(t, 5*time.Second, "the first fetch", verifies(v, a.mint(t, claims())))

	private := with(newSigner(t, "ES256", "p").jwk(), "d", "AAAA")
	for i, bad := range []struct {
		body   string
		status int
	}{
		{"oops", http.StatusInternalServerError},
		{"{not json", http.StatusOK},
		{jwks(a.jwk(), private), http.StatusOK},
		{jwks(), http.StatusOK},
		{`{"keys":[` + strings.Repeat(`{"kty":"none"},`, 80000) + `{}]}`, http.StatusOK}, // over 1 MiB
	} {
		failures := srv.failures.Load()
		requests := srv.requests.Load()
		srv.set(bad.body, bad.status)
		kick := unknownKIDs(1)[0]
		eventually(t, 5*time.Second, fmt.Sprintf("bad fetch %d", i), func() bool {
			_, _ = v.Verify(kick)
			return srv.requests.Load() > requests && (bad.status == http.StatusOK || srv.failures.Load() > failures)
		})
		wantOK(t, v, a.mint(t, claims()))
	}
}

func TestFetchPushedKeysWin(t *testing.T) {
	t.Parallel()
	pushed := newSigner(t, "ES256", "k1")
	fetched := newSigner(t, "ES256", "k1")
	extra := newSigner(t, "ES256", "k2")
	srv := newJWKSServer(t, jwksOf(fetched, extra))
	v := newVerifier(t, nil, jwt.Options{HTTPClient: srv.Client()}, urlIssuer(srv.URL+"/jwks", func(is *configv1.Issuer) {
		is.JwksJson = jwksOf(pushed)
	}))
	wantOK(t, v, pushed.mint(t, claims()))
	eventually(t, 5*time.Second, "the fetch", verifies(v, extra.mint(t, claims())))
	wantReason(t, v, fetched.mint(t, claims()), "invalid signature")
	wantOK(t, v, pushed.mint(t, claims()))
}

func TestFetchRefusesRedirects(t *testing.T) {
	t.Parallel()
	a := newSigner(t, "ES256", "a")
	srv := newJWKSServer(t, jwksOf(a))
	v := newVerifier(t, nil, jwt.Options{HTTPClient: srv.Client()}, urlIssuer(srv.URL+"/redirect"))
	tok := a.mint(t, claims())
	eventually(t, 5*time.Second, "a fetch attempt", func() bool {
		return strings.Contains(logBuf.String(), "status 302")
	})
	wantReason(t, v, tok, "unknown kid")
	if n := srv.other.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}

// TestFetchedKeysSurviveUpdate: an Update that leaves the issuer's fetch
// config alone neither refetches nor loses the keys, even when the issuer
// changed otherwise.
func TestFetchedKeysSurviveUpdate(t *testing.T) {
	t.Parallel()
	a := newSigner(t, "ES256", "a")
	srv := newJWKSServer(t, jwksOf(a))
	cfg := urlIssuer(srv.URL + "/jwks")
	v := newVerifier(t, nil, jwt.Options{HTTPClient: srv.Client(), CacheSize: -1}, cfg)
	eventually(t, 5*time.Second, "the first fetch", verifies(v, a.mint(t, claims())))
	srv.set("down", http.StatusServiceUnavailable)
	requests := srv.requests.Load()

	if err := v.Update([]*configv1.Issuer{urlIssuer(srv.URL + "/jwks")}, nil); err != nil {
		t.Fatal(err)
	}
	wantOK(t, v, a.mint(t, claims()))
	changed := urlIssuer(srv.URL+"/jwks", func(is *configv1.Issuer) { is.Audiences = []string{"api", "new"} })
	if err := v.Update([]*configv1.Issuer{changed}, nil); err != nil {
		t.Fatal(err)
	}
	wantOK(t, v, a.mint(t, claims("aud", "new")))
	if n := srv.requests.Load(); n != requests {
		t.Errorf("Updates caused %d fetches, want 0", n-requests)
	}
}

func fetchers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "created by github.com/portico-gw/portico/gateway/auth/jwt.startFetcher")
}

// TestFetchersStop: Update stops the fetchers of issuers that went away,
// Close the rest. Not parallel: it counts goroutines.
func TestFetchersStop(t *testing.T) {
	a := newSigner(t, "ES256", "a")
	srv := newJWKSServer(t, jwksOf(a))
	base := fetchers()
	v := jwt.New(jwt.Options{HTTPClient: srv.Client(), Logger: testLog})
	mk := func(name string) *configv1.Issuer {
		return urlIssuer(srv.URL+"/jwks", func(is *configv1.Issuer) {
			is.Name, is.Issuer = name, "https://"+name+".example.com/"
		})
	}
	if err := v.Update([]*configv1.Issuer{mk("a"), mk("b"), mk("c")}, nil); err != nil {
		t.Fatal(err)
	}
	if n := fetchers() - base; n != 3 {
		t.Fatalf("%d fetchers after an Update with 3 issuers, want 3", n)
	}
	if err := v.Update([]*configv1.Issuer{mk("b")}, nil); err != nil {
		t.Fatal(err)
	}
	if n := fetchers() - base; n != 1 {
		t.Fatalf("%d fetchers after an Update with 1 issuer, want 1", n)
	}
	// A changed fetch config replaces the fetcher.
	changed := mk("b")
	changed.JwksMinRefresh = durationpb.New(2 * time.Second)
	if err := v.Update([]*configv1.Issuer{changed}, nil); err != nil {
		t.Fatal(err)
	}
	if n := fetchers() - base; n != 1 {
		t.Fatalf("%d fetchers after changing one, want 1", n)
	}
	v.Close()
	if n := fetchers() - base; n != 0 {
		t.Fatalf("%d fetchers after Close, want 0", n)
	}
	if err := v.Update([]*configv1.Issuer{mk("a")}, nil); err == nil {
		t.Error("Update after Close succeeded")
	}
	if n := fetchers() - base; n != 0 {
		t.Fatalf("%d fetchers after Update after Close, want 0", n)
	}
}

// TestFetchRemovedKeyInvalidatesCache: when a fetch no longer has a key,
// tokens it verified fail at once, cached or not.
func TestFetchRemovedKeyInvalidatesCache(t *testing.T) {
	t.Parallel()
	a := newSigner(t, "ES256", "a")
	b := newSigner(t, "ES256", "b")
	srv := newJWKSServer(t, jwksOf(a, b))
	clk := newClock()
	v := newVerifier(t, clk, jwt.Options{HTTPClient: srv.Client()}, urlIssuer(srv.URL+"/jwks"))
	tokA := a.mint(t, claims())
	eventually(t, 5*time.Second, "the first fetch", verifies(v, tokA))
	if !jwt.Cached(v, tokA) {
		t.Fatal("token not cached")
	}
	srv.set(jwksOf(b), http.StatusOK)
	requests := srv.requests.Load()
	kick := unknownKIDs(1)[0]
	eventually(t, 5*time.Second, "a refetch", func() bool {
		_, _ = v.Verify(kick)
		return srv.requests.Load() > requests
	})
	eventually(t, 5*time.Second, "the key gone", func() bool {
		_, err := v.Verify(tokA)
		return err != nil
	})
	wantReason(t, v, tokA, "unknown kid")
	// A key published again unchanged keeps its cached tokens.
	tokB := b.mint(t, claims())
	wantOK(t, v, tokB)
	requests = srv.requests.Load()
	eventually(t, 5*time.Second, "another refetch", func() bool {
		_, _ = v.Verify(kick)
		return srv.requests.Load() > requests
	})
	// With the clock set back an hour tokB's iat is in the future: only a
	// cache hit can accept it.
	clk.Set(t0.Add(-time.Hour))
	if _, err := verify(t, v, tokB); err != nil {
		t.Errorf("after refetching the same key, Verify = %q, want a cache hit", err.Reason)
	}
}
