package jwt_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/auth/jwt"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

var later = t0.Add(24 * time.Hour)

func denyJTI(issuer, jti string) *configv1.DenyEntry {
	return &configv1.DenyEntry{Issuer: issuer, Match: &configv1.DenyEntry_Jti{Jti: jti}, Expires: timestamppb.New(later)}
}

func denySubject(issuer, sub string, before time.Time) *configv1.DenyEntry {
	return &configv1.DenyEntry{
		Issuer: issuer, Match: &configv1.DenyEntry_Subject{Subject: sub},
		IssuedBefore: timestamppb.New(before), Expires: timestamppb.New(later),
	}
}

func denyClient(issuer, client string, before time.Time) *configv1.DenyEntry {
	return &configv1.DenyEntry{
		Issuer: issuer, Match: &configv1.DenyEntry_ClientId{ClientId: client},
		IssuedBefore: timestamppb.New(before), Expires: timestamppb.New(later),
	}
}

func TestDenyList(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	otherKey := newSigner(t, "ES256", "k2")
	other := &configv1.Issuer{Name: "other", Issuer: "https://other.example.com/", Audiences: []string{"api"}, JwksJson: jwksOf(otherKey)}
	cut := t0.Add(-time.Minute)
	before := t0.Add(-2 * time.Minute).Unix()
	after := cut.Unix()
	deny := []*configv1.DenyEntry{
		denyJTI("", "stolen"),
		denyJTI("other", "other-only"),
		denySubject("main", "alice", cut),
		denyClient("", "leaky-app", cut),
	}
	clk := newClock()
	v := newVerifier(t, clk, jwt.Options{}, issuer(jwksOf(key)), other)
	if err := v.Update([]*configv1.Issuer{issuer(jwksOf(key)), other}, deny); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		s      *signer
		c      map[string]any
		denied bool
	}{
		{"jti", key, claims("jti", "stolen"), true},
		{"jti, any issuer", otherKey, claims("iss", "https://other.example.com/", "jti", "stolen"), true},
		{"another jti", key, claims("jti", "fine"), false},
		{"jti entry of another issuer", key, claims("jti", "other-only"), false},
		{"jti entry of this issuer", otherKey, claims("iss", "https://other.example.com/", "jti", "other-only"), true},
		{"subject issued before", key, claims("sub", "alice", "iat", before), true},
		{"subject issued at the cut", key, claims("sub", "alice", "iat", after), false},
		{"subject issued after", key, claims("sub", "alice", "iat", t0.Unix()), false},
		{"subject without iat", key, claims("sub", "alice", "iat", absent), true},
		{"subject entry of another issuer", otherKey, claims("iss", "https://other.example.com/", "sub", "alice", "iat", before), false},
		{"another subject", key, claims("sub", "bob", "iat", before), false},
		{"client_id issued before", key, claims("client_id", "leaky-app", "iat", before), true},
		{"azp issued before", key, claims("azp", "leaky-app", "iat", before), true},
		{"client_id, any issuer", otherKey, claims("iss", "https://other.example.com/", "client_id", "leaky-app", "iat", before), true},
		{"client_id issued after", key, claims("client_id", "leaky-app", "iat", t0.Unix()), false},
		{"client_id without iat", key, claims("client_id", "leaky-app", "iat", absent), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tok := tt.s.mint(t, tt.c)
			if tt.denied {
				wantReason(t, v, tok, "revoked")
			} else {
				wantOK(t, v, tok)
			}
		})
	}

	// Within DenyGrace of their expires they still deny (an issuer's
	// leeway could still accept the tokens); past it, nothing.
	clk.Set(later.Add(jwt.DenyGrace - time.Second))
	wantReason(t, v, key.mint(t, claims("jti", "stolen", "iat", later.Unix(), "exp", later.Add(10*time.Minute).Unix())), "revoked")
	clk.Set(later.Add(jwt.DenyGrace))
	wantOK(t, v, key.mint(t, claims("jti", "stolen", "iat", later.Unix(), "exp", later.Add(10*time.Minute).Unix())))
	wantOK(t, v, key.mint(t, claims("sub", "alice", "iat", absent, "exp", later.Add(10*time.Minute).Unix())))
}

// TestDenyCachedToken: a deny entry stops a token already in the cache.
func TestDenyCachedToken(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	v := newVerifier(t, nil, jwt.Options{}, issuer(jwksOf(key)))
	for _, tt := range []struct {
		name  string
		c     map[string]any
		entry *configv1.DenyEntry
	}{
		{"jti", claims("jti", "j-cached"), denyJTI("main", "j-cached")},
		{"subject", claims("sub", "carol"), denySubject("", "carol", t0.Add(time.Second))},
		{"client", claims("client_id", "app-cached"), denyClient("main", "app-cached", t0.Add(time.Second))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tok := key.mint(t, tt.c)
			wantOK(t, v, tok)
			if !jwt.Cached(v, tok) {
				t.Fatal("token not cached")
			}
			if err := v.Update([]*configv1.Issuer{issuer(jwksOf(key))}, []*configv1.DenyEntry{tt.entry}); err != nil {
				t.Fatal(err)
			}
			wantReason(t, v, tok, "revoked")
			if err := v.Update([]*configv1.Issuer{issuer(jwksOf(key))}, nil); err != nil {
				t.Fatal(err)
			}
			wantOK(t, v, tok)
		})
	}
}

func TestDenyDropsExpiredEntries(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	clk := newClock()
	v := newVerifier(t, clk, jwt.Options{}, issuer(jwksOf(key)))
	gone := denyJTI("", "j-gone")
	gone.Expires = timestamppb.New(t0.Add(-jwt.DenyGrace - time.Second))
	if err := v.Update([]*configv1.Issuer{issuer(jwksOf(key))}, []*configv1.DenyEntry{gone, denyJTI("", "j-live")}); err != nil {
		t.Fatal(err)
	}
	if n := jwt.DenyLen(v); n != 1 {
		t.Errorf("DenyLen = %d, want 1: the expired entry dropped", n)
	}
	wantOK(t, v, key.mint(t, claims("jti", "j-gone")))
}
