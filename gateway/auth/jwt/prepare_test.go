package jwt_test

import (
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/auth/jwt"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// TestPrepareChangesNothingUntilInstalled: a prepared set verifies with
// VerifyWith at once, while Verify keeps the installed one until Install.
func TestPrepareChangesNothingUntilInstalled(t *testing.T) {
	t.Parallel()
	a, b := newSigner(t, "ES256", "a"), newSigner(t, "ES256", "b")
	v := newVerifier(t, nil, jwt.Options{}, issuer(jwksOf(a)))
	tokA, tokB := a.mint(t, claims()), b.mint(t, claims())

	next, err := v.Prepare([]*configv1.Issuer{issuer(jwksOf(b))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(tokA); err != nil {
		t.Errorf("Verify(a's token) after Prepare of b's keys: %v, want the installed set to accept it", err)
	}
	wantReason(t, v, tokB, "unknown kid")
	if _, err := v.VerifyWith(next, tokB); err != nil {
		t.Errorf("VerifyWith(prepared, b's token): %v", err)
	}
	if _, err := v.VerifyWith(next, tokA); err == nil {
		t.Error("VerifyWith(prepared, a's token) succeeded: the prepared set has b's keys only")
	}
	v.Install(next)
	if _, err := v.Verify(tokB); err != nil {
		t.Errorf("Verify(b's token) after Install: %v", err)
	}
	if _, err := v.VerifyWith(nil, tokB); err == nil {
		t.Error("VerifyWith(nil) succeeded")
	}
	if _, err := v.Prepare([]*configv1.Issuer{issuer("{not json")}, nil); err == nil {
		t.Error("Prepare of a bad key set succeeded")
	}
}

// TestDiscardStopsWhatPrepareStarted: the fetcher Prepare starts for a
// new jwks_url stops when the set is discarded; one the installed set
// shares keeps running.
func TestDiscardStopsWhatPrepareStarted(t *testing.T) {
	t.Parallel()
	a := newSigner(t, "ES256", "a")
	srv := newJWKSServer(t, jwksOf(a))
	other := newJWKSServer(t, jwksOf(a))
	v := newVerifier(t, nil, jwt.Options{HTTPClient: srv.Client()}, urlIssuer(srv.URL+"/jwks"))
	eventually(t, 5*time.Second, "the first fetch", verifies(v, a.mint(t, claims())))

	// The same jwks_url (and another audience): the fetcher carries over.
	same, err := v.Prepare([]*configv1.Issuer{urlIssuer(srv.URL+"/jwks", func(is *configv1.Issuer) { is.Audiences = []string{"other"} })}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v.Discard(same)
	if jwt.FetcherStopped(same, "main") {
		t.Error("Discard stopped the fetcher the installed set still uses")
	}

	// Another jwks_url: a fetcher of its own, which Discard stops.
	moved, err := v.Prepare([]*configv1.Issuer{urlIssuer(other.URL + "/jwks")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the prepared set's fetch", func() bool { return other.requests.Load() > 0 })
	v.Discard(moved)
	if !jwt.FetcherStopped(moved, "main") {
		t.Error("Discard left the fetcher Prepare started running")
	}
	if _, err := v.Verify(a.mint(t, claims())); err != nil {
		t.Errorf("the installed set after Discard: %v", err)
	}
}
