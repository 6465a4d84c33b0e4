// Package storetest is the conformance suite of keysvc/store: the same
// tests against every database the store runs on.
package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/keysvc/store"
)

// Opener opens the store under test. Each call of one Opener opens the
// same database (a second process, as far as the store can tell); the
// suite closes what it opens. It may be called from several goroutines.
type Opener func(ctx context.Context) (*store.Store, error)

// Run runs every test of the suite; newDB returns an Opener of a new,
// empty database for each test.
func Run(t *testing.T, newDB func(t *testing.T) Opener) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Opener)
	}{
		{"Empty", testEmpty},
		{"CreateAndGet", testCreateAndGet},
		{"InvalidKeys", testInvalidKeys},
		{"DuplicateKeys", testDuplicateKeys},
		{"ListKeys", testListKeys},
		{"Rotate", testRotate},
		{"RotateRefused", testRotateRefused},
		{"WithdrawRotation", testWithdrawRotation},
		{"ConcurrentRotate", testConcurrentRotate},
		{"Revoke", testRevoke},
		{"RevokeApp", testRevokeApp},
		{"ReportLeaked", testReportLeaked},
		{"Deny", testDeny},
		{"DenyIdentity", testDenyIdentity},
		{"IssuerKeys", testIssuerKeys},
		{"Changes", testChanges},
		{"State", testState},
		{"ConcurrentWriters", testConcurrentWriters},
		{"AdvanceSeq", testAdvanceSeq},
		{"Reopen", testReopen},
		{"ConcurrentOpen", testConcurrentOpen},
		{"Canceled", testCanceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newDB(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func open(t *testing.T, o Opener) *store.Store {
	t.Helper()
	s, err := o(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// t0 is when the suite's keys are created; a time with microseconds, as
// the store keeps them.
var t0 = time.Date(2026, 11, 30, 9, 0, 0, 123456000, time.UTC)

// hash is the SHA-256 of the raw key the suite pretends key id has.
func hash(id string) [32]byte { return sha256.Sum256([]byte("pk_live_" + id + "_secret")) }

func newKey(id, app, tenant string) store.Key {
	return store.Key{
		ID: id, Hash: hash(id), Prefix: "pk_live_" + id[:min(len(id), 4)],
		AppID: app, TenantID: tenant, Plan: "pro", Scopes: []string{"orders:read", "orders:write"},
		Env: "live", Priority: int32(configv1.Priority_PRIORITY_PAID), Created: t0,
	}
}

func mustCreate(t *testing.T, s *store.Store, k store.Key) store.Key {
	t.Helper()
	got, err := s.CreateKey(ctx(t), k)
	if err != nil {
		t.Fatalf("CreateKey(%q): %v", k.ID, err)
	}
	return got
}

func wantSeq(t *testing.T, s *store.Store, want uint64) {
	t.Helper()
	if seq, err := s.Seq(ctx(t)); err != nil || seq != want {
		t.Errorf("Seq() = %d, %v; want %d", seq, err, want)
	}
}

func ids(keys []store.Key) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.ID)
	}
	return out
}

func jti(issuer, id string, expires time.Time) *configv1.DenyEntry {
	return &configv1.DenyEntry{Issuer: issuer, Match: &configv1.DenyEntry_Jti{Jti: id}, Expires: timestamppb.New(expires)}
}

func subject(issuer, sub string, before, expires time.Time) *configv1.DenyEntry {
	return &configv1.DenyEntry{Issuer: issuer, Match: &configv1.DenyEntry_Subject{Subject: sub},
		IssuedBefore: timestamppb.New(before), Expires: timestamppb.New(expires)}
}

func testEmpty(t *testing.T, o Opener) {
	s := open(t, o)
	wantSeq(t, s, 0)
	if _, err := s.GetKey(ctx(t), "k1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetKey(k1) of an empty store: %v, want ErrNotFound", err)
	}
	if _, err := s.KeyByHash(ctx(t), hash("k1")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("KeyByHash of an empty store: %v, want ErrNotFound", err)
	}
	if keys, err := s.ListKeys(ctx(t), store.ListFilter{}); err != nil || len(keys) != 0 {
		t.Errorf("ListKeys of an empty store = %v, %v", ids(keys), err)
	}
	if cs, err := s.Changes(ctx(t), 0, 0); err != nil || len(cs) != 0 {
		t.Errorf("Changes(0) of an empty store = %v, %v", cs, err)
	}
	if ds, err := s.DenyEntries(ctx(t), t0); err != nil || len(ds) != 0 {
		t.Errorf("DenyEntries of an empty store = %v, %v", ds, err)
	}
	if rs, err := s.LeakReports(ctx(t), 0); err != nil || len(rs) != 0 {
		t.Errorf("LeakReports of an empty store = %v, %v", rs, err)
	}
	seq, keys, deny, issuers, err := s.State(ctx(t), t0)
	if err != nil || seq != 0 || len(keys)+len(deny)+len(issuers) != 0 {
		t.Errorf("State of an empty store = %d, %v, %v, %v, %v", seq, keys, deny, issuers, err)
	}
	if s.Driver() != "postgres" && s.Driver() != "sqlite" {
		t.Errorf("Driver() = %q", s.Driver())
	}
}

func testCreateAndGet(t *testing.T, o Opener) {
	s := open(t, o)
	k := newKey("k1", "app1", "tenant1")
	k.NotAfter = t0.Add(90 * 24 * time.Hour)
	got := mustCreate(t, s, k)
	want := k
	want.Status, want.Rev = store.StatusActive, 1
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CreateKey returned (-want +got):\n%s", diff)
	}
	if byID, err := s.GetKey(ctx(t), "k1"); err != nil || !cmp.Equal(byID, want) {
		t.Errorf("GetKey(k1) = %+v, %v; want %+v", byID, err, want)
	}
	if byHash, err := s.KeyByHash(ctx(t), k.Hash); err != nil || !cmp.Equal(byHash, want) {
		t.Errorf("KeyByHash = %+v, %v; want %+v", byHash, err, want)
	}
	wantSeq(t, s, 1)

	// A key with no scopes, no created time, and times finer than the
	// store keeps.
	bare := newKey("k2", "app1", "tenant1")
	bare.Scopes, bare.Created, bare.Env = nil, time.Time{}, "test"
	bare.NotAfter = time.Date(2027, 1, 2, 3, 4, 5, 678999999, time.FixedZone("CET", 3600))
	before := time.Now().Add(-time.Second)
	got = mustCreate(t, s, bare)
	if got.Rev != 2 || got.Status != store.StatusActive || got.Scopes != nil || got.Env != "test" ||
		got.Created.Before(before) || got.Created.After(time.Now()) || got.Created.Location() != time.UTC ||
		!got.NotAfter.Equal(bare.NotAfter.Truncate(time.Microsecond)) || got.NotAfter.Location() != time.UTC {
		t.Errorf("CreateKey(bare) = %+v", got)
	}
	if again, err := s.GetKey(ctx(t), "k2"); err != nil || !cmp.Equal(again, got) {
		t.Errorf("GetKey(k2) = %+v, %v; want what CreateKey returned, %+v", again, err, got)
	}
	if _, err := s.GetKey(ctx(t), "k3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetKey(k3): %v, want ErrNotFound", err)
	}
	if _, err := s.KeyByHash(ctx(t), hash("k3")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("KeyByHash(k3's hash): %v, want ErrNotFound", err)
	}
}

