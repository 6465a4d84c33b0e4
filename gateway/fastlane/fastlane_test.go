package fastlane_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/auth/keytable"
	"github.com/portico-gw/portico/gateway/denyentry"
	"github.com/portico-gw/portico/gateway/fastlane"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// t0 is the tests' clock.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// record returns an active key record for id; the key's sha256 is derived
// from id, so the same id is the same key.
func record(id string) *configv1.KeyRecord {
	sum := sha256.Sum256([]byte("key of " + id))
	return &configv1.KeyRecord{
		Sha256: sum[:], KeyId: id, AppId: "app-" + id, TenantId: "acme", Plan: "pro",
		Status: configv1.KeyStatus_KEY_STATUS_ACTIVE,
	}
}

func revoked(id string) *configv1.KeyRecord {
	r := record(id)
	r.Status = configv1.KeyStatus_KEY_STATUS_REVOKED
	return r
}

func onPlan(id, plan string) *configv1.KeyRecord {
	r := record(id)
	r.Plan = plan
	return r
}

func key(rev uint64, r *configv1.KeyRecord) *configv1.FastLaneEntry {
	return &configv1.FastLaneEntry{Rev: rev, Entry: &configv1.FastLaneEntry_Key{Key: r}}
}

func deny(rev uint64, d *configv1.DenyEntry) *configv1.FastLaneEntry {
	return &configv1.FastLaneEntry{Rev: rev, Entry: &configv1.FastLaneEntry_Deny{Deny: d}}
}

func issuerKeys(rev uint64, issuer, jwks string) *configv1.FastLaneEntry {
	return &configv1.FastLaneEntry{Rev: rev, Entry: &configv1.FastLaneEntry_IssuerKeys{
		IssuerKeys: &configv1.IssuerKeys{Issuer: issuer, JwksJson: jwks}}}
}

// denyJTI denies one token of issuer until expires.
func denyJTI(issuer, id string, expires time.Time) *configv1.DenyEntry {
	return &configv1.DenyEntry{Issuer: issuer, Match: &configv1.DenyEntry_Jti{Jti: id}, Expires: timestamppb.New(expires)}
}

// denySubject denies the tokens of sub issued before before.
func denySubject(sub string, before, expires time.Time) *configv1.DenyEntry {
	return &configv1.DenyEntry{Match: &configv1.DenyEntry_Subject{Subject: sub},
		IssuedBefore: timestamppb.New(before), Expires: timestamppb.New(expires)}
}

// jwks is a key set of one (fake) key per kid.
func jwks(kids ...string) string {
	keys := make([]string, len(kids))
	for i, kid := range kids {
		keys[i] = fmt.Sprintf(`{"kty":"EC","crv":"P-256","kid":%q,"x":"x-%s","y":"y-%s"}`, kid, kid, kid)
	}
	return `{"keys":[` + strings.Join(keys, ",") + `]}`
}

// recorder is a Lane's SetKeys and SetTokens: it keeps what they were
// last given and counts the calls.
type recorder struct {
	mu         sync.Mutex
	keys       *keytable.Table
	keyCalls   int
	deny       []*configv1.DenyEntry
	issuers    map[string]string
	tokenCalls int
	// refuse, if set, is SetTokens's answer; on an error the recorder
	// keeps what it had, as the node does.
	refuse func(deny []*configv1.DenyEntry, issuers map[string]string) error
}

func (r *recorder) options(now func() time.Time) fastlane.Options {
	return fastlane.Options{
		SetKeys: func(t *keytable.Table) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.keys = t
			r.keyCalls++
		},
		SetTokens: func(deny []*configv1.DenyEntry, issuers map[string]string) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.tokenCalls++
			if r.refuse != nil {
				if err := r.refuse(deny, issuers); err != nil {
					return err
				}
			}
			r.deny, r.issuers = deny, issuers
			return nil
		},
		Now: now,
	}
}

// tokens returns what SetTokens last installed and how often it was called.
func (r *recorder) tokens() ([]*configv1.DenyEntry, map[string]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deny, r.issuers, r.tokenCalls
}

