package jwt_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/auth/jwt"
)

func TestCacheHit(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	clk := newClock()
	v := newVerifier(t, clk, jwt.Options{}, issuer(jwksOf(key)))
	tok := key.mint(t, claims("scope", "a b", "client_id", "c", "tenant", "t", "plan", "p"))
	first := wantOK(t, v, tok)
	if !jwt.Cached(v, tok) {
		t.Fatal("verified token not cached")
	}
	// A hit answers without re-checking iat: with the clock set back an
	// hour, only the cache can accept this token.
	clk.Set(t0.Add(-time.Hour))
	if second := wantOK(t, v, tok); second != first {
		t.Errorf("cache hit = %+v, want %+v", second, first)
	}
}

func TestCacheNeverHoldsFailures(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	v := newVerifier(t, nil, jwt.Options{}, issuer(jwksOf(key)))
	for _, tok := range []string{
		key.mint(t, claims("aud", "nope")),
		newSigner(t, "ES256", "k1").mint(t, claims()),
		key.mint(t, claims("exp", t0.Add(-time.Hour).Unix())),
	} {
		_, _ = verify(t, v, tok)
		if jwt.Cached(v, tok) {
			t.Error("refused token cached")
		}
	}
	if n := jwt.CacheLen(v); n != 0 {
		t.Errorf("CacheLen = %d, want 0", n)
	}
}

func TestCacheExpiry(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	clk := newClock()
	v := newVerifier(t, clk, jwt.Options{}, issuer(jwksOf(key)))

	// A token cached near its end lapses with exp plus leeway.
	short := key.mint(t, claims("exp", t0.Add(10*time.Second).Unix()))
	wantOK(t, v, short)
	clk.Set(t0.Add(39 * time.Second))
	if !jwt.Cached(v, short) {
		t.Error("token not cached within exp+leeway")
	}
	wantOK(t, v, short)
	clk.Set(t0.Add(40 * time.Second))
	if jwt.Cached(v, short) {
		t.Error("token cached past exp+leeway")
	}
	wantReason(t, v, short, "expired")

	// Any token lapses 60 s after it was verified, and is verified again.
	clk.Set(t0)
	long := key.mint(t, claims())
	wantOK(t, v, long)
	clk.Set(t0.Add(59 * time.Second))
	if !jwt.Cached(v, long) {
		t.Error("token not cached at 59 s")
	}
	clk.Set(t0.Add(60 * time.Second))
	if jwt.Cached(v, long) {
		t.Error("token cached at 60 s")
	}
	wantOK(t, v, long)
	if !jwt.Cached(v, long) {
		t.Error("token not cached again")
	}
}

func TestCacheBounded(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	for _, size := range []int{10, 100} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			v := newVerifier(t, nil, jwt.Options{CacheSize: size}, issuer(jwksOf(key)))
			for i := 0; i < 10*size; i++ {
				wantOK(t, v, key.mint(t, claims()))
				if n := jwt.CacheLen(v); n > size {
					t.Fatalf("after %d tokens CacheLen = %d, want at most %d", i+1, n, size)
				}
			}
			if n := jwt.CacheLen(v); n < size/2 {
				t.Errorf("CacheLen = %d, want the cache mostly full (%d)", n, size)
			}
		})
	}
}

func TestCacheOff(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	v := newVerifier(t, nil, jwt.Options{CacheSize: -1}, issuer(jwksOf(key)))
	tok := key.mint(t, claims())
	wantOK(t, v, tok)
	wantOK(t, v, tok)
	if n := jwt.CacheLen(v); n != 0 {
		t.Errorf("CacheLen = %d with the cache off", n)
	}
}
