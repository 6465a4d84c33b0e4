package keytable_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/apikey"
	"github.com/portico-gw/portico/gateway/auth/keytable"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// newKey returns a fresh key and an active record for it.
func newKey(t testing.TB, keyID string, scopes ...string) (string, *configv1.KeyRecord) {
	t.Helper()
	k, err := apikey.Generate(apikey.Live, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h := apikey.Hash(k)
	return k, &configv1.KeyRecord{
		Sha256: h[:], KeyId: keyID, AppId: "app-" + keyID, TenantId: "acme", Plan: "gold", Scopes: scopes,
		Priority: configv1.Priority_PRIORITY_PAID, Status: configv1.KeyStatus_KEY_STATUS_ACTIVE,
	}
}

func build(t testing.TB, records ...*configv1.KeyRecord) *keytable.Table {
	t.Helper()
	tbl, err := keytable.Build(records)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return tbl
}

// want is the Record a KeyRecord should become.
func want(r *configv1.KeyRecord) keytable.Record {
	var na int64
	if r.NotAfter != nil {
		na = r.NotAfter.AsTime().UnixNano()
	}
	return keytable.Record{
		KeyID: r.KeyId, AppID: r.AppId, TenantID: r.TenantId, Plan: r.Plan,
		Scopes: strings.Join(r.Scopes, " "), Priority: r.Priority,
		Revoked: r.Status == configv1.KeyStatus_KEY_STATUS_REVOKED, NotAfter: na, Successor: r.SuccessorKeyId,
	}
}

func TestLookupEveryRecord(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 20_000, 1)
	tbl := build(t, f.records...)
	if tbl.Len() != len(f.records) {
		t.Fatalf("Len() = %d, want %d", tbl.Len(), len(f.records))
	}
	now := fixtureNow.UnixNano()
	var revoked, expired int
	for i, r := range f.records {
		got, ok := tbl.Lookup([32]byte(r.Sha256))
		if !ok || got != want(r) {
			t.Fatalf("Lookup(keys[%d]) = %+v, %v; want %+v, true", i, got, ok, want(r))
		}
		got, err := tbl.Check(f.key(i), now)
		var wantErr error
		switch {
		case r.Status == configv1.KeyStatus_KEY_STATUS_REVOKED:
			wantErr = keytable.ErrRevoked
			revoked++
		case r.NotAfter != nil && r.NotAfter.AsTime().Before(fixtureNow):
			wantErr = keytable.ErrExpired
			expired++
		}
		if err != wantErr || got != want(r) {
			t.Fatalf("Check(keys[%d]) = %+v, %v; want %+v, %v", i, got, err, want(r), wantErr)
		}
	}
	if revoked == 0 || expired == 0 {
		t.Errorf("fixture has %d revoked and %d expired keys, want some of each", revoked, expired)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	active, activeRec := newKey(t, "k-active", "orders:read", "orders:write")
	revoked, revokedRec := newKey(t, "k-revoked")
	revokedRec.Status = configv1.KeyStatus_KEY_STATUS_REVOKED
	expired, expiredRec := newKey(t, "k-expired")
	expiredRec.NotAfter = timestamppb.New(now.Add(-time.Nanosecond))
	lastNs, lastNsRec := newKey(t, "k-last-ns")
	lastNsRec.NotAfter = timestamppb.New(now)
	later, laterRec := newKey(t, "k-later")
	laterRec.NotAfter = timestamppb.New(now.Add(time.Hour))
	old, oldRec := newKey(t, "k-old")
	oldRec.NotAfter = timestamppb.New(now.Add(24 * time.Hour))
	oldRec.SuccessorKeyId = "k-new"
	successor, successorRec := newKey(t, "k-new")
	tbl := build(t, activeRec, revokedRec, expiredRec, lastNsRec, laterRec, oldRec, successorRec)

	unknown, _ := newKey(t, "k-unknown")
	testKey, err := apikey.Generate(apikey.Test, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	badSum := active[:40] + "000000"
	if badSum == active {
		badSum = active[:40] + "000001"
	}
	for _, tc := range []struct {
		name string
		key  string
		now  time.Time
		want *configv1.KeyRecord // nil: the zero Record
		err  error
		also error // another error the result must match
	}{
		{"active", active, now, activeRec, nil, nil},
		{"revoked", revoked, now, revokedRec, keytable.ErrRevoked, nil},
		{"expired", expired, now, expiredRec, keytable.ErrExpired, nil},
		{"at not_after", lastNs, now, lastNsRec, nil, nil},
		{"1 ns past not_after", lastNs, now.Add(time.Nanosecond), lastNsRec, keytable.ErrExpired, nil},
		{"before not_after", later, now, laterRec, nil, nil},
		{"rotated, in overlap", old, now, oldRec, nil, nil},
		{"rotated, overlap over", old, now.Add(25 * time.Hour), oldRec, keytable.ErrExpired, nil},
		{"successor", successor, now.Add(25 * time.Hour), successorRec, nil, nil},
		{"unknown", unknown, now, nil, keytable.ErrUnknown, nil},
		{"test key", testKey, now, nil, keytable.ErrUnknown, nil},
		{"wrong checksum", badSum, now, nil, keytable.ErrMalformed, apikey.ErrChecksum},
		{"wrong prefix", "ak_prod_" + active[8:], now, nil, keytable.ErrMalformed, apikey.ErrFormat},
		{"upper-case prefix", "AK_LIVE_" + active[8:], now, nil, keytable.ErrMalformed, apikey.ErrFormat},
		{"truncated", active[:45], now, nil, keytable.ErrMalformed, apikey.ErrFormat},
		{"bearer token", "eyJhbGciOiJFUzI1NiJ9.e30.c2ln", now, nil, keytable.ErrMalformed, apikey.ErrFormat},
		{"empty", "", now, nil, keytable.ErrMalformed, apikey.ErrFormat},
	} {
		got, err := tbl.Check(tc.key, tc.now.UnixNano())
		var w keytable.Record
		if tc.want != nil {
			w = want(tc.want)
		}
		if got != w || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: Check = %+v, %v; want %+v, %v", tc.name, got, err, w, tc.err)
		}
		if tc.also != nil && !errors.Is(err, tc.also) {
			t.Errorf("%s: Check error %v does not match %v", tc.name, err, tc.also)
		}
		if err == nil {
			continue
		}
		// No part of the key or its hash, as text or hex, in the message.
		msg := err.Error()
		h := apikey.Hash(tc.key)
		for _, secret := range []string{tc.key, hex.EncodeToString(h[:]), string(h[:])} {
			for i := 0; i+6 <= len(secret); i++ {
				if strings.Contains(msg, secret[i:i+6]) {
					t.Errorf("%s: Check error %q holds %q, part of the key or its hash", tc.name, msg, secret[i:i+6])
					break
				}
			}
		}
	}
}

func TestRecordFields(t *testing.T) {
	t.Parallel()
	_, a := newKey(t, "a", "z:write", "a:read", "m")
	_, b := newKey(t, "b")
	_, c := newKey(t, "c", "z:write", "a:read", "m")
	c.Priority = configv1.Priority_PRIORITY_UNSPECIFIED
	c.AppId, c.TenantId, c.Plan = "", "", ""
	tbl := build(t, a, b, c)
	for _, tc := range []struct {
		rec  *configv1.KeyRecord
		want keytable.Record
	}{
		{a, keytable.Record{KeyID: "a", AppID: "app-a", TenantID: "acme", Plan: "gold", Scopes: "z:write a:read m", Priority: configv1.Priority_PRIORITY_PAID}},
		{b, keytable.Record{KeyID: "b", AppID: "app-b", TenantID: "acme", Plan: "gold", Priority: configv1.Priority_PRIORITY_PAID}},
		{c, keytable.Record{KeyID: "c", Scopes: "z:write a:read m"}},
	} {
		if got, ok := tbl.Lookup([32]byte(tc.rec.Sha256)); !ok || got != tc.want {
			t.Errorf("Lookup(%s) = %+v, %v; want %+v, true", tc.rec.KeyId, got, ok, tc.want)
		}
	}
}

// TestNotAfter checks the conversion of not_after at the edges: the epoch
// itself is a time, not "never"; times before it and beyond 2262 clamp.
func TestNotAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ts   *timestamppb.Timestamp
		want int64
	}{
		{"unset", nil, 0},
		{"epoch", &timestamppb.Timestamp{}, -1},
		{"epoch + 1 ns", &timestamppb.Timestamp{Nanos: 1}, 1},
		{"1969", timestamppb.New(time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)), -1e9},
		{"2030", timestamppb.New(fixtureNow), fixtureNow.UnixNano()},
		{"year 1", timestamppb.New(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)), math.MinInt64},
		{"year 9999", timestamppb.New(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)), math.MaxInt64},
	} {
		_, r := newKey(t, "k")
		r.NotAfter = tc.ts
		got, ok := build(t, r).Lookup([32]byte(r.Sha256))
		if !ok || got.NotAfter != tc.want {
			t.Errorf("%s: NotAfter = %d, %v; want %d, true", tc.name, got.NotAfter, ok, tc.want)
		}
	}
	// A key whose not_after is the epoch has expired.
	k, r := newKey(t, "k")
	r.NotAfter = &timestamppb.Timestamp{}
	if _, err := build(t, r).Check(k, fixtureNow.UnixNano()); !errors.Is(err, keytable.ErrExpired) {
		t.Errorf("Check(key expiring at the epoch) = %v, want %v", err, keytable.ErrExpired)
	}
}