// newLane returns a Lane at t0 and its recorder.
func newLane(t *testing.T) (*fastlane.Lane, *recorder) {
	t.Helper()
	r := &recorder{}
	l := fastlane.New(r.options(func() time.Time { return t0 }))
	t.Cleanup(l.Close)
	return l, r
}

func mustApply(t *testing.T, l *fastlane.Lane, entries ...*configv1.FastLaneEntry) {
	t.Helper()
	if err := l.Apply(entries); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// lookup returns the lane's record of r's key.
func lookup(l *fastlane.Lane, r *configv1.KeyRecord) (keytable.Record, bool) {
	return l.Keys().Lookup([32]byte(r.GetSha256()))
}

func TestKeyRevisions(t *testing.T) {
	t.Parallel()
	l, rec := newLane(t)
	steps := []struct {
		name        string
		entry       *configv1.FastLaneEntry
		wantRev     uint64
		wantRevoked bool
		wantPlan    string
	}{
		{"first", key(5, record("a")), 5, false, "pro"},
		{"older", key(3, revoked("a")), 5, false, "pro"},
		{"equal", key(5, revoked("a")), 5, false, "pro"},
		{"newer", key(6, onPlan("a", "gold")), 6, false, "gold"},
		{"newer revocation", key(9, revoked("a")), 9, true, "pro"},
		{"older after revocation", key(7, record("a")), 9, true, "pro"},
	}
	for _, s := range steps {
		mustApply(t, l, s.entry)
		got, ok := lookup(l, record("a"))
		if !ok {
			t.Fatalf("%s: Lookup(a) found nothing", s.name)
		}
		if got.Rev != s.wantRev || got.Revoked != s.wantRevoked || got.Plan != s.wantPlan {
			t.Errorf("%s: Lookup(a) = rev %d revoked %v plan %q, want rev %d revoked %v plan %q",
				s.name, got.Rev, got.Revoked, got.Plan, s.wantRev, s.wantRevoked, s.wantPlan)
		}
	}
	if got := l.Keys().Len(); got != 1 {
		t.Errorf("Keys().Len() = %d, want 1", got)
	}
	if got := l.MaxRev(); got != 9 {
		t.Errorf("MaxRev() = %d, want 9", got)
	}
	if _, _, calls := rec.tokens(); calls != 0 {
		t.Errorf("SetTokens called %d times for key changes only, want 0", calls)
	}
}

func TestDenyRevisions(t *testing.T) {
	t.Parallel()
	l, rec := newLane(t)
	hour := t0.Add(time.Hour)
	steps := []struct {
		name      string
		entry     *configv1.FastLaneEntry
		want      []*configv1.DenyEntry
		wantCalls int
	}{
		{"first", deny(5, denyJTI("login", "t1", hour)), []*configv1.DenyEntry{denyJTI("login", "t1", hour)}, 1},
		{"older", deny(4, denyJTI("login", "t1", hour.Add(time.Hour))), []*configv1.DenyEntry{denyJTI("login", "t1", hour)}, 1},
		{"equal", deny(5, denyJTI("login", "t1", hour.Add(2*time.Hour))), []*configv1.DenyEntry{denyJTI("login", "t1", hour)}, 1},
		{"newer", deny(7, denyJTI("login", "t1", hour.Add(3*time.Hour))), []*configv1.DenyEntry{denyJTI("login", "t1", hour.Add(3*time.Hour))}, 2},
		// Another issuer, or another cut-off time, is another entry.
		{"other issuer", deny(2, denyJTI("other", "t1", hour)), []*configv1.DenyEntry{
			denyJTI("login", "t1", hour.Add(3*time.Hour)), denyJTI("other", "t1", hour)}, 3},
		{"subject", deny(8, denySubject("u1", t0, hour)), []*configv1.DenyEntry{
			denySubject("u1", t0, hour), denyJTI("login", "t1", hour.Add(3*time.Hour)), denyJTI("other", "t1", hour)}, 4},
		{"subject, later cut-off", deny(3, denySubject("u1", t0.Add(time.Minute), hour)), []*configv1.DenyEntry{
			denySubject("u1", t0, hour), denySubject("u1", t0.Add(time.Minute), hour),
			denyJTI("login", "t1", hour.Add(3*time.Hour)), denyJTI("other", "t1", hour)}, 5},
	}
	for _, s := range steps {
		mustApply(t, l, s.entry)
		got, _, calls := rec.tokens()
		if diff := cmp.Diff(s.want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s: SetTokens deny entries (-want +got):\n%s", s.name, diff)
		}
		if calls != s.wantCalls {
			t.Errorf("%s: SetTokens called %d times, want %d", s.name, calls, s.wantCalls)
		}
	}
}

func TestIssuerKeyRevisions(t *testing.T) {
	t.Parallel()
	l, rec := newLane(t)
	steps := []struct {
		name      string
		entry     *configv1.FastLaneEntry
		want      map[string]string
		wantCalls int
	}{
		{"first", issuerKeys(5, "login", jwks("k1")), map[string]string{"login": jwks("k1")}, 1},
		{"older", issuerKeys(4, "login", jwks("k0")), map[string]string{"login": jwks("k1")}, 1},
		{"equal", issuerKeys(5, "login", jwks("k9")), map[string]string{"login": jwks("k1")}, 1},
		{"newer", issuerKeys(6, "login", jwks("k1", "k2")), map[string]string{"login": jwks("k1", "k2")}, 2},
		{"other issuer", issuerKeys(1, "other", jwks("o1")), map[string]string{"login": jwks("k1", "k2"), "other": jwks("o1")}, 3},
	}
	for _, s := range steps {
		mustApply(t, l, s.entry)
		_, got, calls := rec.tokens()
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("%s: SetTokens issuer keys (-want +got):\n%s", s.name, diff)
		}
		if calls != s.wantCalls {
			t.Errorf("%s: SetTokens called %d times, want %d", s.name, calls, s.wantCalls)
		}
	}
	if got := l.MaxRev(); got != 6 {
		t.Errorf("MaxRev() = %d, want 6", got)
	}
}

