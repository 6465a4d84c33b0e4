package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

func laneKey(rev uint64, r *configv1.KeyRecord) *configv1.FastLaneEntry {
	return &configv1.FastLaneEntry{Rev: rev, Entry: &configv1.FastLaneEntry_Key{Key: r}}
}

func laneDeny(rev uint64, d *configv1.DenyEntry) *configv1.FastLaneEntry {
	return &configv1.FastLaneEntry{Rev: rev, Entry: &configv1.FastLaneEntry_Deny{Deny: d}}
}

func laneIssuerKeys(rev uint64, issuer, jwks string) *configv1.FastLaneEntry {
	return &configv1.FastLaneEntry{Rev: rev, Entry: &configv1.FastLaneEntry_IssuerKeys{
		IssuerKeys: &configv1.IssuerKeys{Issuer: issuer, JwksJson: jwks}}}
}

// laneGet sends GET /inventory/v1/items with header h and returns the
// status.
func laneGet(t *testing.T, g *gatewaytest.Gateway, h, v string) int {
	t.Helper()
	resp, _ := gatewaytest.Do(t, gatewaytest.HTTP1Client(t), "GET", g.URL()+"/inventory/v1/items", "", map[string]string{h: v})
	return resp.StatusCode
}

// applyVersion applies cfg to g's node again as a new version.
func applyVersion(t *testing.T, g *gatewaytest.Gateway, cfg *configv1.Snapshot, version string) {
	t.Helper()
	cfg = gatewaytest.WithoutAnonymousLimit(proto.CloneOf(cfg))
	cfg.Version = version
	if err := g.Node.Apply(cfg); err != nil {
		t.Fatalf("Apply(%s): %v", version, err)
	}
}

// TestFastLaneKeys: the fast lane's key table is consulted before the
// snapshot's, so that a revocation on the lane overrides the snapshot's
// active record, and a key only the lane has works; a new snapshot
// changes neither.
func TestFastLaneKeys(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	g := gatewaytest.Start(t, f.cfg, nil)
	lane := g.Node.FastLane()
	apiKey := func(k string) int { return laneGet(t, g, "X-Api-Key", k) }

	// The snapshot's record of key-good, revoked on the lane.
	var good *configv1.KeyRecord
	for _, r := range f.cfg.GetKeys() {
		if r.GetKeyId() == "key-good" {
			good = proto.CloneOf(r)
		}
	}
	good.Status = configv1.KeyStatus_KEY_STATUS_REVOKED
	newKey, newRec := gatewaytest.NewKey(t, "key-lane", "app-lane", "tenant-1", "pro", "inventory:read")
	if got := apiKey(f.keys["good"]); got != http.StatusOK {
		t.Fatalf("key-good before the lane: %d, want 200", got)
	}
	if got := apiKey(newKey); got != http.StatusUnauthorized {
		t.Fatalf("a key the node does not know yet: %d, want 401", got)
	}

	if err := lane.Apply([]*configv1.FastLaneEntry{laneKey(1, good), laneKey(2, newRec)}); err != nil {
		t.Fatalf("FastLane().Apply: %v", err)
	}
	check := func(when string) {
		t.Helper()
		if got := apiKey(f.keys["good"]); got != http.StatusUnauthorized {
			t.Errorf("%s: a key the snapshot has active and the lane revoked: %d, want 401", when, got)
		}
		if got := apiKey(newKey); got != http.StatusOK {
			t.Errorf("%s: a key only the lane has: %d, want 200", when, got)
		}
		if got := apiKey(f.keys["reader"]); got != http.StatusOK {
			t.Errorf("%s: a key only the snapshot has: %d, want 200", when, got)
		}
	}
	check("after the lane's changes")
	applyVersion(t, g, f.cfg, "auth-2")
	check("after a new snapshot")
}

