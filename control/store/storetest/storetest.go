// Package storetest is the conformance suite of control/store: the same
// tests against every database the store runs on.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-gw/portico/control/store"
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
		{"Commit", testCommit},
		{"Conflict", testConflict},
		{"InvalidCommits", testInvalidCommits},
		{"ListAndPaging", testList},
		{"RollbackSharesBlobs", testRollback},
		{"ConcurrentWriters", testConcurrentWriters},
		{"Audit", testAudit},
		{"Tokens", testTokens},
		{"Reopen", testReopen},
		{"ConcurrentOpen", testConcurrentOpen},
		{"Canceled", testCanceled},
		{"FastLane", testFastLane},
		{"FastLaneRev", testFastLaneRev},
		{"FastLaneRetry", testFastLaneRetry},
		{"FastLaneGap", testFastLaneGap},
		{"FastLaneSources", testFastLaneSources},
		{"FastLaneEpoch", func(t *testing.T, o Opener) { testFastLaneEpoch(t, o, newDB(t)) }},
		{"FastLanePrune", testFastLanePrune},
		{"FastLaneInvalid", testFastLaneInvalid},
		{"FastLaneConcurrent", testFastLaneConcurrent},
		{"Rollouts", testRollouts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newDB(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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

func commit(i int) store.Commit {
	return store.Commit{
		Config:    []byte(fmt.Sprintf("config %d", i)),
		Snapshot:  []byte(fmt.Sprintf("snapshot %d", i)),
		CreatedBy: "tok-orders", Message: fmt.Sprintf("change %d", i), Diff: fmt.Sprintf("+ route r%d", i),
		Audit: store.AuditEntry{Actor: "tok-orders", Team: "orders", Action: "routes.put", Object: fmt.Sprintf("route r%d", i)},
	}
}

func testEmpty(t *testing.T, o Opener) {
	s := open(t, o)
	if _, err := s.Latest(ctx(t)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Latest of an empty store: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx(t), 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(1) of an empty store: %v, want ErrNotFound", err)
	}
	if vs, err := s.List(ctx(t), 0, 10); err != nil || len(vs) != 0 {
		t.Errorf("List of an empty store = %v, %v", vs, err)
	}
	if _, err := s.Blob(ctx(t), store.SHA256([]byte("nothing"))); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Blob of an empty store: %v, want ErrNotFound", err)
	}
}

func testCommit(t *testing.T, o Opener) {
	s := open(t, o)
	before := time.Now().Add(-time.Second)
	c := commit(1)
	v, err := s.Commit(ctx(t), 0, c)
	if err != nil {
		t.Fatal(err)
	}
	if v.Number != 1 || v.ConfigSHA256 != store.SHA256(c.Config) || v.SnapshotSHA256 != store.SHA256(c.Snapshot) ||
		v.CreatedBy != "tok-orders" || v.Message != "change 1" || v.Diff != "+ route r1" || v.CreatedAt.Before(before) {
		t.Errorf("Commit = %+v", v)
	}
	latest, err := s.Latest(ctx(t))
	if err != nil || latest != v {
		t.Errorf("Latest = %+v, %v; want %+v", latest, err, v)
	}
	got, err := s.Get(ctx(t), 1)
	if err != nil || got != v {
		t.Errorf("Get(1) = %+v, %v; want %+v", got, err, v)
	}
	for _, want := range [][]byte{c.Config, c.Snapshot} {
		b, err := s.Blob(ctx(t), store.SHA256(want))
		if err != nil || string(b) != string(want) {
			t.Errorf("Blob(%s) = %q, %v; want %q", store.SHA256(want), b, err, want)
		}
	}
	// Binary content survives as it is.
	bin := commit(2)
	bin.Snapshot = []byte{0, 1, 2, 0xff, 0xfe, 0}
	v2, err := s.Commit(ctx(t), 1, bin)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := s.Blob(ctx(t), v2.SnapshotSHA256); err != nil || string(b) != string(bin.Snapshot) {
		t.Errorf("binary blob = %x, %v", b, err)
	}
	// The audit entry went in with the version.
	entries, err := s.Audit(ctx(t), store.AuditQuery{})
	if err != nil || len(entries) != 2 || entries[0].Version != 2 || entries[1].Version != 1 || entries[1].Object != "route r1" {
		t.Errorf("audit after two commits = %+v, %v", entries, err)
	}
}

func testConflict(t *testing.T, o Opener) {
	s := open(t, o)
	if _, err := s.Commit(ctx(t), 0, commit(1)); err != nil {
		t.Fatal(err)
	}
	for _, prev := range []int64{0, 2, 7} {
		if _, err := s.Commit(ctx(t), prev, commit(9)); !errors.Is(err, store.ErrConflict) {
			t.Errorf("Commit(prev %d) with version 1 newest: %v, want ErrConflict", prev, err)
		}
	}
	// Nothing of the refused commits was written.
	if _, err := s.Blob(ctx(t), store.SHA256(commit(9).Config)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused commit's blob: %v, want ErrNotFound", err)
	}
	if entries, _ := s.Audit(ctx(t), store.AuditQuery{}); len(entries) != 1 {
		t.Errorf("%d audit entries, want 1: refused commits leave none", len(entries))
	}
	if v, err := s.Commit(ctx(t), 1, commit(2)); err != nil || v.Number != 2 {
		t.Errorf("Commit(prev 1) = %+v, %v", v, err)
	}
}

func testInvalidCommits(t *testing.T, o Opener) {
	s := open(t, o)
	for name, c := range map[string]store.Commit{
		"no snapshot": {Config: []byte("c"), CreatedBy: "a"},
		"no author":   {Config: []byte("c"), Snapshot: []byte("s")},
	} {
		if _, err := s.Commit(ctx(t), 0, c); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.Commit(ctx(t), -1, commit(1)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("negative previous version: %v, want ErrInvalid", err)
	}
	if err := s.AppendAudit(ctx(t), &store.AuditEntry{Action: "x"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("audit entry without actor: %v, want ErrInvalid", err)
	}
	// An empty config is a config: nothing declared yet, or everything
	// deleted.
	v, err := s.Commit(ctx(t), 0, store.Commit{Snapshot: []byte("s"), CreatedBy: "a"})
	if err != nil {
		t.Fatalf("a version with an empty config: %v", err)
	}
	if b, err := s.Blob(ctx(t), v.ConfigSHA256); err != nil || len(b) != 0 {
		t.Errorf("the empty config's blob = %q, %v", b, err)
	}
}

func testList(t *testing.T, o Opener) {
	s := open(t, o)
	for i := 1; i <= 7; i++ {
		if _, err := s.Commit(ctx(t), int64(i-1), commit(i)); err != nil {
			t.Fatal(err)
		}
	}
	numbers := func(vs []store.Version) []int64 {
		var out []int64
		for _, v := range vs {
			out = append(out, v.Number)
		}
		return out
	}
	all, err := s.List(ctx(t), 0, 0)
	if err != nil || !slices.Equal(numbers(all), []int64{7, 6, 5, 4, 3, 2, 1}) {
		t.Errorf("List(all) = %v, %v", numbers(all), err)
	}
	page, err := s.List(ctx(t), 0, 3)
	if err != nil || !slices.Equal(numbers(page), []int64{7, 6, 5}) {
		t.Errorf("List(first 3) = %v, %v", numbers(page), err)
	}
	page, err = s.List(ctx(t), 5, 3)
	if err != nil || !slices.Equal(numbers(page), []int64{4, 3, 2}) {
		t.Errorf("List(before 5, 3) = %v, %v", numbers(page), err)
	}
}

func testRollback(t *testing.T, o Opener) {
	s := open(t, o)
	for i := 1; i <= 2; i++ {
		if _, err := s.Commit(ctx(t), int64(i-1), commit(i)); err != nil {
			t.Fatal(err)
		}
	}
	back := commit(1)
	back.Message, back.RollbackOf = "rollback to 1", 1
	v, err := s.Commit(ctx(t), 2, back)
	if err != nil {
		t.Fatal(err)
	}
	one, _ := s.Get(ctx(t), 1)
	if v.Number != 3 || v.RollbackOf != 1 || v.SnapshotSHA256 != one.SnapshotSHA256 || v.ConfigSHA256 != one.ConfigSHA256 {
		t.Errorf("rollback = %+v, want version 3 with version 1's blobs", v)
	}
}

// testConcurrentWriters: two teams change the config at once, each
// reading the newest version, adding its change and committing, again
// after a conflict. In every round both read before either commits, so
// one of them must conflict. Every change lands, versions are numbered
// without gaps, and the last config holds all of them.
func testConcurrentWriters(t *testing.T, o Opener) {
	const perTeam = 15
	writers := []*store.Store{open(t, o), open(t, o)} // two connections, as two control planes
	rounds := make([]sync.WaitGroup, perTeam)
	for i := range rounds {
		rounds[i].Add(2)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	var conflicts sync.Map
	for w, team := range []string{"orders", "search"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A writer that stops early still passes the barriers of the
			// rounds it leaves, so the other never waits for it.
			next := 0
			defer func() {
				for ; next < perTeam; next++ {
					rounds[next].Done()
				}
			}()
			s := writers[w]
			for i := range perTeam {
				for attempt := 0; ; attempt++ {
					if attempt > 100 {
						errs <- fmt.Errorf("%s: change %d conflicted 100 times", team, i)
						return
					}
					var prev int64
					var config string
					if v, err := s.Latest(ctx(t)); err == nil {
						prev = v.Number
						b, err := s.Blob(ctx(t), v.ConfigSHA256)
						if err != nil {
							errs <- err
							return
						}
						config = string(b)
					} else if !errors.Is(err, store.ErrNotFound) {
						errs <- err
						return
					}
					if attempt == 0 {
						// Both writers have read before either commits.
						rounds[i].Done()
						next = i + 1
						rounds[i].Wait()
					}
					change := fmt.Sprintf("%s-%02d;", team, i)
					_, err := s.Commit(ctx(t), prev, store.Commit{
						Config: []byte(config + change), Snapshot: []byte("compiled " + config + change),
						CreatedBy: "tok-" + team, Message: change,
						Audit: store.AuditEntry{Actor: "tok-" + team, Team: team, Action: "routes.put", Object: change},
					})
					if errors.Is(err, store.ErrConflict) {
						n, _ := conflicts.LoadOrStore(team, new(int))
						*n.(*int)++
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	vs, err := writers[0].List(ctx(t), 0, 0)
	if err != nil || len(vs) != 2*perTeam {
		t.Fatalf("%d versions, %v; want %d", len(vs), err, 2*perTeam)
	}
	for i, v := range vs {
		if v.Number != int64(2*perTeam-i) {
			t.Fatalf("versions %d..: number %d at position %d: a gap or a duplicate", 2*perTeam, v.Number, i)
		}
	}
	last, err := writers[1].Blob(ctx(t), vs[0].ConfigSHA256)
	if err != nil {
		t.Fatal(err)
	}
	for _, team := range []string{"orders", "search"} {
		for i := range perTeam {
			if change := fmt.Sprintf("%s-%02d;", team, i); strings.Count(string(last), change) != 1 {
				t.Errorf("the last config holds %q %d times, want once", change, strings.Count(string(last), change))
			}
		}
		entries, err := writers[0].Audit(ctx(t), store.AuditQuery{Team: team})
		if err != nil || len(entries) != perTeam {
			t.Errorf("%s: %d audit entries, %v; want %d", team, len(entries), err, perTeam)
		}
	}
	n := 0
	conflicts.Range(func(_, v any) bool { n += *v.(*int); return true })
	if n < perTeam {
		t.Errorf("%d conflicts in %d rounds where both writers started from the same version: a commit must have overwritten the other's", n, perTeam)
	}
}

func testAudit(t *testing.T, o Opener) {
	s := open(t, o)
	for i, e := range []store.AuditEntry{
		{Actor: "tok-a", Team: "orders", Action: "routes.put", Object: "route orders.get", Outcome: "permission_denied", Detail: "route outside the team's prefixes"},
		{Actor: "tok-p", Action: "token.create", Object: "token tok-b"},
		{Actor: "tok-a", Team: "orders", Action: "routes.delete", Object: "route orders.old"},
	} {
		if err := s.AppendAudit(ctx(t), &e); err != nil || e.ID == 0 || e.At.IsZero() {
			t.Fatalf("AppendAudit %d: %+v, %v", i, e, err)
		}
	}
	all, err := s.Audit(ctx(t), store.AuditQuery{})
	if err != nil || len(all) != 3 || all[0].Action != "routes.delete" || all[2].Outcome != "permission_denied" || all[1].Outcome != "ok" {
		t.Fatalf("Audit(all) = %+v, %v", all, err)
	}
	orders, err := s.Audit(ctx(t), store.AuditQuery{Team: "orders"})
	if err != nil || len(orders) != 2 {
		t.Errorf("Audit(orders) = %+v, %v", orders, err)
	}
	page, err := s.Audit(ctx(t), store.AuditQuery{Before: all[0].ID, Limit: 1})
	if err != nil || len(page) != 1 || page[0].ID != all[1].ID {
		t.Errorf("Audit(before newest, 1) = %+v, %v", page, err)
	}
}

func testTokens(t *testing.T, o Opener) {
	s := open(t, o)
	hash := store.SHA256([]byte("ptk_orders_secret"))
	tok := store.Token{ID: "tok-orders", Hash: hash, Team: "orders", Role: "team-admin", CreatedBy: "tok-platform", Note: "orders CI"}
	if err := s.PutToken(ctx(t), tok); err != nil {
		t.Fatal(err)
	}
	got, err := s.TokenByHash(ctx(t), hash)
	if err != nil || got.ID != "tok-orders" || got.Team != "orders" || got.Role != "team-admin" || !got.RevokedAt.IsZero() || got.CreatedAt.IsZero() {
		t.Errorf("TokenByHash = %+v, %v", got, err)
	}
	if err := s.PutToken(ctx(t), tok); !errors.Is(err, store.ErrDuplicate) {
		t.Errorf("same token again: %v, want ErrDuplicate", err)
	}
	other := tok
	other.ID = "tok-other"
	if err := s.PutToken(ctx(t), other); !errors.Is(err, store.ErrDuplicate) {
		t.Errorf("another token with the same hash: %v, want ErrDuplicate", err)
	}
	for name, bad := range map[string]store.Token{
		"raw token as hash": {ID: "x", Hash: "ptk_orders_secret", Team: "orders", Role: "team-admin"},
		"unknown role":      {ID: "x", Hash: store.SHA256([]byte("x")), Team: "orders", Role: "owner"},
		"team role no team": {ID: "x", Hash: store.SHA256([]byte("x")), Role: "team-admin"},
	} {
		if err := s.PutToken(ctx(t), bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	platform := store.Token{ID: "tok-platform", Hash: store.SHA256([]byte("ptk_platform")), Role: "platform-admin", CreatedBy: "bootstrap"}
	if err := s.PutToken(ctx(t), platform); err != nil {
		t.Fatal(err)
	}
	if ts, err := s.Tokens(ctx(t), "orders"); err != nil || len(ts) != 1 || ts[0].ID != "tok-orders" {
		t.Errorf("Tokens(orders) = %+v, %v", ts, err)
	}
	if ts, err := s.Tokens(ctx(t), ""); err != nil || len(ts) != 1 || ts[0].ID != "tok-platform" {
		t.Errorf("Tokens(platform) = %+v, %v", ts, err)
	}
	at := time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)
	if err := s.RevokeToken(ctx(t), "tok-orders", at); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeToken(ctx(t), "tok-orders", at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.TokenByHash(ctx(t), hash); !got.RevokedAt.Equal(at) {
		t.Errorf("revoked at %v, want the first revocation %v", got.RevokedAt, at)
	}
	if err := s.RevokeToken(ctx(t), "tok-nobody", at); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoking an unknown token: %v, want ErrNotFound", err)
	}
	if _, err := s.TokenByHash(ctx(t), store.SHA256([]byte("guess"))); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an unknown hash: %v, want ErrNotFound", err)
	}
}

func testReopen(t *testing.T, o Opener) {
	s, err := o(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx(t), 0, commit(1)); err != nil {
		t.Fatal(err)
	}
	n, err := s.SchemaVersion(ctx(t))
	if err != nil || n < 1 {
		t.Fatalf("SchemaVersion = %d, %v", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, o) // migrations run again and change nothing
	if n2, err := s2.SchemaVersion(ctx(t)); err != nil || n2 != n {
		t.Errorf("SchemaVersion after reopening = %d, %v; want %d", n2, err, n)
	}
	if v, err := s2.Latest(ctx(t)); err != nil || v.Number != 1 {
		t.Errorf("Latest after reopening = %+v, %v", v, err)
	}
}

func testConcurrentOpen(t *testing.T, o Opener) {
	var wg sync.WaitGroup
	stores := make([]*store.Store, 4)
	errs := make([]error, 4)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = o(ctx(t))
		}()
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
}

func testCanceled(t *testing.T, o Opener) {
	s := open(t, o)
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Commit(c, 0, commit(1)); err == nil {
		t.Error("Commit with a canceled context succeeded")
	}
	if _, err := s.Latest(ctx(t)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after a canceled commit: %v, want no version", err)
	}
}

// testRollouts: a rollout's state is kept by its version, replaced by a
// later save, and survives a reopen; one never saved is ErrNotFound.
func testRollouts(t *testing.T, o Opener) {
	s := open(t, o)
	if _, err := s.GetRollout(ctx(t), 2); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetRollout of none = %v, want ErrNotFound", err)
	}
	if err := s.SaveRollout(ctx(t), store.Rollout{Version: 2, Previous: 1, Stage: 0, State: "running"}); err != nil {
		t.Fatal(err)
	}
	want := store.Rollout{Version: 2, Previous: 1, Stage: 2, State: "reverted", Evidence: "route r failed 30 of 100 calls", Nodes: []string{"node-a", "node-b"}}
	if err := s.SaveRollout(ctx(t), want); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveRollout(ctx(t), store.Rollout{Version: 3, Previous: 1, State: "halted"}); err != nil {
		t.Fatal(err)
	}
	got, err := open(t, o).GetRollout(ctx(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != want.Version || got.Previous != want.Previous || got.Stage != want.Stage || got.State != want.State || got.Evidence != want.Evidence ||
		!slices.Equal(got.Nodes, want.Nodes) || got.UpdatedAt.IsZero() {
		t.Errorf("GetRollout(2) = %+v, want %+v", got, want)
	}
	for _, bad := range []store.Rollout{{Version: 0, State: "running"}, {Version: 4}} {
		if err := s.SaveRollout(ctx(t), bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SaveRollout(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}