// TestOrderIndependence applies one set of entries in random orders, with
// duplicates, in batches of random sizes: the newest entry of each
// identity always wins.
func TestOrderIndependence(t *testing.T) {
	t.Parallel()
	hour := t0.Add(time.Hour)
	entries := []*configv1.FastLaneEntry{
		key(1, onPlan("a", "free")), key(4, record("a")), key(9, revoked("a")),
		key(2, record("b")), key(7, revoked("b")),
		key(5, record("c")),
		key(14, revoked("d")), key(10, record("d")),
		deny(3, denyJTI("login", "x", hour)), deny(8, denyJTI("login", "x", hour.Add(time.Hour))),
		deny(6, denySubject("s", t0, hour)), deny(11, denySubject("s", t0.Add(time.Second), hour)),
		issuerKeys(1, "login", jwks("a")), issuerKeys(12, "login", jwks("b")), issuerKeys(13, "other", jwks("c")),
		issuerKeys(15, "login", jwks("a", "b")),
	}
	wantKeys := map[string]keytable.Record{
		"a": {KeyID: "a", AppID: "app-a", TenantID: "acme", Plan: "pro", Revoked: true, Rev: 9},
		"b": {KeyID: "b", AppID: "app-b", TenantID: "acme", Plan: "pro", Revoked: true, Rev: 7},
		"c": {KeyID: "c", AppID: "app-c", TenantID: "acme", Plan: "pro", Rev: 5},
		"d": {KeyID: "d", AppID: "app-d", TenantID: "acme", Plan: "pro", Revoked: true, Rev: 14},
	}
	wantDeny := []*configv1.DenyEntry{
		denySubject("s", t0, hour), denySubject("s", t0.Add(time.Second), hour), denyJTI("login", "x", hour.Add(time.Hour)),
	}
	wantIssuers := map[string]string{"login": jwks("a", "b"), "other": jwks("c")}

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	for trial := range 50 {
		order := make([]*configv1.FastLaneEntry, 0, 2*len(entries))
		order = append(order, entries...)
		for range rng.IntN(len(entries)) {
			order = append(order, entries[rng.IntN(len(entries))])
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })

		l, rec := newLane(t)
		for rest := order; len(rest) > 0; {
			n := 1 + rng.IntN(len(rest))
			mustApply(t, l, rest[:n]...)
			rest = rest[n:]
		}

		where := fmt.Sprintf("trial %d (seed %d)", trial, seed)
		if got := l.Keys().Len(); got != len(wantKeys) {
			t.Errorf("%s: Keys().Len() = %d, want %d", where, got, len(wantKeys))
		}
		for id, want := range wantKeys {
			got, ok := lookup(l, record(id))
			if !ok || got != want {
				t.Errorf("%s: Lookup(%s) = %+v, %v; want %+v", where, id, got, ok, want)
			}
		}
		denied, issuers, _ := rec.tokens()
		if diff := cmp.Diff(wantDeny, denied, protocmp.Transform()); diff != "" {
			t.Errorf("%s: deny entries (-want +got):\n%s", where, diff)
		}
		if diff := cmp.Diff(wantIssuers, issuers); diff != "" {
			t.Errorf("%s: issuer keys (-want +got):\n%s", where, diff)
		}
		if got := l.MaxRev(); got != 15 {
			t.Errorf("%s: MaxRev() = %d, want 15", where, got)
		}
		if t.Failed() {
			return
		}
	}
}