// TestFastLaneTokens: the lane's deny entries and issuers' published keys
// join the snapshot's issuers and deny list, and stay joined when a new
// snapshot changes them.
func TestFastLaneTokens(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	g := gatewaytest.Start(t, f.cfg, nil)
	lane := g.Node.FastLane()
	bearer := func(tok string) int { return laneGet(t, g, "Authorization", "Bearer "+tok) }
	claims := func(jti string) map[string]any {
		return map[string]any{"scope": "inventory:read", "plan": "pro", "jti": jti}
	}

	// A key of the issuer's it has published but not yet configured.
	next := gatewaytest.NewIssuer(t, "login")
	next.KID = "login-2"
	denied, other, rotated := f.issuer.Mint(t, claims("lane-denied")), f.issuer.Mint(t, claims("other")), next.Mint(t, claims("rotated"))
	snapDenied := f.issuer.Mint(t, claims("snapshot-denied"))
	for _, tok := range []string{denied, other, snapDenied} {
		if got := bearer(tok); got != http.StatusOK {
			t.Fatalf("a token of the snapshot's issuer before the lane: %d, want 200", got)
		}
	}
	if got := bearer(rotated); got != http.StatusUnauthorized {
		t.Fatalf("a token signed with an unpublished key: %d, want 401", got)
	}

	err := lane.Apply([]*configv1.FastLaneEntry{
		laneDeny(1, &configv1.DenyEntry{Issuer: "login", Match: &configv1.DenyEntry_Jti{Jti: "lane-denied"},
			Expires: timestamppb.New(time.Now().Add(time.Hour))}),
		laneIssuerKeys(2, "login", next.JWKS(t)),
	})
	if err != nil {
		t.Fatalf("FastLane().Apply: %v", err)
	}
	check := func(when string, wantSnapDenied int) {
		t.Helper()
		for _, c := range []struct {
			what string
			tok  string
			want int
		}{
			{"a token the lane denies", denied, http.StatusUnauthorized},
			{"another token of the issuer", other, http.StatusOK},
			{"a token signed with the published key", rotated, http.StatusOK},
			{"a token the snapshot denies", snapDenied, wantSnapDenied},
		} {
			if got := bearer(c.tok); got != c.want {
				t.Errorf("%s: %s: %d, want %d", when, c.what, got, c.want)
			}
		}
	}
	check("after the lane's changes", http.StatusOK)

	// A new snapshot with a deny list of its own and another issuer.
	cfg := proto.CloneOf(f.cfg)
	cfg.DenyList = append(cfg.DenyList, &configv1.DenyEntry{Issuer: "login", Match: &configv1.DenyEntry_Jti{Jti: "snapshot-denied"},
		Expires: timestamppb.New(time.Now().Add(time.Hour))})
	cfg.Issuers = append(cfg.Issuers, gatewaytest.NewIssuer(t, "partner").Config(t))
	applyVersion(t, g, cfg, "auth-2")
	check("after a snapshot with a deny list", http.StatusUnauthorized)

	// And one without: the lane's entries stay, the snapshot's go.
	applyVersion(t, g, f.cfg, "auth-3")
	check("after a snapshot without it", http.StatusOK)
}

// TestFastLaneRefusedIssuerKeys: published keys the node cannot use (here
// an RSA key for an issuer that accepts only ES256) are refused, and do
// not stop later deny entries from reaching the verifier.
func TestFastLaneRefusedIssuerKeys(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	g := gatewaytest.Start(t, f.cfg, nil)
	lane := g.Node.FastLane()
	tok := f.issuer.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro", "jti": "later-denied"})

	// A well-formed key set with a 2048-bit RSA key, which fits none of
	// the issuer's algorithms.
	rsaSet := `{"keys":[{"kty":"RSA","kid":"rsa-1","e":"AQAB","n":"` + rsaModulus + `"}]}`
	if err := lane.Apply([]*configv1.FastLaneEntry{laneIssuerKeys(1, "login", rsaSet)}); err == nil {
		t.Error("publishing keys the verifier refuses: Apply = nil, want an error")
	}
	if got := laneGet(t, g, "Authorization", "Bearer "+tok); got != http.StatusOK {
		t.Fatalf("a token of the issuer after refused keys: %d, want 200", got)
	}
	err := lane.Apply([]*configv1.FastLaneEntry{laneDeny(2, &configv1.DenyEntry{Issuer: "login",
		Match: &configv1.DenyEntry_Jti{Jti: "later-denied"}, Expires: timestamppb.New(time.Now().Add(time.Hour))})})
	if err != nil {
		t.Errorf("a deny entry after refused keys: Apply = %v", err)
	}
	if got := laneGet(t, g, "Authorization", "Bearer "+tok); got != http.StatusUnauthorized {
		t.Errorf("a token denied after refused keys: %d, want 401", got)
	}
	applyVersion(t, g, f.cfg, "auth-2")
	if got := laneGet(t, g, "Authorization", "Bearer "+tok); got != http.StatusUnauthorized {
		t.Errorf("a denied token after a new snapshot: %d, want 401", got)
	}
}

// TestFastLaneKeysNeverRefuseSnapshot: keys published on the lane for an
// issuer the snapshot does not have yet are kept; when a snapshot adds the
// issuer with algorithms those keys do not fit, the snapshot still applies
// (the lane's keys are left out), and the issuer's own keys work.
func TestFastLaneKeysNeverRefuseSnapshot(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	g := gatewaytest.Start(t, f.cfg, nil)
	rsaSet := `{"keys":[{"kty":"RSA","kid":"rsa-1","e":"AQAB","n":"` + rsaModulus + `"}]}`
	if err := g.Node.FastLane().Apply([]*configv1.FastLaneEntry{laneIssuerKeys(1, "partner-idp", rsaSet)}); err != nil {
		t.Fatalf("keys of an issuer the snapshot lacks: Apply = %v", err)
	}
	partner := gatewaytest.NewIssuer(t, "partner-idp")
	cfg := proto.CloneOf(f.cfg)
	cfg.Issuers = append(cfg.Issuers, partner.Config(t)) // ES256 only
	applyVersion(t, g, cfg, "with-partner")
	if got := laneGet(t, g, "Authorization", "Bearer "+partner.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro"})); got != http.StatusOK {
		t.Errorf("a token of the new issuer: %d, want 200", got)
	}
}

// rsaModulus is the modulus of a 2048-bit RSA key, base64url.
const rsaModulus = "" +
	"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMs" +
	"tn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5h" +
	"ajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"