// TestSharedBucket builds keys whose hashes share their first 8 bytes, so
// that they land in one bucket, and looks up each and near misses.
func TestSharedBucket(t *testing.T) {
	t.Parallel()
	var records []*configv1.KeyRecord
	for i := range 40 {
		h := make([]byte, 32)
		copy(h, "samehead")
		h[8+i%24] = byte(i + 1)
		h[31] ^= byte(i * 7)
		records = append(records, &configv1.KeyRecord{Sha256: h, KeyId: fmt.Sprint("k", i), Status: configv1.KeyStatus_KEY_STATUS_ACTIVE})
	}
	// And a few elsewhere, so there is more than one bucket.
	for i := range 100 {
		_, r := newKey(t, fmt.Sprint("other", i))
		records = append(records, r)
	}
	tbl := build(t, records...)
	for _, r := range records {
		got, ok := tbl.Lookup([32]byte(r.Sha256))
		if !ok || got.KeyID != r.KeyId {
			t.Errorf("Lookup(%s) = %q, %v; want %q, true", r.KeyId, got.KeyID, ok, r.KeyId)
		}
		miss := [32]byte(r.Sha256)
		miss[31] ^= 0x80
		if got, ok := tbl.Lookup(miss); ok {
			t.Errorf("Lookup(hash of %s with one bit changed) = %q, true; want false", r.KeyId, got.KeyID)
		}
	}
	var zero [32]byte
	if _, ok := tbl.Lookup(zero); ok {
		t.Errorf("Lookup(zero hash) found a key")
	}
}