// TestExpiredDenyEntries: the lane keeps a deny entry until
// denyentry.KeepUntil, past its expires, since it does not know the
// issuers' lifetimes (the verifier applies them); then it drops it.
func TestExpiredDenyEntries(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := t0
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	rec := &recorder{}
	l := fastlane.New(rec.options(clock))
	t.Cleanup(l.Close)

	live := denyJTI("login", "live", t0.Add(time.Hour))
	// Past its expires but within the most leeway an issuer may give.
	inLeeway := denyJTI("login", "in-leeway", t0.Add(-denyentry.MaxLeeway/2))
	gone := denyJTI("login", "gone", t0.Add(-denyentry.MaxLeeway-time.Second))
	// Asked to lapse 15 minutes after its cut, an hour ago; a token of
	// the cut's may live a day.
	cut := denySubject("user-1", t0.Add(-time.Hour), t0.Add(-45*time.Minute))
	// The token's exp is what counts, not the expires asked for.
	longToken := denyJTI("login", "long-token", t0.Add(-time.Hour))
	longToken.TokenExpires = timestamppb.New(t0.Add(time.Hour))
	mustApply(t, l, deny(1, live), deny(2, inLeeway), deny(3, gone), deny(4, cut), deny(5, longToken))
	got, _, _ := rec.tokens()
	if diff := cmp.Diff([]*configv1.DenyEntry{cut, inLeeway, live, longToken}, got, protocmp.Transform()); diff != "" {
		t.Errorf("deny entries after applying an expired one (-want +got):\n%s", diff)
	}

	// A newer entry that has expired takes an older one away.
	replaced := denyJTI("login", "live", t0.Add(-time.Hour))
	mustApply(t, l, deny(6, replaced))
	got, _, _ = rec.tokens()
	if diff := cmp.Diff([]*configv1.DenyEntry{cut, inLeeway, longToken}, got, protocmp.Transform()); diff != "" {
		t.Errorf("deny entries after an expired newer entry (-want +got):\n%s", diff)
	}

	// Entries past KeepUntil go with the next change, whatever it is.
	later := denyJTI("login", "later", t0.Add(2*time.Hour))
	mustApply(t, l, deny(7, later))
	advance(time.Hour + denyentry.MaxLeeway + time.Second)
	_, _, calls := rec.tokens()
	mustApply(t, l, key(8, record("k")))
	got, _, after := rec.tokens()
	if after != calls+1 {
		t.Errorf("SetTokens called %d times for a key change that expired deny entries, want 1", after-calls)
	}
	if diff := cmp.Diff([]*configv1.DenyEntry{cut, later}, got, protocmp.Transform()); diff != "" {
		t.Errorf("deny entries after the clock passed the token's exp (-want +got):\n%s", diff)
	}
	// The subject entry lasts the longest lifetime an issuer may have
	// past its cut, and the leeway.
	advance(-time.Hour - denyentry.MaxLeeway - time.Second) // back to t0
	advance(denyentry.MaxLifetime - time.Hour + denyentry.MaxLeeway - time.Second)
	mustApply(t, l, key(9, record("k2")))
	if got, _, _ = rec.tokens(); len(got) != 1 || got[0].GetSubject() != "user-1" {
		t.Errorf("deny entries a second before the cut's KeepUntil = %v, want the subject entry", got)
	}
	advance(time.Second)
	mustApply(t, l, key(10, record("k3")))
	if got, _, _ = rec.tokens(); len(got) != 0 {
		t.Errorf("deny entries at the cut's KeepUntil = %v, want none", got)
	}
}