func testInvalidKeys(t *testing.T, o Opener) {
	s := open(t, o)
	for name, edit := range map[string]func(*store.Key){
		"no id":       func(k *store.Key) { k.ID = "" },
		"no hash":     func(k *store.Key) { k.Hash = [32]byte{} },
		"no env":      func(k *store.Key) { k.Env = "" },
		"unknown env": func(k *store.Key) { k.Env = "staging" },
		"bad status":  func(k *store.Key) { k.Status = 3 },
	} {
		k := newKey("k1", "app1", "tenant1")
		edit(&k)
		if _, err := s.CreateKey(ctx(t), k); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CreateKey(%s): %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.ReportLeaked(ctx(t), [][32]byte{hash("k1")}, store.LeakReport{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ReportLeaked without a reporter: %v, want ErrInvalid", err)
	}
	if _, err := s.RevokeApp(ctx(t), "", "r", "by", t0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("RevokeApp(\"\"): %v, want ErrInvalid", err)
	}
	if _, err := s.PutIssuerKeys(ctx(t), "auth", ""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("PutIssuerKeys without keys: %v, want ErrInvalid", err)
	}
	wantSeq(t, s, 0)
}

func testDuplicateKeys(t *testing.T, o Opener) {
	s := open(t, o)
	mustCreate(t, s, newKey("k1", "app1", "tenant1"))
	sameID := newKey("k1", "app2", "tenant2")
	sameID.Hash = hash("other")
	if _, err := s.CreateKey(ctx(t), sameID); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateKey(taken id): %v, want ErrConflict", err)
	}
	sameHash := newKey("k2", "app1", "tenant1")
	sameHash.Hash = hash("k1")
	if _, err := s.CreateKey(ctx(t), sameHash); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateKey(taken hash): %v, want ErrConflict", err)
	}
	// The refused creates left no row and used no rev.
	if _, err := s.GetKey(ctx(t), "k2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetKey(k2) after its create was refused: %v, want ErrNotFound", err)
	}
	if k, _ := s.GetKey(ctx(t), "k1"); k.AppID != "app1" || k.Rev != 1 {
		t.Errorf("k1 after a refused create of the same id = %+v", k)
	}
	wantSeq(t, s, 1)
	if k := mustCreate(t, s, newKey("k2", "app1", "tenant1")); k.Rev != 2 {
		t.Errorf("the create after two refused ones got rev %d, want 2", k.Rev)
	}
}

