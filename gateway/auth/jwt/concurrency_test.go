package jwt_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/portico-gw/portico/gateway/auth/jwt"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// TestVerifyDuringUpdates verifies from many goroutines while Updates
// rotate keys and deny entries; run it with -race. Every answer must be
// one a snapshot could give.
func TestVerifyDuringUpdates(t *testing.T) {
	t.Parallel()
	a := newSigner(t, "ES256", "a")
	b := newSigner(t, "ES256", "b")
	v := newVerifier(t, nil, jwt.Options{CacheSize: 64}, issuer(jwksOf(a, b)))
	tokA := a.mint(t, claims("jti", "ja"))
	tokB := b.mint(t, claims("jti", "jb"))
	snapshots := []struct {
		keys string
		deny []*configv1.DenyEntry
	}{
		{jwksOf(a, b), nil},
		{jwksOf(a), nil},
		{jwksOf(b), []*configv1.DenyEntry{denyJTI("", "jb")}},
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				for _, tok := range []string{tokA, tokB} {
					_, err := verify(t, v, tok)
					if err != nil && err.Reason != "unknown kid" && err.Reason != "revoked" {
						t.Errorf("Verify = %q during updates", err.Reason)
						return
					}
				}
			}
		})
	}
	for i := range 300 {
		s := snapshots[i%len(snapshots)]
		if err := v.Update([]*configv1.Issuer{issuer(s.keys)}, s.deny); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
}