func TestInvalidEntries(t *testing.T) {
	t.Parallel()
	l, rec := newLane(t)
	hour := t0.Add(time.Hour)
	short := record("short")
	short.Sha256 = short.Sha256[:31]
	noKeyID := record("no-id")
	noKeyID.KeyId = ""
	entries := []*configv1.FastLaneEntry{
		0:  key(1, record("good")),
		1:  key(0, record("rev-zero")),
		2:  key(2, short),
		3:  deny(3, &configv1.DenyEntry{Issuer: "login", Expires: timestamppb.New(hour)}),
		4:  deny(4, denyJTI("login", "", hour)),
		5:  deny(5, &configv1.DenyEntry{Match: &configv1.DenyEntry_Subject{Subject: "u"}, Expires: timestamppb.New(hour)}),
		6:  deny(6, &configv1.DenyEntry{Match: &configv1.DenyEntry_Jti{Jti: "no-expires"}}),
		7:  issuerKeys(7, "login", `{"keys":`),
		8:  issuerKeys(8, "login", `{"keys":"nope"}`),
		9:  issuerKeys(9, "login", `{"other":[]}`),
		10: issuerKeys(10, "", jwks("k")),
		11: {Rev: 11},
		12: deny(12, denyJTI("login", "good", hour)),
		13: issuerKeys(13, "other", jwks("o1")),
		14: key(14, noKeyID),
		15: key(15, record("also-good")),
		16: deny(0, denyJTI("login", "rev-zero", hour)),
	}
	bad := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 16}
	err := l.Apply(entries)
	var ee *fastlane.EntryError
	if !errors.As(err, &ee) {
		t.Fatalf("Apply = %v, want an *EntryError", err)
	}
	var listed []int
	for _, p := range ee.Problems {
		var i int
		if _, err := fmt.Sscanf(p, "entries[%d]:", &i); err != nil {
			t.Errorf("problem %q names no entry", p)
			continue
		}
		listed = append(listed, i)
	}
	slices.Sort(listed)
	if diff := cmp.Diff(bad, listed); diff != "" {
		t.Errorf("entries refused (-want +got):\n%s\nproblems: %q", diff, ee.Problems)
	}
	if !strings.Contains(err.Error(), "refused 13 entries") || !strings.Contains(err.Error(), "and 3 more") {
		t.Errorf("Error() = %q, want a count and the first ten", err)
	}

	for _, id := range []string{"good", "also-good"} {
		if _, ok := lookup(l, record(id)); !ok {
			t.Errorf("valid key %s was not applied with the refused ones", id)
		}
	}
	for _, r := range []*configv1.KeyRecord{record("rev-zero"), noKeyID} {
		if _, ok := lookup(l, r); ok {
			t.Errorf("refused key %s was applied", r.GetKeyId())
		}
	}
	if got := l.Keys().Len(); got != 2 {
		t.Errorf("Keys().Len() = %d, want 2", got)
	}
	denied, issuers, _ := rec.tokens()
	if diff := cmp.Diff([]*configv1.DenyEntry{denyJTI("login", "good", hour)}, denied, protocmp.Transform()); diff != "" {
		t.Errorf("deny entries (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"other": jwks("o1")}, issuers); diff != "" {
		t.Errorf("issuer keys (-want +got):\n%s", diff)
	}
	if got := l.MaxRev(); got < 15 {
		t.Errorf("MaxRev() = %d, want at least 15", got)
	}

	// Two keys with one key id in the same call: the second is refused.
	err = l.Apply([]*configv1.FastLaneEntry{key(20, record("dup")), key(21, onPlan("other-key", "free")), key(22, func() *configv1.KeyRecord {
		r := record("dup-2")
		r.KeyId = "dup"
		return r
	}())})
	if !errors.As(err, &ee) || len(ee.Problems) != 1 || !strings.HasPrefix(ee.Problems[0], "entries[2]:") {
		t.Errorf("Apply with a duplicate key id = %v, want entries[2] refused", err)
	}
	for _, id := range []string{"dup", "other-key"} {
		if _, ok := lookup(l, record(id)); !ok {
			t.Errorf("key %s not applied beside a refused duplicate", id)
		}
	}
}