func testListKeys(t *testing.T, o Opener) {
	s := open(t, o)
	// Created out of id order, to see that lists are in id order.
	for _, k := range []store.Key{
		newKey("k5", "app2", "t1"),
		newKey("k1", "app1", "t1"),
		newKey("k3", "app1", "t2"),
		newKey("k2", "app2", "t2"),
		newKey("k7", "app1", "t1"),
		newKey("k4", "app3", "t1"),
		newKey("k6", "app1", "t1"),
	} {
		mustCreate(t, s, k)
	}
	for _, tc := range []struct {
		f    store.ListFilter
		want []string
	}{
		{store.ListFilter{}, []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7"}},
		{store.ListFilter{AppID: "app1"}, []string{"k1", "k3", "k6", "k7"}},
		{store.ListFilter{TenantID: "t2"}, []string{"k2", "k3"}},
		{store.ListFilter{AppID: "app1", TenantID: "t1"}, []string{"k1", "k6", "k7"}},
		{store.ListFilter{AppID: "nobody"}, nil},
		{store.ListFilter{Limit: 3}, []string{"k1", "k2", "k3"}},
		{store.ListFilter{After: "k3", Limit: 3}, []string{"k4", "k5", "k6"}},
		{store.ListFilter{After: "k6", Limit: 3}, []string{"k7"}},
		{store.ListFilter{After: "k7"}, nil},
		{store.ListFilter{AppID: "app1", After: "k1", Limit: 2}, []string{"k3", "k6"}},
	} {
		keys, err := s.ListKeys(ctx(t), tc.f)
		if err != nil || !slices.Equal(ids(keys), tc.want) {
			t.Errorf("ListKeys(%+v) = %v, %v; want %v", tc.f, ids(keys), err, tc.want)
		}
	}
	// Paging through everything two at a time sees every key once.
	var all []string
	for after := ""; ; {
		page, err := s.ListKeys(ctx(t), store.ListFilter{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		all = append(all, ids(page)...)
		after = page[len(page)-1].ID
	}
	if want := []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7"}; !slices.Equal(all, want) {
		t.Errorf("paging by 2 = %v, want %v", all, want)
	}
}

func testRotate(t *testing.T, o Opener) {
	s := open(t, o)
	old := mustCreate(t, s, newKey("k1", "app1", "tenant1"))
	mustCreate(t, s, newKey("k0", "app1", "tenant1")) // rev 2
	succ := newKey("k2", "app1", "tenant1")
	succ.Created = t0.Add(time.Hour)
	overlap := t0.Add(25 * time.Hour)
	next, gotOld, err := s.RotateKey(ctx(t), "k1", succ, overlap)
	if err != nil {
		t.Fatal(err)
	}
	wantOld := old
	wantOld.NotAfter, wantOld.Successor, wantOld.Rev = overlap, "k2", 3
	if diff := cmp.Diff(wantOld, gotOld); diff != "" {
		t.Errorf("RotateKey's old key (-want +got):\n%s", diff)
	}
	wantNext := succ
	wantNext.Status, wantNext.Predecessor, wantNext.Rev = store.StatusActive, "k1", 4
	if diff := cmp.Diff(wantNext, next); diff != "" {
		t.Errorf("RotateKey's successor (-want +got):\n%s", diff)
	}
	for _, want := range []store.Key{wantOld, wantNext} {
		if got, err := s.GetKey(ctx(t), want.ID); err != nil || !cmp.Equal(got, want) {
			t.Errorf("GetKey(%s) after the rotation = %+v, %v; want %+v", want.ID, got, err, want)
		}
	}
	wantSeq(t, s, 4)

	// The overlap ends at the earlier of the key's own NotAfter and the
	// one asked for.
	succ3 := newKey("k3", "app1", "tenant1")
	succ3.Created = t0.Add(2 * time.Hour)
	_, gotNext, err := s.RotateKey(ctx(t), "k2", succ3, t0.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !gotNext.NotAfter.Equal(t0.Add(48 * time.Hour)) {
		t.Errorf("k2's NotAfter after rotating it = %v, want %v", gotNext.NotAfter, t0.Add(48*time.Hour))
	}
	short := newKey("k4", "app1", "tenant1")
	short.NotAfter = t0.Add(10 * time.Hour)
	mustCreate(t, s, short)
	succ5 := newKey("k5", "app1", "tenant1")
	succ5.Created = t0.Add(time.Hour)
	if _, old, err := s.RotateKey(ctx(t), "k4", succ5, t0.Add(20*time.Hour)); err != nil || !old.NotAfter.Equal(short.NotAfter) {
		t.Errorf("RotateKey(k4, overlap past its NotAfter) = %+v, %v; want NotAfter kept at %v", old, err, short.NotAfter)
	}
	// No overlap asked for: the key keeps its NotAfter (never).
	succ6 := newKey("k6", "app1", "tenant1")
	succ6.Created = t0.Add(time.Hour)
	if _, old, err := s.RotateKey(ctx(t), "k0", succ6, time.Time{}); err != nil || !old.NotAfter.IsZero() || old.Successor != "k6" {
		t.Errorf("RotateKey(k0, no overlap) = %+v, %v", old, err)
	}
}

// testAdvanceSeq: the sequence moves forward, never back, and the next
// change takes the rev after it.
func testAdvanceSeq(t *testing.T, o Opener) {
	s := open(t, o)
	mustCreate(t, s, newKey("k1", "app1", "tenant1")) // rev 1
	if moved, err := s.AdvanceSeq(ctx(t), 100); err != nil || !moved {
		t.Fatalf("AdvanceSeq(100) = %v, %v; want moved", moved, err)
	}
	if moved, err := s.AdvanceSeq(ctx(t), 50); err != nil || moved {
		t.Errorf("AdvanceSeq(50) after 100 = %v, %v; want not moved", moved, err)
	}
	wantSeq(t, s, 100)
	if k := mustCreate(t, s, newKey("k2", "app1", "tenant1")); k.Rev != 101 {
		t.Errorf("the next key's rev = %d, want 101", k.Rev)
	}
	if ch, err := s.Changes(ctx(t), 1, 10); err != nil || len(ch) != 1 || ch[0].Rev != 101 {
		t.Errorf("Changes(after 1) = %+v, %v; want the key at rev 101", ch, err)
	}
	if _, err := s.AdvanceSeq(ctx(t), 1<<63); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("AdvanceSeq(2^63) = %v, want ErrInvalid", err)
	}
}

func testWithdrawRotation(t *testing.T, o Opener) {
	s := open(t, o)
	k1 := newKey("k1", "app1", "tenant1")
	k1.NotAfter = t0.Add(90 * 24 * time.Hour)
	mustCreate(t, s, k1)
	succ := newKey("k2", "app1", "tenant1")
	succ.Created = t0.Add(time.Hour)
	if _, _, err := s.RotateKey(ctx(t), "k1", succ, t0.Add(25*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WithdrawRotation(ctx(t), "k1", "k9", k1.NotAfter, "never shown", "keysvc", t0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("WithdrawRotation naming another successor: %v, want ErrConflict", err)
	}
	old, err := s.WithdrawRotation(ctx(t), "k1", "k2", k1.NotAfter, "never shown", "keysvc", t0.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !old.NotAfter.Equal(k1.NotAfter) || old.Successor != "" || old.Status != store.StatusActive || old.Rev != 5 {
		t.Errorf("the old key after WithdrawRotation = %+v; want its NotAfter %v back, no successor, active, rev 5", old, k1.NotAfter)
	}
	if next, err := s.GetKey(ctx(t), "k2"); err != nil || next.Status != store.StatusRevoked || next.RevokeReason != "never shown" || next.Rev != 4 {
		t.Errorf("the successor after WithdrawRotation = %+v, %v; want revoked at rev 4", next, err)
	}
	wantSeq(t, s, 5)
	// It can be rotated again.
	again := newKey("k3", "app1", "tenant1")
	again.Created = t0.Add(3 * time.Hour)
	if _, old, err := s.RotateKey(ctx(t), "k1", again, t0.Add(27*time.Hour)); err != nil || old.Successor != "k3" {
		t.Errorf("rotating again after WithdrawRotation = %+v, %v", old, err)
	}
}

func testRotateRefused(t *testing.T, o Opener) {
	s := open(t, o)
	mustCreate(t, s, newKey("k1", "app1", "tenant1"))
	succ := func(id string) store.Key {
		k := newKey(id, "app1", "tenant1")
		k.Created = t0.Add(time.Hour)
		return k
	}
	if _, _, err := s.RotateKey(ctx(t), "k1", succ("k2"), t0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, newKey("revoked", "app1", "tenant1"))
	if _, _, err := s.RevokeKey(ctx(t), "revoked", "test", "admin", t0); err != nil {
		t.Fatal(err)
	}
	expired := newKey("expired", "app1", "tenant1")
	expired.NotAfter = t0.Add(30 * time.Minute)
	mustCreate(t, s, expired)
	mustCreate(t, s, newKey("fresh", "app1", "tenant1"))
	seq, _ := s.Seq(ctx(t))

	for _, tc := range []struct {
		name, old string
		succ      store.Key
		want      error
	}{
		{"a second rotation", "k1", succ("k3"), store.ErrConflict},
		{"a revoked key", "revoked", succ("k3"), store.ErrConflict},
		{"an expired key", "expired", succ("k3"), store.ErrConflict},
		{"an unknown key", "nobody", succ("k3"), store.ErrNotFound},
		{"to a taken id", "fresh", succ("k2"), store.ErrConflict},
		{"to a taken hash", "fresh", func() store.Key { k := succ("k3"); k.Hash = hash("k1"); return k }(), store.ErrConflict},
		{"to an invalid key", "fresh", func() store.Key { k := succ("k3"); k.Env = ""; return k }(), store.ErrInvalid},
		{"to a revoked key", "fresh", func() store.Key { k := succ("k3"); k.Status = store.StatusRevoked; return k }(), store.ErrInvalid},
	} {
		if _, _, err := s.RotateKey(ctx(t), tc.old, tc.succ, t0.Add(24*time.Hour)); !errors.Is(err, tc.want) {
			t.Errorf("rotating %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Nothing of the refused rotations was written: not the successor, not
	// the old key's change, not a rev.
	wantSeq(t, s, seq)
	if _, err := s.GetKey(ctx(t), "k3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetKey(k3) after refused rotations: %v, want ErrNotFound", err)
	}
	if k, _ := s.GetKey(ctx(t), "fresh"); k.Successor != "" || !k.NotAfter.IsZero() {
		t.Errorf("fresh after refused rotations = %+v, want it unchanged", k)
	}
}

// testConcurrentRotate: several writers rotate the same key at once;
// exactly one succeeds.
func testConcurrentRotate(t *testing.T, o Opener) {
	const writers = 6
	stores := []*store.Store{open(t, o), open(t, o)}
	mustCreate(t, stores[0], newKey("k1", "app1", "tenant1"))
	var wg sync.WaitGroup
	errs := make([]error, writers)
	start := make(chan struct{})
	for i := range writers {
		wg.Go(func() {
			<-start
			succ := newKey(fmt.Sprintf("next%d", i), "app1", "tenant1")
			succ.Created = t0.Add(time.Hour)
			_, _, errs[i] = stores[i%len(stores)].RotateKey(ctx(t), "k1", succ, t0.Add(24*time.Hour))
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("writer %d: %v, want nil or ErrConflict", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d of %d concurrent rotations of one key succeeded, want 1", won, writers)
	}
	wantSeq(t, stores[0], 3)
}

func testRevoke(t *testing.T, o Opener) {
	s := open(t, o)
	k := mustCreate(t, s, newKey("k1", "app1", "tenant1"))
	at := t0.Add(time.Hour)
	got, changed, err := s.RevokeKey(ctx(t), "k1", "compromised", "admin:alice", at)
	if err != nil || !changed {
		t.Fatalf("RevokeKey(k1) = %+v, %v, %v", got, changed, err)
	}
	want := k
	want.Status, want.Revoked, want.RevokeReason, want.RevokedBy, want.Rev = store.StatusRevoked, at, "compromised", "admin:alice", 2
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RevokeKey (-want +got):\n%s", diff)
	}
	if byID, err := s.GetKey(ctx(t), "k1"); err != nil || !cmp.Equal(byID, want) {
		t.Errorf("GetKey(k1) after revoking = %+v, %v", byID, err)
	}
	// Again: nothing changes, the first revocation stays.
	again, changed, err := s.RevokeKey(ctx(t), "k1", "again", "admin:bob", at.Add(time.Hour))
	if err != nil || changed || !cmp.Equal(again, want) {
		t.Errorf("RevokeKey(k1) again = %+v, %v, %v; want %+v, false", again, changed, err, want)
	}
	wantSeq(t, s, 2)
	if _, _, err := s.RevokeKey(ctx(t), "nobody", "r", "admin", at); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeKey(nobody): %v, want ErrNotFound", err)
	}
	// A zero time is now.
	mustCreate(t, s, newKey("k2", "app1", "tenant1"))
	before := time.Now().Add(-time.Second)
	if got, _, err := s.RevokeKey(ctx(t), "k2", "r", "admin", time.Time{}); err != nil || got.Revoked.Before(before) || got.Revoked.After(time.Now()) {
		t.Errorf("RevokeKey(k2, now) = %+v, %v", got, err)
	}
}

func testRevokeApp(t *testing.T, o Opener) {
	s := open(t, o)
	for _, k := range []store.Key{
		newKey("k3", "app1", "t1"),
		newKey("k1", "app1", "t1"),
		newKey("k2", "app1", "t2"),
		newKey("other", "app2", "t1"),
	} {
		mustCreate(t, s, k)
	}
	if _, _, err := s.RevokeKey(ctx(t), "k2", "first", "admin", t0); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Hour)
	got, err := s.RevokeApp(ctx(t), "app1", "app deleted", "admin:alice", at)
	if err != nil || !slices.Equal(ids(got), []string{"k1", "k3"}) {
		t.Fatalf("RevokeApp(app1) = %v, %v; want [k1 k3]: the active keys of the app, in id order", ids(got), err)
	}
	for i, k := range got {
		if k.Status != store.StatusRevoked || !k.Revoked.Equal(at) || k.RevokeReason != "app deleted" || k.RevokedBy != "admin:alice" || k.Rev != uint64(6+i) {
			t.Errorf("RevokeApp's key %d = %+v, want it revoked at rev %d", i, k, 6+i)
		}
		if stored, _ := s.GetKey(ctx(t), k.ID); !cmp.Equal(stored, k) {
			t.Errorf("GetKey(%s) = %+v, want %+v", k.ID, stored, k)
		}
	}
	if k, _ := s.GetKey(ctx(t), "k2"); k.RevokeReason != "first" || k.Rev != 5 {
		t.Errorf("k2, revoked before, = %+v; want it untouched", k)
	}
	if k, _ := s.GetKey(ctx(t), "other"); k.Status != store.StatusActive {
		t.Errorf("another app's key = %+v, want it active", k)
	}
	if again, err := s.RevokeApp(ctx(t), "app1", "again", "admin", at); err != nil || len(again) != 0 {
		t.Errorf("RevokeApp(app1) again = %v, %v; want nothing", ids(again), err)
	}
	if none, err := s.RevokeApp(ctx(t), "nobody", "r", "admin", at); err != nil || len(none) != 0 {
		t.Errorf("RevokeApp(nobody) = %v, %v; want nothing", ids(none), err)
	}
	wantSeq(t, s, 7)
}

func testReportLeaked(t *testing.T, o Opener) {
	s := open(t, o)
	mustCreate(t, s, newKey("live", "app1", "t1"))
	mustCreate(t, s, newKey("dead", "app1", "t1"))
	if _, _, err := s.RevokeKey(ctx(t), "dead", "rotated out", "admin", t0); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Hour)
	report := store.LeakReport{
		At: at, Reporter: "github", URL: "https://github.com/acme/app/blob/main/.env", Source: "public_repository", Reason: "secret scanning",
		ID: 99, KeyID: "ignored", Outcome: "ignored", KeyHash: hash("ignored"),
	}
	hashes := [][32]byte{hash("live"), hash("dead"), hash("nobody"), hash("live")}
	got, err := s.ReportLeaked(ctx(t), hashes, report)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ keyID, outcome string }{
		{"live", store.OutcomeRevoked},
		{"dead", store.OutcomeAlreadyRevoked},
		{"", store.OutcomeUnknown},
		{"live", store.OutcomeAlreadyRevoked}, // revoked by the first
	}
	if len(got) != len(want) {
		t.Fatalf("ReportLeaked returned %d reports, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.KeyID != want[i].keyID || r.Outcome != want[i].outcome || r.KeyHash != hashes[i] || r.ID == 0 || r.ID == 99 ||
			!r.At.Equal(at) || r.Reporter != "github" || r.URL != report.URL || r.Source != report.Source || r.Reason != report.Reason {
			t.Errorf("report %d = %+v, want key %q, outcome %s", i, r, want[i].keyID, want[i].outcome)
		}
	}
	k, _ := s.GetKey(ctx(t), "live")
	if k.Status != store.StatusRevoked || k.RevokedBy != "scanner:github" || k.RevokeReason != "secret scanning" || !k.Revoked.Equal(at) || k.Rev != 4 {
		t.Errorf("the leaked key = %+v, want it revoked by scanner:github at rev 4", k)
	}
	if k, _ := s.GetKey(ctx(t), "dead"); k.RevokeReason != "rotated out" || k.Rev != 3 {
		t.Errorf("the key revoked before = %+v, want it untouched", k)
	}
	wantSeq(t, s, 4)

	// The reports are recorded, newest first.
	recorded, err := s.LeakReports(ctx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	reversed := slices.Clone(got)
	slices.Reverse(reversed)
	if diff := cmp.Diff(reversed, recorded); diff != "" {
		t.Errorf("LeakReports (-want +got):\n%s", diff)
	}
	if two, err := s.LeakReports(ctx(t), 2); err != nil || !cmp.Equal(two, reversed[:2]) {
		t.Errorf("LeakReports(2) = %+v, %v; want the two newest", two, err)
	}
	// A report without a time is recorded now.
	before := time.Now().Add(-time.Second)
	if rs, err := s.ReportLeaked(ctx(t), [][32]byte{hash("x")}, store.LeakReport{Reporter: "gitlab"}); err != nil || len(rs) != 1 || rs[0].At.Before(before) {
		t.Errorf("ReportLeaked at no time = %+v, %v", rs, err)
	}
}

func testDeny(t *testing.T, o Opener) {
	s := open(t, o)
	e := jti("auth", "tok-1", t0.Add(time.Hour))
	d1, err := s.PutDeny(ctx(t), e)
	if err != nil {
		t.Fatal(err)
	}
	// Kept until denyentry.KeepUntil: the expires and the most leeway an
	// issuer may give.
	if len(d1.ID) != 64 || d1.Rev != 1 || !d1.KeepUntil.Equal(t0.Add(time.Hour+5*time.Minute)) || !cmp.Equal(d1.Entry, e, protocmp.Transform()) {
		t.Errorf("PutDeny = %+v", d1)
	}
	e.Issuer = "changed after the put"
	if d1.Entry.GetIssuer() != "auth" {
		t.Error("PutDeny's entry changed with the caller's: the store must keep its own copy")
	}

	// The same identity again, with a later expiry: one row, a new rev.
	e2 := jti("auth", "tok-1", t0.Add(2*time.Hour))
	d2, err := s.PutDeny(ctx(t), e2)
	if err != nil || d2.ID != d1.ID || d2.Rev != 2 || !d2.KeepUntil.Equal(t0.Add(2*time.Hour+5*time.Minute)) {
		t.Errorf("PutDeny(the same identity) = %+v, %v; want id %s at rev 2", d2, err, d1.ID)
	}
	// A subject entry asking for 30 minutes is kept a day past its cut (the
	// longest lifetime an issuer may allow) and the leeway: a token it
	// covers may live that long.
	short := subject("auth", "user-1", t0, t0.Add(30*time.Minute))
	d3, err := s.PutDeny(ctx(t), short)
	if err != nil {
		t.Fatal(err)
	}
	if day := t0.Add(24*time.Hour + 5*time.Minute); !d3.KeepUntil.Equal(day) {
		t.Errorf("PutDeny(a subject entry) kept until %v, want %v", d3.KeepUntil, day)
	}
	wantSeq(t, s, 3)
	all, err := s.DenyEntries(ctx(t), t0)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.DenyEntry{d2, d3}
	slices.SortFunc(want, func(a, b store.DenyEntry) int { return strings.Compare(a.ID, b.ID) })
	if diff := cmp.Diff(want, all, protocmp.Transform()); diff != "" {
		t.Errorf("DenyEntries(t0) (-want +got):\n%s", diff)
	}
	// An entry is live until its KeepUntil, not its expires.
	for _, tc := range []struct {
		now  time.Time
		want []string
	}{
		{t0.Add(30 * time.Minute), []string{d2.ID, d3.ID}},
		{t0.Add(2*time.Hour + 5*time.Minute - time.Second), []string{d2.ID, d3.ID}},
		{t0.Add(2*time.Hour + 5*time.Minute), []string{d3.ID}},
		{t0.Add(24*time.Hour + 5*time.Minute), nil},
	} {
		live, err := s.DenyEntries(ctx(t), tc.now)
		var got []string
		for _, d := range live {
			got = append(got, d.ID)
		}
		slices.Sort(tc.want)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("DenyEntries(t0+%v) = %v, %v; want %v", tc.now.Sub(t0), got, err, tc.want)
		}
	}
	// Pruning deletes what is kept until before the time, and assigns no
	// rev.
	if n, err := s.PruneDeny(ctx(t), t0.Add(2*time.Hour+5*time.Minute)); err != nil || n != 0 {
		t.Errorf("PruneDeny(t0+2h5m) = %d, %v; want 0: the entry is kept until, not before", n, err)
	}
	if n, err := s.PruneDeny(ctx(t), t0.Add(3*time.Hour)); err != nil || n != 1 {
		t.Errorf("PruneDeny(t0+3h) = %d, %v; want 1", n, err)
	}
	if live, _ := s.DenyEntries(ctx(t), time.Time{}); len(live) != 1 || live[0].ID != d3.ID {
		t.Errorf("DenyEntries after pruning = %+v, want only %s", live, d3.ID)
	}
	wantSeq(t, s, 3)

	for name, bad := range map[string]*configv1.DenyEntry{
		"nil":        nil,
		"no match":   {Expires: timestamppb.New(t0)},
		"empty jti":  {Match: &configv1.DenyEntry_Jti{}, Expires: timestamppb.New(t0)},
		"no expires": {Match: &configv1.DenyEntry_Jti{Jti: "x"}},
	} {
		if _, err := s.PutDeny(ctx(t), bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutDeny(%s): %v, want ErrInvalid", name, err)
		}
	}
	wantSeq(t, s, 3)
}

// testDenyIdentity: an entry's id is its issuer, match kind and value and
// issued_before, and nothing else; it never changes between releases.
func testDenyIdentity(t *testing.T, o Opener) {
	s := open(t, o)
	exp := t0.Add(time.Hour)
	put := func(e *configv1.DenyEntry) string {
		t.Helper()
		d, err := s.PutDeny(ctx(t), e)
		if err != nil {
			t.Fatal(err)
		}
		return d.ID
	}
	base := put(subject("auth", "user-1", t0, exp))
	// The ids are stored: a change of the encoding would duplicate every
	// entry put again after an upgrade.
	const golden = "2cc2adc943c11d37ce3c1c74560ac0dc54507a2b4a8f9ddd55df4bed441ea8e9"
	if base != golden {
		t.Errorf("deny entry id = %s, want %s: a changed id would no longer match the stored ones", base, golden)
	}
	if id := put(subject("auth", "user-1", t0, exp.Add(time.Hour))); id != base {
		t.Errorf("another expires: id %s, want the same entry %s", id, base)
	}
	distinct := map[string]*configv1.DenyEntry{
		"another issuer":        subject("other", "user-1", t0, exp),
		"every issuer":          subject("", "user-1", t0, exp),
		"another subject":       subject("auth", "user-2", t0, exp),
		"another issued_before": subject("auth", "user-1", t0.Add(time.Nanosecond), exp),
		"no issued_before":      {Issuer: "auth", Match: &configv1.DenyEntry_Subject{Subject: "user-1"}, Expires: timestamppb.New(exp)},
		"a client of that name": {Issuer: "auth", Match: &configv1.DenyEntry_ClientId{ClientId: "user-1"}, IssuedBefore: timestamppb.New(t0), Expires: timestamppb.New(exp)},
		"a jti of that name":    {Issuer: "auth", Match: &configv1.DenyEntry_Jti{Jti: "user-1"}, IssuedBefore: timestamppb.New(t0), Expires: timestamppb.New(exp)},
		// Written one after the other without their lengths, the parts
		// of these two would be the same bytes.
		"parts that run together 1": jti("x", "jtiy", exp),
		"parts that run together 2": jti("xjti", "y", exp),
	}
	seen := map[string]string{base: "base"}
	for name, e := range distinct {
		id := put(e)
		if other, ok := seen[id]; ok {
			t.Errorf("%s: id %s, the same as %s", name, id, other)
		}
		seen[id] = name
	}
	// A jti names one token: its issued_before (meaningless) does not make
	// another entry, as on the control plane and the nodes.
	if a, b := put(jti("auth", "tok-1", exp)), put(&configv1.DenyEntry{Issuer: "auth", Match: &configv1.DenyEntry_Jti{Jti: "tok-1"},
		IssuedBefore: timestamppb.New(t0), Expires: timestamppb.New(exp)}); a != b {
		t.Errorf("a jti entry with and without issued_before: ids %s and %s, want one entry", a, b)
	}
	if live, _ := s.DenyEntries(ctx(t), t0); len(live) != len(distinct)+2 {
		t.Errorf("%d entries, want %d", len(live), len(distinct)+2)
	}
}

func testIssuerKeys(t *testing.T, o Opener) {
	s := open(t, o)
	const jwks1, jwks2 = `{"keys":[{"kid":"a"}]}`, `{"keys":[{"kid":"a"},{"kid":"b"}]}`
	ik, err := s.PutIssuerKeys(ctx(t), "auth", jwks1)
	if err != nil || ik != (store.IssuerKeys{Issuer: "auth", JWKS: jwks1, Rev: 1}) {
		t.Errorf("PutIssuerKeys(auth) = %+v, %v", ik, err)
	}
	// The same keys again are no change.
	if ik, err := s.PutIssuerKeys(ctx(t), "auth", jwks1); err != nil || ik.Rev != 1 {
		t.Errorf("PutIssuerKeys(auth, unchanged) = %+v, %v; want rev 1 kept", ik, err)
	}
	if ik, err := s.PutIssuerKeys(ctx(t), "other", jwks1); err != nil || ik.Rev != 2 {
		t.Errorf("PutIssuerKeys(other) = %+v, %v", ik, err)
	}
	if ik, err := s.PutIssuerKeys(ctx(t), "auth", jwks2); err != nil || ik != (store.IssuerKeys{Issuer: "auth", JWKS: jwks2, Rev: 3}) {
		t.Errorf("PutIssuerKeys(auth, new keys) = %+v, %v", ik, err)
	}
	wantSeq(t, s, 3)
	_, _, _, issuers, err := s.State(ctx(t), t0)
	want := []store.IssuerKeys{{Issuer: "auth", JWKS: jwks2, Rev: 3}, {Issuer: "other", JWKS: jwks1, Rev: 2}}
	if err != nil || !slices.Equal(issuers, want) {
		t.Errorf("State's issuers = %+v, %v; want %+v", issuers, err, want)
	}
}

// change describes a Change for messages and comparisons.
func change(c store.Change) string {
	n := 0
	var s string
	if c.Key != nil {
		n++
		s = fmt.Sprintf("%d:key %s %v", c.Rev, c.Key.ID, c.Key.Status)
		if c.Key.Rev != c.Rev {
			s += fmt.Sprintf(" (rev %d)", c.Key.Rev)
		}
	}
	if c.Deny != nil {
		n++
		s = fmt.Sprintf("%d:deny %s", c.Rev, c.Deny.Entry.GetJti())
		if c.Deny.Rev != c.Rev {
			s += fmt.Sprintf(" (rev %d)", c.Deny.Rev)
		}
	}
	if c.IssuerKeys != nil {
		n++
		s = fmt.Sprintf("%d:issuer %s %s", c.Rev, c.IssuerKeys.Issuer, c.IssuerKeys.JWKS)
		if c.IssuerKeys.Rev != c.Rev {
			s += fmt.Sprintf(" (rev %d)", c.IssuerKeys.Rev)
		}
	}
	if n != 1 {
		return fmt.Sprintf("%d: %d rows set", c.Rev, n)
	}
	return s
}

func changes(cs []store.Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, change(c))
	}
	return out
}

// writeMix makes changes of every kind, some of rows changed before, and
// returns the changes Changes(0) must then return.
func writeMix(t *testing.T, s *store.Store) []string {
	t.Helper()
	exp := t0.Add(time.Hour)
	steps := []func() error{
		func() error { _, err := s.CreateKey(ctx(t), newKey("k1", "app1", "t1")); return err },               // 1
		func() error { _, err := s.PutDeny(ctx(t), jti("auth", "j1", exp)); return err },                     // 2
		func() error { _, err := s.CreateKey(ctx(t), newKey("k2", "app1", "t1")); return err },               // 3
		func() error { _, err := s.PutIssuerKeys(ctx(t), "auth", "v1"); return err },                         // 4
		func() error { _, _, err := s.RevokeKey(ctx(t), "k1", "r", "admin", t0); return err },                // 5
		func() error { _, err := s.PutDeny(ctx(t), jti("auth", "j2", exp)); return err },                     // 6
		func() error { _, err := s.PutDeny(ctx(t), jti("auth", "j1", exp.Add(time.Hour))); return err },      // 7
		func() error { _, err := s.PutIssuerKeys(ctx(t), "other", "v1"); return err },                        // 8
		func() error { _, _, err := s.RotateKey(ctx(t), "k2", newKey("k3", "app1", "t1"), exp); return err }, // 9, 10
		func() error { _, err := s.PutIssuerKeys(ctx(t), "auth", "v2"); return err },                         // 11
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
	}
	return []string{
		"5:key k1 revoked",
		"6:deny j2",
		"7:deny j1",
		"8:issuer other v1",
		"9:key k2 active",
		"10:key k3 active",
		"11:issuer auth v2",
	}
}

func testChanges(t *testing.T, o Opener) {
	s := open(t, o)
	want := writeMix(t, s)
	all, err := s.Changes(ctx(t), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := changes(all); !slices.Equal(got, want) {
		t.Errorf("Changes(0) = %q\nwant %q", got, want)
	}
	// The rows are the rows as stored.
	for _, c := range all {
		if c.Key != nil {
			if k, _ := s.GetKey(ctx(t), c.Key.ID); !cmp.Equal(*c.Key, k) {
				t.Errorf("Changes' key %s = %+v, want %+v", c.Key.ID, *c.Key, k)
			}
		}
	}
	for _, tc := range []struct {
		after uint64
		n     int
		want  []string
	}{
		{0, 3, want[:3]},
		{5, 2, want[1:3]},
		{6, 0, want[2:]},
		{9, 1, want[5:6]},
		{11, 0, nil},
		{1 << 63, 0, nil},
		{1<<64 - 1, 0, nil},
	} {
		got, err := s.Changes(ctx(t), tc.after, tc.n)
		if err != nil || !slices.Equal(changes(got), tc.want) {
			t.Errorf("Changes(%d, %d) = %q, %v; want %q", tc.after, tc.n, changes(got), err, tc.want)
		}
	}
	// Paging two at a time from the last rev seen gets them all.
	var paged []string
	for after := uint64(0); ; {
		page, err := s.Changes(ctx(t), after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("Changes(%d, 2) returned %d changes", after, len(page))
		}
		paged = append(paged, changes(page)...)
		after = page[len(page)-1].Rev
	}
	if !slices.Equal(paged, want) {
		t.Errorf("paging by 2 = %q\nwant %q", paged, want)
	}
}

func testState(t *testing.T, o Opener) {
	s := open(t, o)
	writeMix(t, s)
	seq, keys, deny, issuers, err := s.State(ctx(t), t0.Add(90*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if seq != 11 {
		t.Errorf("State's seq = %d, want 11", seq)
	}
	if !slices.Equal(ids(keys), []string{"k1", "k2", "k3"}) {
		t.Errorf("State's keys = %v", ids(keys))
	}
	for _, k := range keys {
		if stored, _ := s.GetKey(ctx(t), k.ID); !cmp.Equal(k, stored) {
			t.Errorf("State's key %s = %+v, want %+v", k.ID, k, stored)
		}
	}
	// j2 expired at t0+1h; j1 was put again expiring at t0+2h.
	if len(deny) != 1 || deny[0].Entry.GetJti() != "j1" || deny[0].Rev != 7 {
		t.Errorf("State's deny entries = %+v, want j1 at rev 7 only", deny)
	}
	want := []store.IssuerKeys{{Issuer: "auth", JWKS: "v2", Rev: 11}, {Issuer: "other", JWKS: "v1", Rev: 8}}
	if !slices.Equal(issuers, want) {
		t.Errorf("State's issuers = %+v, want %+v", issuers, want)
	}
}

// testConcurrentWriters: writers on several connections (as several key
// services) create rows of every kind at once, while a reader follows
// Changes and another reads State. Revs are 1..N without a gap or a
// duplicate, the follower sees each rev in turn (never a rev before the
// one under it has committed), and every State is one rev's whole state.
func testConcurrentWriters(t *testing.T, o Opener) {
	const writers, perWriter = 6, 25
	const total = writers * perWriter
	stores := []*store.Store{open(t, o), open(t, o), open(t, o)}
	c := ctx(t)
	var done atomic.Bool
	errs := make(chan error, writers+2)
	var wg, readers sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			s := stores[w%len(stores)]
			for i := range perWriter {
				var err error
				switch id := fmt.Sprintf("w%d-%02d", w, i); i % 3 {
				case 0:
					_, err = s.CreateKey(c, newKey(id, "app1", "t1"))
				case 1:
					_, err = s.PutDeny(c, jti("auth", id, t0.Add(time.Hour)))
				case 2:
					_, err = s.PutIssuerKeys(c, id, "{}")
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d, write %d: %w", w, i, err)
					return
				}
			}
		})
	}
	// The follower: every change it is given is the one after the last.
	var followed []uint64
	readers.Go(func() {
		s := stores[0]
		var after uint64
		for after < total {
			// Once the writers are done, a read that finds nothing new
			// is the last: what they wrote is all there.
			finished := done.Load()
			cs, err := s.Changes(c, after, 7)
			if err != nil {
				errs <- fmt.Errorf("follower: %w", err)
				return
			}
			if len(cs) == 0 && finished {
				return
			}
			for _, ch := range cs {
				if ch.Rev != after+1 {
					errs <- fmt.Errorf("follower: rev %d after %d: a change committed after one with a higher rev", ch.Rev, after)
					return
				}
				after = ch.Rev
				followed = append(followed, ch.Rev)
			}
		}
	})
	// The state reader: each state holds exactly the rows of its seq,
	// since every write adds a row.
	states := 0
	readers.Go(func() {
		s := stores[1]
		for !done.Load() {
			seq, keys, deny, issuers, err := s.State(c, t0)
			if err != nil {
				errs <- fmt.Errorf("state: %w", err)
				return
			}
			if n := len(keys) + len(deny) + len(issuers); uint64(n) != seq {
				errs <- fmt.Errorf("state at seq %d holds %d rows", seq, n)
				return
			}
			states++
		}
	})
	wg.Wait()
	done.Store(true)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if len(followed) != total {
		t.Errorf("the follower saw %d changes, want %d", len(followed), total)
	}
	wantSeq(t, stores[2], total)
	var revs []uint64
	for after := uint64(0); ; {
		cs, err := stores[2].Changes(ctx(t), after, 40)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) == 0 {
			break
		}
		for _, ch := range cs {
			revs = append(revs, ch.Rev)
		}
		after = cs[len(cs)-1].Rev
	}
	for i, rev := range revs {
		if rev != uint64(i+1) {
			t.Fatalf("Changes: rev %d at position %d, want %d: a gap or a duplicate (%v)", rev, i, i+1, revs)
		}
	}
	if len(revs) != total {
		t.Errorf("Changes returned %d revs, want %d", len(revs), total)
	}
	t.Logf("%d states read during the writes", states)
}

func testReopen(t *testing.T, o Opener) {
	s, err := o(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	writeMix(t, s)
	n, err := s.SchemaVersion(ctx(t))
	if err != nil || n < 1 {
		t.Fatalf("SchemaVersion = %d, %v", n, err)
	}
	seq, keys, deny, issuers, err := s.State(ctx(t), t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, o) // migrations run again and change nothing
	if n2, err := s2.SchemaVersion(ctx(t)); err != nil || n2 != n {
		t.Errorf("SchemaVersion after reopening = %d, %v; want %d", n2, err, n)
	}
	seq2, keys2, deny2, issuers2, err := s2.State(ctx(t), t0)
	if err != nil || seq2 != seq || !cmp.Equal(keys2, keys) || !cmp.Equal(deny2, deny, protocmp.Transform()) || !slices.Equal(issuers2, issuers) {
		t.Errorf("State after reopening differs: seq %d, want %d; err %v", seq2, seq, err)
	}
	// The sequence goes on where it was.
	if k := mustCreate(t, s2, newKey("k9", "app1", "t1")); k.Rev != seq+1 {
		t.Errorf("the first key after reopening got rev %d, want %d", k.Rev, seq+1)
	}
}

func testConcurrentOpen(t *testing.T, o Opener) {
	var wg sync.WaitGroup
	stores := make([]*store.Store, 4)
	errs := make([]error, 4)
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = o(ctx(t)) })
	}
	wg.Wait()
	for i, s := range stores {
		if errs[i] != nil {
			t.Fatalf("open %d: %v", i, errs[i])
		}
		t.Cleanup(func() { _ = s.Close() })
		if n, err := s.SchemaVersion(ctx(t)); err != nil || n < 1 {
			t.Errorf("store %d: SchemaVersion = %d, %v", i, n, err)
		}
	}
	// The migration's first rev row went in once.
	if k := mustCreate(t, stores[3], newKey("k1", "app1", "t1")); k.Rev != 1 {
		t.Errorf("the first key got rev %d, want 1", k.Rev)
	}
}

func testCanceled(t *testing.T, o Opener) {
	s := open(t, o)
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.CreateKey(c, newKey("k1", "app1", "t1")); err == nil {
		t.Error("CreateKey with a canceled context succeeded")
	}
	if _, err := s.PutDeny(c, jti("auth", "j1", t0)); err == nil {
		t.Error("PutDeny with a canceled context succeeded")
	}
	wantSeq(t, s, 0)
	if _, err := s.GetKey(ctx(t), "k1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after a canceled create: %v, want no key", err)
	}
}
