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

	// Within the issuer's leeway of their expires they still deny (the
	// leeway could still accept the tokens); past it, nothing.
	clk.Set(later.Add(30*time.Second - time.Second))
	wantReason(t, v, key.mint(t, claims("jti", "stolen", "iat", later.Unix(), "exp", later.Add(10*time.Minute).Unix())), "revoked")
	clk.Set(later.Add(30 * time.Second))
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
	gone.Expires = timestamppb.New(t0.Add(-30*time.Second - time.Second)) // and the leeway
	if err := v.Update([]*configv1.Issuer{issuer(jwksOf(key))}, []*configv1.DenyEntry{gone, denyJTI("", "j-live")}); err != nil {
		t.Fatal(err)
	}
	if n := jwt.DenyLen(v); n != 1 {
		t.Errorf("DenyLen = %d, want 1: the expired entry dropped", n)
	}
	wantOK(t, v, key.mint(t, claims("jti", "j-gone")))
}

// TestDenyOutlivesItsExpiry: a deny entry lasts until every token it
// covers is dead, whatever expires its caller asked for: a jti entry
// until its token's exp (given, or bounded by issued_before plus the
// issuer's max_token_lifetime), a subject or client entry until
// issued_before plus the lifetime; both plus the leeway.
func TestDenyOutlivesItsExpiry(t *testing.T) {
	t.Parallel()
	key := newSigner(t, "ES256", "k1")
	hourIssuer := issuer(jwksOf(key), func(is *configv1.Issuer) { is.MaxTokenLifetime = durationpbNew(time.Hour) })
	asked := timestamppb.New(t0.Add(15 * time.Minute)) // the default of porticoctl deny add
	withCut := &configv1.DenyEntry{Match: &configv1.DenyEntry_Jti{Jti: "hour-cut"}, IssuedBefore: timestamppb.New(t0), Expires: asked}
	withExp := &configv1.DenyEntry{Issuer: "main", Match: &configv1.DenyEntry_Jti{Jti: "hour-exp"}, TokenExpires: timestamppb.New(t0.Add(time.Hour)), Expires: asked}
	clk := newClock()
	v := newVerifier(t, clk, jwt.Options{}, hourIssuer)
	if err := v.Update([]*configv1.Issuer{hourIssuer}, []*configv1.DenyEntry{withCut, withExp}); err != nil {
		t.Fatal(err)
	}
	// Tokens that live an hour, which this issuer allows.
	cut := key.mint(t, claims("jti", "hour-cut", "iat", t0.Add(-time.Second).Unix(), "exp", t0.Add(time.Hour-time.Second).Unix()))
	exp := key.mint(t, claims("jti", "hour-exp", "iat", absent, "exp", t0.Add(time.Hour).Unix()))
	clk.Set(t0.Add(20 * time.Minute))
	wantReason(t, v, cut, "revoked")
	wantReason(t, v, exp, "revoked")
	// The last second the leeway would accept them.
	clk.Set(t0.Add(time.Hour + 28*time.Second))
	wantReason(t, v, cut, "revoked")
	wantReason(t, v, exp, "revoked")

	// A subject entry asked to lapse a minute after its cut lasts the
	// default lifetime (15 minutes plus the 30 s leeway) and the leeway
	// past it; so does one for every issuer, for the longest lifetime.
	const lapse = 15*time.Minute + 30*time.Second + 30*time.Second
	other := &configv1.Issuer{Name: "other", Issuer: "https://other.example.com/", Audiences: []string{"api"}, JwksJson: jwksOf(key),
		MaxTokenLifetime: durationpbNew(time.Hour)}
	clk.Set(t0)
	sub := denySubject("main", "alice", t0)
	sub.Expires = timestamppb.New(t0.Add(time.Minute))
	client := denyClient("", "app-1", t0)
	client.Expires = sub.Expires
	if err := v.Update([]*configv1.Issuer{issuer(jwksOf(key)), other}, []*configv1.DenyEntry{sub, client}); err != nil {
		t.Fatal(err)
	}
	// The longest-lived token the cut covers: exp plus leeway is the lapse.
	last := key.mint(t, claims("sub", "alice", "iat", t0.Add(-time.Second).Unix(), "exp", t0.Add(lapse-30*time.Second-time.Second).Unix()))
	noIat := func() string {
		return key.mint(t, claims("sub", "alice", "iat", absent, "exp", clk.Now().Add(5*time.Minute).Unix()))
	}
	otherClient := key.mint(t, claims("iss", "https://other.example.com/", "client_id", "app-1", "iat", t0.Add(-time.Second).Unix(), "exp", t0.Add(time.Hour-time.Second).Unix()))
	clk.Set(t0.Add(lapse - 2*time.Second))
	wantReason(t, v, last, "revoked")
	wantReason(t, v, noIat(), "revoked")
	clk.Set(t0.Add(lapse))
	wantOK(t, v, noIat())
	wantReason(t, v, otherClient, "revoked")
	// The other issuer's lifetime and leeway: the token's last second.
	clk.Set(t0.Add(time.Hour + 28*time.Second))
	wantReason(t, v, otherClient, "revoked")

	// An issuer whose lifetime is raised while an entry is held gets the
	// entry's longer life at once.
	clk.Set(t0.Add(20 * time.Minute))
	long := key.mint(t, claims("sub", "alice", "iat", t0.Add(-time.Second).Unix(), "exp", t0.Add(50*time.Minute).Unix()))
	if err := v.Update([]*configv1.Issuer{hourIssuer, other}, []*configv1.DenyEntry{sub, client}); err != nil {
		t.Fatal(err)
	}
	wantReason(t, v, long, "revoked")
}