func TestApplySignedStale(t *testing.T) {
	t.Parallel()
	l, rec := newLane(t)
	hour := t0.Add(time.Hour)
	if err := l.ApplySigned(5, []*configv1.FastLaneEntry{key(3, record("a")), deny(4, denyJTI("login", "t", hour))}); err != nil {
		t.Fatalf("ApplySigned(5) = %v", err)
	}
	if got := l.SignedSeq(); got != 5 {
		t.Fatalf("SignedSeq() = %d, want 5", got)
	}
	keys := l.Keys()
	denyBefore, _, tokenCalls := rec.tokens()
	for _, seq := range []uint64{5, 4, 0} {
		err := l.ApplySigned(seq, []*configv1.FastLaneEntry{
			key(10, revoked("a")), key(11, record("b")), deny(12, denyJTI("login", "u", hour)), issuerKeys(13, "login", jwks("k")),
		})
		if !errors.Is(err, fastlane.ErrStale) {
			t.Errorf("ApplySigned(%d) after 5 = %v, want ErrStale", seq, err)
		}
	}
	if l.Keys() != keys {
		t.Error("a refused signed snapshot changed the key table")
	}
	if got, _ := lookup(l, record("a")); got.Revoked {
		t.Error("a refused signed snapshot revoked a key")
	}
	denied, _, calls := rec.tokens()
	if calls != tokenCalls || len(denied) != len(denyBefore) {
		t.Errorf("a refused signed snapshot called SetTokens (%d calls, %d deny entries; had %d, %d)", calls, len(denied), tokenCalls, len(denyBefore))
	}
	if got := l.SignedSeq(); got != 5 {
		t.Errorf("SignedSeq() = %d after refused snapshots, want 5", got)
	}
	if got := l.MaxRev(); got != 4 {
		t.Errorf("MaxRev() = %d after refused snapshots, want 4", got)
	}

	// Stream updates do not move the sequence; a newer snapshot applies.
	mustApply(t, l, key(20, record("c")))
	if got := l.SignedSeq(); got != 5 {
		t.Errorf("SignedSeq() = %d after a stream update, want 5", got)
	}
	if err := l.ApplySigned(6, []*configv1.FastLaneEntry{key(10, revoked("a"))}); err != nil {
		t.Fatalf("ApplySigned(6) = %v", err)
	}
	if got, _ := lookup(l, record("a")); !got.Revoked || l.SignedSeq() != 6 {
		t.Errorf("after ApplySigned(6): revoked %v, SignedSeq %d; want true, 6", got.Revoked, l.SignedSeq())
	}
}