func TestEmpty(t *testing.T) {
	t.Parallel()
	k, _ := newKey(t, "k")
	var nilTable *keytable.Table
	empty := build(t)
	emptySlice, err := keytable.Build([]*configv1.KeyRecord{})
	if err != nil {
		t.Fatal(err)
	}
	for name, tbl := range map[string]*keytable.Table{"nil": nilTable, "Build()": empty, "Build([])": emptySlice} {
		if n := tbl.Len(); n != 0 {
			t.Errorf("%s: Len() = %d, want 0", name, n)
		}
		if r, ok := tbl.Lookup(apikey.Hash(k)); ok {
			t.Errorf("%s: Lookup = %+v, true; want false", name, r)
		}
		if _, err := tbl.Check(k, 1); err != keytable.ErrUnknown {
			t.Errorf("%s: Check(valid key) = %v, want %v", name, err, keytable.ErrUnknown)
		}
		if _, err := tbl.Check("ak_live_", 1); !errors.Is(err, keytable.ErrMalformed) {
			t.Errorf("%s: Check(malformed key) = %v, want %v", name, err, keytable.ErrMalformed)
		}
	}
}

func TestAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters change allocation counts")
	}
	f := newFixture(t, 1000, 2)
	tbl := build(t, f.records...)
	now := fixtureNow.UnixNano()
	var valid, revoked, expired string
	for i := range f.records {
		switch _, err := tbl.Check(f.key(i), now); err {
		case nil:
			valid = f.key(i)
		case keytable.ErrRevoked:
			revoked = f.key(i)
		case keytable.ErrExpired:
			expired = f.key(i)
		}
	}
	unknown, _ := newKey(t, "unknown")
	badSum := valid[:40] + "000000"
	for _, tc := range []struct{ name, key string }{
		{"valid", valid}, {"revoked", revoked}, {"expired", expired}, {"unknown", unknown},
		{"bad checksum", badSum}, {"bad length", valid[:20]}, {"bad prefix", "xx" + valid[2:]},
	} {
		if tc.key == "" {
			t.Fatalf("%s: the fixture has no such key", tc.name)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = tbl.Check(tc.key, now) }); n != 0 {
			t.Errorf("Check(%s key): %v allocations, want 0", tc.name, n)
		}
	}
	h := [32]byte(f.records[0].Sha256)
	if n := testing.AllocsPerRun(100, func() { _, _ = tbl.Lookup(h) }); n != 0 {
		t.Errorf("Lookup: %v allocations, want 0", n)
	}
}