// TestCompaction starts compactions with bursts of keys and applies
// single changes, new keys and revocations, while they run: every change
// must survive the compaction.
func TestCompaction(t *testing.T) {
	t.Parallel()
	var (
		mu sync.Mutex
		// compacting is set from the table that started a compaction to
		// the one the compaction published.
		compacting  bool
		prev        *keytable.Table
		published   *keytable.Table
		during      int // tables published while a compaction ran
		compactions int
		// duringEach and results are, for each compaction, the tables
		// published while it ran and the overlay length of the table it
		// published: every change made meanwhile was to a distinct key,
		// so they must match.
		duringEach, results []int
		cur                 int
	)
	l := fastlane.New(fastlane.Options{SetKeys: func(t *keytable.Table) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case compacting && t.OverlayLen() < prev.OverlayLen():
			compacting = false
			compactions++
			duringEach, results = append(duringEach, cur), append(results, t.OverlayLen())
			cur = 0
		case compacting:
			during++
			cur++
		case t.ShouldCompact():
			compacting = true
		}
		prev, published = t, t
	}})
	t.Cleanup(l.Close)
	running := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return compacting
	}

	latest := map[string]*configv1.KeyRecord{}
	var rev uint64
	apply := func(recs ...*configv1.KeyRecord) {
		t.Helper()
		entries := make([]*configv1.FastLaneEntry, len(recs))
		for i, r := range recs {
			rev++
			entries[i] = key(rev, r)
			latest[r.GetKeyId()] = r
		}
		mustApply(t, l, entries...)
	}

	deadline := time.Now().Add(60 * time.Second)
	next := 0 // the number of the next new key
	for round := 0; ; round++ {
		// A burst beyond the overlay's limit starts a compaction; the
		// first, larger, makes the base big enough that compactions take
		// a while.
		size := 4097
		if round == 0 {
			size = 60_000
		}
		burst := make([]*configv1.KeyRecord, size)
		for i := range burst {
			burst[i] = record(fmt.Sprintf("k%d", next))
			next++
		}
		apply(burst...)
		if !running() {
			t.Fatalf("round %d: a burst of %d keys (overlay %d) started no compaction", round, size, l.Keys().OverlayLen())
		}
		for i := 0; running(); i++ {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the compaction has not finished after 60s", round)
			}
			if i%2 == 0 {
				apply(revoked(burst[i].GetKeyId()))
			} else {
				apply(record(fmt.Sprintf("k%d", next)))
				next++
			}
		}
		mu.Lock()
		n := during
		mu.Unlock()
		// Both kinds of change, a few times.
		if n >= 4 {
			break
		}
		if round == 30 {
			t.Fatalf("%d changes were applied during a compaction in %d rounds, want 4", n, round+1)
		}
	}

	mu.Lock()
	t.Logf("%d compactions, %d tables published during them, overlays after: %v", compactions, during, results)
	last := published
	if diff := cmp.Diff(duringEach, results); diff != "" {
		t.Errorf("changes during each compaction (-) and its table's overlay length (+):\n%s", diff)
	}
	mu.Unlock()
	tbl := l.Keys()
	if tbl != last {
		t.Error("Keys() is not the table SetKeys was last given")
	}
	if tbl.ShouldCompact() {
		t.Errorf("after the compactions the overlay holds %d keys", tbl.OverlayLen())
	}
	if got := tbl.Len(); got != len(latest) {
		t.Errorf("Keys().Len() = %d, want %d", got, len(latest))
	}
	missing, wrong := 0, 0
	for id, r := range latest {
		got, ok := tbl.Lookup([32]byte(r.GetSha256()))
		switch {
		case !ok:
			missing++
		case got.Revoked != (r.GetStatus() == configv1.KeyStatus_KEY_STATUS_REVOKED):
			wrong++
		default:
			continue
		}
		if missing+wrong <= 5 {
			t.Errorf("key %s: found %v, revoked %v; want revoked %v", id, ok, got.Revoked, r.GetStatus() == configv1.KeyStatus_KEY_STATUS_REVOKED)
		}
	}
	if missing+wrong > 0 {
		t.Errorf("%d of %d keys missing, %d with a stale status", missing, len(latest), wrong)
	}
}

func TestSetKeys(t *testing.T) {
	t.Parallel()
	l, rec := newLane(t)
	if l.Keys() != nil {
		t.Fatalf("a new Lane's Keys() = %v, want nil (empty)", l.Keys())
	}
	for i, entries := range [][]*configv1.FastLaneEntry{
		{key(1, record("a"))},
		{key(2, record("b")), key(3, revoked("a"))},
		{deny(4, denyJTI("", "j", t0.Add(time.Hour))), key(5, record("c"))},
	} {
		mustApply(t, l, entries...)
		rec.mu.Lock()
		got, calls := rec.keys, rec.keyCalls
		rec.mu.Unlock()
		if got != l.Keys() {
			t.Errorf("after Apply %d: SetKeys was not given Keys()", i)
		}
		if calls != i+1 {
			t.Errorf("after Apply %d: SetKeys called %d times, want %d", i, calls, i+1)
		}
	}
	if got, _ := lookup(l, record("a")); !got.Revoked {
		t.Error("key a not revoked")
	}
	// Token entries alone do not touch the keys.
	mustApply(t, l, issuerKeys(6, "login", jwks("k")))
	rec.mu.Lock()
	calls := rec.keyCalls
	rec.mu.Unlock()
	if calls != 3 {
		t.Errorf("SetKeys called for an issuer-keys entry (%d calls, want 3)", calls)
	}
}

// TestSetTokensRefused: keys the node refuses are not kept, so they do not
// make it refuse every later change; the deny entries beside them still
// reach it.
func TestSetTokensRefused(t *testing.T) {
	t.Parallel()
	l, rec := newLane(t)
	hour := t0.Add(time.Hour)
	rec.refuse = func(_ []*configv1.DenyEntry, issuers map[string]string) error {
		if strings.Contains(issuers["login"], `"bad"`) {
			return errors.New("issuer login: kid bad: unsupported curve")
		}
		return nil
	}
	mustApply(t, l, issuerKeys(1, "login", jwks("good")))
	err := l.Apply([]*configv1.FastLaneEntry{issuerKeys(2, "login", jwks("good", "bad")), deny(3, denyJTI("login", "t1", hour)),
		issuerKeys(4, "other", jwks("o1"))})
	var ee *fastlane.EntryError
	if !errors.As(err, &ee) || len(ee.Problems) != 1 || !strings.Contains(ee.Problems[0], "unsupported curve") {
		t.Fatalf("Apply with keys the node refuses = %v, want one problem saying why", err)
	}
	denied, issuers, _ := rec.tokens()
	if diff := cmp.Diff(map[string]string{"login": jwks("good"), "other": jwks("o1")}, issuers); diff != "" {
		t.Errorf("issuer keys after a refusal (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]*configv1.DenyEntry{denyJTI("login", "t1", hour)}, denied, protocmp.Transform()); diff != "" {
		t.Errorf("deny entries beside refused keys (-want +got):\n%s", diff)
	}

	// A later deny entry still reaches the node.
	mustApply(t, l, deny(5, denyJTI("login", "t2", hour)))
	denied, _, _ = rec.tokens()
	if len(denied) != 2 {
		t.Errorf("after a refusal, a later deny entry: SetTokens has %d deny entries, want 2", len(denied))
	}
	// The refused keys were not kept: the same entry is refused again,
	// and a newer, good one applies.
	if err := l.Apply([]*configv1.FastLaneEntry{issuerKeys(2, "login", jwks("good", "bad"))}); !errors.As(err, &ee) {
		t.Errorf("applying the refused keys again = %v, want an *EntryError", err)
	}
	mustApply(t, l, issuerKeys(6, "login", jwks("good", "new")))
	if _, issuers, _ := rec.tokens(); issuers["login"] != jwks("good", "new") {
		t.Errorf("issuer login's keys = %s, want %s", issuers["login"], jwks("good", "new"))
	}
}