// TestConcurrent checks keys from many goroutines at once; run it with -race.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2000, 3)
	tbl := build(t, f.records...)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < len(f.records); i += 3 {
				if r, err := tbl.Check(f.key(i), fixtureNow.UnixNano()); r.KeyID != f.records[i].KeyId {
					t.Errorf("Check(keys[%d]) = %q, %v; want key %q", i, r.KeyID, err, f.records[i].KeyId)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestCheckFirst: a key the first table holds is judged by its record
// alone, so a revocation there wins over an active record in the second;
// other keys are judged by the second; one parse and hash, no allocation.
func TestCheckFirst(t *testing.T) { // not parallel: AllocsPerRun
	both, active := newKey(t, "k-both")
	revoked := proto.CloneOf(active)
	revoked.Status = configv1.KeyStatus_KEY_STATUS_REVOKED
	onlySecond, second2 := newKey(t, "k-second")
	onlyFirst, first2 := newKey(t, "k-first")
	first := build(t, revoked, first2)
	second := build(t, active, second2)
	now := time.Now().UnixNano()
	for _, c := range []struct {
		name          string
		first, second *keytable.Table
		key           string
		want          error
		id            string
	}{
		{"revoked in first, active in second", first, second, both, keytable.ErrRevoked, "k-both"},
		{"only in second", first, second, onlySecond, nil, "k-second"},
		{"only in first", first, second, onlyFirst, nil, "k-first"},
		{"no first table", nil, second, both, nil, "k-both"},
		{"no second table", first, nil, onlySecond, keytable.ErrUnknown, ""},
		{"no tables", nil, nil, both, keytable.ErrUnknown, ""},
		{"malformed", first, second, both[:len(both)-1] + "x", keytable.ErrMalformed, ""},
	} {
		r, err := keytable.CheckFirst(c.first, c.second, c.key, now)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) || r.KeyID != c.id {
			t.Errorf("%s: CheckFirst = %q, %v; want %q, %v", c.name, r.KeyID, err, c.id, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = keytable.CheckFirst(first, second, onlySecond, now) }); n != 0 {
		t.Errorf("CheckFirst allocates %v times", n)
	}
}
