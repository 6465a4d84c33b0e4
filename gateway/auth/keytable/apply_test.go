package keytable_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/auth/keytable"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// at is want, at revision rev.
func at(r *configv1.KeyRecord, rev uint64) keytable.Record {
	w := want(r)
	w.Rev = rev
	return w
}

// with returns a copy of r changed by set.
func with(r *configv1.KeyRecord, set func(*configv1.KeyRecord)) *configv1.KeyRecord {
	c := proto.Clone(r).(*configv1.KeyRecord)
	set(c)
	return c
}

func revoke(r *configv1.KeyRecord) { r.Status = configv1.KeyStatus_KEY_STATUS_REVOKED }

func apply(t testing.TB, tbl *keytable.Table, changes ...keytable.Change) *keytable.Table {
	t.Helper()
	next, err := tbl.Apply(changes)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return next
}

func TestApply(t *testing.T) {
	t.Parallel()
	aKey, a := newKey(t, "key-a")
	bKey, b := newKey(t, "key-b")
	_, c := newKey(t, "key-c")
	dKey, d := newKey(t, "key-d")
	base := build(t, a, b, c)
	// over has b, revoked, at revision 5 in its overlay.
	bRevoked := with(b, revoke)
	over := apply(t, base, keytable.Change{Record: bRevoked, Rev: 5})
	gold, silver, bronze := with(d, func(r *configv1.KeyRecord) { r.Plan = "gold" }),
		with(d, func(r *configv1.KeyRecord) { r.Plan = "silver" }),
		with(d, func(r *configv1.KeyRecord) { r.Plan = "bronze" })
	type keyWant struct {
		rec  *configv1.KeyRecord // nil: not in the table
		hash *configv1.KeyRecord // the key looked up; rec if nil
		rev  uint64
	}
	for _, tc := range []struct {
		name    string
		from    *keytable.Table
		changes []keytable.Change
		same    bool // Apply returns from itself
		want    []keyWant
		len     int
		overlay int
		err     []problem
	}{{
		name:    "insert a new key",
		from:    base,
		changes: []keytable.Change{{Record: d, Rev: 1}},
		want:    []keyWant{{rec: a}, {rec: b}, {rec: c}, {rec: d, rev: 1}},
		len:     4, overlay: 1,
	}, {
		name:    "revoke a base key",
		from:    base,
		changes: []keytable.Change{{Record: with(a, revoke), Rev: 1}},
		want:    []keyWant{{rec: with(a, revoke), rev: 1}, {rec: b}, {rec: c}, {hash: d}},
		len:     3, overlay: 1,
	}, {
		name:    "a base key at revision 0 is not replaced at revision 0",
		from:    base,
		changes: []keytable.Change{{Record: with(a, revoke), Rev: 0}},
		same:    true,
		want:    []keyWant{{rec: a}},
		len:     3, overlay: 0,
	}, {
		name:    "older revision skipped",
		from:    over,
		changes: []keytable.Change{{Record: b, Rev: 4}},
		same:    true,
		want:    []keyWant{{rec: a}, {rec: bRevoked, rev: 5}, {rec: c}},
		len:     3, overlay: 1,
	}, {
		name:    "equal revision skipped",
		from:    over,
		changes: []keytable.Change{{Record: b, Rev: 5}},
		same:    true,
		want:    []keyWant{{rec: bRevoked, rev: 5}},
		len:     3, overlay: 1,
	}, {
		name:    "overlay key replaced again",
		from:    over,
		changes: []keytable.Change{{Record: b, Rev: 6}},
		want:    []keyWant{{rec: a}, {rec: b, rev: 6}, {rec: c}},
		len:     3, overlay: 1,
	}, {
		name:    "overlay kept beside a new key",
		from:    over,
		changes: []keytable.Change{{Record: d, Rev: 1}},
		want:    []keyWant{{rec: a}, {rec: bRevoked, rev: 5}, {rec: c}, {rec: d, rev: 1}},
		len:     4, overlay: 2,
	}, {
		name: "in one call the highest revision wins, the first of equals",
		from: over,
		changes: []keytable.Change{
			{Record: bronze, Rev: 2}, {Record: gold, Rev: 3}, {Record: silver, Rev: 3}, {Record: bronze, Rev: 1},
			{Record: with(b, revoke), Rev: 4}, {Record: b, Rev: 7},
		},
		want: []keyWant{{rec: gold, rev: 3}, {rec: b, rev: 7}},
		len:  4, overlay: 2,
	}, {
		name:    "an invalid record refuses the call",
		from:    over,
		changes: []keytable.Change{{Record: d, Rev: 1}, {Record: with(a, func(r *configv1.KeyRecord) { r.Status = 0 }), Rev: 9}, {Record: nil, Rev: 1}},
		err:     []problem{{keytable.InvalidStatus, 1, -1, []string{`keys[1] (key "key-a")`}}, {keytable.NilRecord, 2, -1, nil}},
	}, {
		name:    "an invalid record is refused even when its revision is old",
		from:    over,
		changes: []keytable.Change{{Record: with(b, func(r *configv1.KeyRecord) { r.Sha256 = r.Sha256[:31] }), Rev: 1}},
		err:     []problem{{keytable.InvalidHash, 0, -1, nil}},
	}, {
		name:    "one key id for two keys in one call",
		from:    base,
		changes: []keytable.Change{{Record: d, Rev: 1}, {Record: with(d, func(r *configv1.KeyRecord) { r.Sha256 = a.Sha256 }), Rev: 1}},
		err:     []problem{{keytable.DuplicateKeyID, 1, 0, []string{"also used by keys[0]"}}},
	}, {
		name:    "a key id of the overlay for another key",
		from:    over,
		changes: []keytable.Change{{Record: with(d, func(r *configv1.KeyRecord) { r.KeyId = "key-b" }), Rev: 1}},
		err:     []problem{{keytable.DuplicateKeyID, 0, -1, []string{"another key of the table"}}},
	}, {
		name:    "nil table",
		from:    nil,
		changes: []keytable.Change{{Record: a, Rev: 3}},
		want:    []keyWant{{rec: a, rev: 3}, {hash: b}},
		len:     1, overlay: 1,
	}, {
		name: "nil table, no changes",
		from: nil,
		same: true,
		want: []keyWant{{hash: a}},
	}} {
		before := snapshot(tc.from, a, b, c, d)
		got, err := tc.from.Apply(tc.changes)
		if after := snapshot(tc.from, a, b, c, d); after != before {
			t.Errorf("%s: Apply changed the table it was called on:\n%s\nwas\n%s", tc.name, after, before)
		}
		if tc.err != nil {
			var be *keytable.BuildError
			if got != nil || !errors.As(err, &be) {
				t.Errorf("%s: Apply = %v, %v; want nil, a *BuildError", tc.name, got, err)
				continue
			}
			if len(be.Problems) != len(tc.err) {
				t.Errorf("%s: Apply error has %d problems, want %d:\n%v", tc.name, len(be.Problems), len(tc.err), err)
				continue
			}
			for i, w := range tc.err {
				p := be.Problems[i]
				if p.Kind != w.kind || p.Index != w.index || p.Other != w.other {
					t.Errorf("%s: problem %d = %+v, want kind %d, index %d, other %d", tc.name, i, p, w.kind, w.index, w.other)
				}
				for _, s := range w.says {
					if !strings.Contains(p.Error(), s) {
						t.Errorf("%s: problem %d = %q, want it to say %q", tc.name, i, p.Error(), s)
					}
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Apply: %v", tc.name, err)
			continue
		}
		if (got == tc.from) != tc.same {
			t.Errorf("%s: Apply returned the table it was called on: %v, want %v", tc.name, got == tc.from, tc.same)
		}
		for _, w := range tc.want {
			h := w.hash
			if h == nil {
				h = w.rec
			}
			r, ok := got.Lookup([32]byte(h.Sha256))
			switch {
			case w.rec == nil && ok:
				t.Errorf("%s: Lookup(%s) = %+v, true; want false", tc.name, h.KeyId, r)
			case w.rec != nil && (!ok || r != at(w.rec, w.rev)):
				t.Errorf("%s: Lookup(%s) = %+v, %v; want %+v, true", tc.name, h.KeyId, r, ok, at(w.rec, w.rev))
			}
		}
		if got.Len() != tc.len || got.OverlayLen() != tc.overlay {
			t.Errorf("%s: Len(), OverlayLen() = %d, %d; want %d, %d", tc.name, got.Len(), got.OverlayLen(), tc.len, tc.overlay)
		}
	}

	// Check sees what Lookup sees, in either layer.
	tbl := apply(t, over, keytable.Change{Record: d, Rev: 1})
	now := fixtureNow.UnixNano()
	for _, tc := range []struct {
		name string
		key  string
		want keytable.Record
		err  error
	}{
		{"base key", aKey, at(a, 0), nil},
		{"revoked in the overlay", bKey, at(bRevoked, 5), keytable.ErrRevoked},
		{"new in the overlay", dKey, at(d, 1), nil},
	} {
		if r, err := tbl.Check(tc.key, now); r != tc.want || err != tc.err {
			t.Errorf("%s: Check = %+v, %v; want %+v, %v", tc.name, r, err, tc.want, tc.err)
		}
	}
}

// snapshot describes what tbl holds of the keys of records.
func snapshot(tbl *keytable.Table, records ...*configv1.KeyRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Len %d, overlay %d", tbl.Len(), tbl.OverlayLen())
	for _, r := range records {
		got, ok := tbl.Lookup([32]byte(r.Sha256))
		fmt.Fprintf(&b, "\n%s: %+v %v", r.KeyId, got, ok)
	}
	return b.String()
}

// TestApplyModel applies random changes, and compacts at random, and after
// every step compares the table with a map that does the same naively. The
// revisions are drawn from a narrow range, so that many changes are older
// than, or as old as, the key they would replace.
func TestApplyModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			testApplyModel(t, seed)
		})
	}
}

func testApplyModel(t *testing.T, seed uint64) {
	const (
		keys  = 3000 // keys that may be in the table
		built = 2000 // keys the first table holds
		steps = 300
	)
	rng := rand.New(rand.NewPCG(seed, 0x6d6f64656c))
	hashes := make([][32]byte, keys)
	for i := range hashes {
		for j := range hashes[i] {
			hashes[i][j] = byte(rng.Uint32())
		}
	}
	if seed == 0 {
		// Keys that share a bucket in every layer, to test the search for
		// where an overlay key goes in the base.
		for i := range 20 {
			hashes[i] = [32]byte{31: byte(i)}
		}
	}
	plans := []string{"free", "gold", "enterprise", strings.Repeat("long-plan-", 6)}
	scopes := [][]string{nil, {"a:read"}, {"a:read", "b:write"}, {"orders:admin", "x"}}
	record := func(i int) *configv1.KeyRecord {
		r := &configv1.KeyRecord{
			Sha256: hashes[i][:], KeyId: fmt.Sprintf("key_%016d", i), AppId: fmt.Sprintf("app_%d", rng.IntN(500)),
			TenantId: fmt.Sprintf("tnt_%d", rng.IntN(50)), Plan: plans[rng.IntN(len(plans))], Scopes: scopes[rng.IntN(len(scopes))],
			Priority: configv1.Priority(rng.IntN(5)), Status: configv1.KeyStatus_KEY_STATUS_ACTIVE,
		}
		if rng.IntN(4) == 0 {
			r.Status = configv1.KeyStatus_KEY_STATUS_REVOKED
		}
		if rng.IntN(3) == 0 {
			r.NotAfter = timestamppb.New(fixtureNow.Add(time.Duration(rng.IntN(1000)-500) * time.Hour))
		}
		if rng.IntN(5) == 0 {
			r.SuccessorKeyId = fmt.Sprintf("key_%016d", rng.IntN(keys))
		}
		return r
	}

	model := make(map[[32]byte]keytable.Record, keys)
	var records []*configv1.KeyRecord
	for i := range built {
		r := record(i)
		records = append(records, r)
		model[hashes[i]] = want(r)
	}
	tbl := build(t, records...)
	// check compares tbl with model, but for the keys in undo, which
	// hold what the model held before the step. With every > 1 it looks
	// up only the keys in undo and every every-th other key, to save time
	// under the race detector.
	check := func(step int, what string, tbl *keytable.Table, undo map[[32]byte]*keytable.Record, every int) {
		t.Helper()
		n := len(model)
		for h, r := range undo {
			switch _, ok := model[h]; {
			case ok && r == nil:
				n--
			case !ok && r != nil:
				n++
			}
		}
		for i, h := range hashes {
			w, wok := model[h]
			r, undone := undo[h]
			if !undone && i%every != step%every {
				continue
			}
			if undone {
				w, wok = keytable.Record{}, r != nil
				if r != nil {
					w = *r
				}
			}
			if got, ok := tbl.Lookup(h); ok != wok || got != w {
				t.Fatalf("step %d, %s: Lookup(key %d) = %+v, %v; want %+v, %v", step, what, i, got, ok, w, wok)
			}
		}
		if tbl.Len() != n {
			t.Fatalf("step %d, %s: Len() = %d, want %d", step, what, tbl.Len(), n)
		}
	}
	check(0, "Build", tbl, nil, 1)

	var compactions, refusals, skipped int
	for step := 1; step <= steps; step++ {
		prev := tbl
		undo := make(map[[32]byte]*keytable.Record)
		if rng.IntN(12) == 0 {
			tbl = tbl.Compact()
			compactions++
			if tbl.OverlayLen() != 0 {
				t.Fatalf("step %d: OverlayLen() after Compact = %d, want 0", step, tbl.OverlayLen())
			}
			check(step, "Compact", tbl, nil, 1)
			check(step, "the table Compact was called on", prev, nil, 7)
			continue
		}
		changes := make([]keytable.Change, rng.IntN(8)+1)
		invalid := rng.IntN(20) == 0
		for j := range changes {
			// Mostly keys of the first table, some new ones.
			i := rng.IntN(built + built/4)
			if i >= built {
				i = rng.IntN(keys)
			}
			changes[j] = keytable.Change{Record: record(i), Rev: uint64(rng.IntN(12))}
		}
		if invalid {
			changes[rng.IntN(len(changes))].Record.Plan = "bad plan"
		}
		next, err := tbl.Apply(changes)
		if invalid {
			if next != nil || err == nil {
				t.Fatalf("step %d: Apply(an invalid record) = %v, %v; want nil, an error", step, next, err)
			}
			refusals++
			check(step, "the table a refused Apply was called on", tbl, nil, 7)
			continue
		}
		if err != nil {
			t.Fatalf("step %d: Apply: %v", step, err)
		}
		for _, c := range changes {
			h := [32]byte(c.Record.Sha256)
			cur, ok := model[h]
			if ok && cur.Rev >= c.Rev {
				skipped++
				continue
			}
			if _, saved := undo[h]; !saved {
				undo[h] = nil
				if ok {
					undo[h] = &cur
				}
			}
			model[h] = at(c.Record, c.Rev)
		}
		tbl = next
		check(step, "Apply", tbl, nil, 1)
		check(step, "the table Apply was called on", prev, undo, 7)
	}
	tbl = tbl.Compact()
	check(steps+1, "Compact", tbl, nil, 1)
	if compactions < 10 || refusals == 0 || skipped < 50 {
		t.Errorf("%d compactions, %d refused calls and %d changes skipped; the test needs more of each", compactions, refusals, skipped)
	}
}

func TestCompact(t *testing.T) {
	t.Parallel()
	_, a := newKey(t, "key-a")
	base := build(t, a)
	if got := base.Compact(); got != base {
		t.Errorf("Compact() of a table without overlay = %p, want the table itself, %p", got, base)
	}
	var nilTable *keytable.Table
	if got := nilTable.Compact(); got != nil || got.Len() != 0 {
		t.Errorf("Compact() of a nil table = %p, want nil", got)
	}
	// From nothing: a table of nothing but overlay.
	_, b := newKey(t, "key-b")
	tbl := apply(t, nilTable, keytable.Change{Record: a, Rev: 1}, keytable.Change{Record: b, Rev: 2}).Compact()
	if tbl.Len() != 2 || tbl.OverlayLen() != 0 {
		t.Errorf("Len(), OverlayLen() = %d, %d; want 2, 0", tbl.Len(), tbl.OverlayLen())
	}
	for _, w := range []keytable.Record{at(a, 1), at(b, 2)} {
		if r, ok := tbl.Lookup([32]byte(map[string][]byte{"key-a": a.Sha256, "key-b": b.Sha256}[w.KeyID])); !ok || r != w {
			t.Errorf("Lookup(%s) = %+v, %v; want %+v, true", w.KeyID, r, ok, w)
		}
	}
}

// TestShouldCompact checks the threshold on a small table: 4096 keys of
// overlay are fine, one more is not.
func TestShouldCompact(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 4097, 5)
	changes := make([]keytable.Change, len(f.records))
	for i, r := range f.records {
		changes[i] = keytable.Change{Record: r, Rev: 1}
	}
	tbl := build(t, f.records[:100]...)
	tbl = apply(t, tbl, changes[:4096]...)
	if tbl.OverlayLen() != 4096 || tbl.ShouldCompact() {
		t.Errorf("OverlayLen(), ShouldCompact() = %d, %v; want 4096, false", tbl.OverlayLen(), tbl.ShouldCompact())
	}
	tbl = apply(t, tbl, changes[4096])
	if !tbl.ShouldCompact() {
		t.Errorf("ShouldCompact() with an overlay of %d = false, want true", tbl.OverlayLen())
	}
	if tbl = tbl.Compact(); tbl.ShouldCompact() || tbl.Len() != 4097 {
		t.Errorf("after Compact: ShouldCompact(), Len() = %v, %d; want false, 4097", tbl.ShouldCompact(), tbl.Len())
	}
	var nilTable *keytable.Table
	if nilTable.ShouldCompact() || nilTable.OverlayLen() != 0 {
		t.Errorf("nil table: ShouldCompact(), OverlayLen() = %v, %d; want false, 0", nilTable.ShouldCompact(), nilTable.OverlayLen())
	}
}

// TestApplyAllocs checks that the overlay costs Check no allocation.
func TestApplyAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters change allocation counts")
	}
	f := newFixture(t, 1000, 2)
	tbl := build(t, f.records[:900]...)
	now := fixtureNow.UnixNano()
	var changes []keytable.Change
	for _, r := range f.records[800:] {
		changes = append(changes, keytable.Change{Record: with(r, revoke), Rev: 1})
	}
	tbl = apply(t, tbl, changes...)
	unknown, _ := newKey(t, "unknown")
	for _, tc := range []struct {
		name, key string
		err       error
	}{
		{"base", f.key(0), nil}, {"overlay over base", f.key(850), keytable.ErrRevoked},
		{"overlay only", f.key(950), keytable.ErrRevoked}, {"unknown", unknown, keytable.ErrUnknown},
	} {
		if _, err := tbl.Check(tc.key, now); !matches(err, tc.err) && !(tc.err == nil && err != nil && !errors.Is(err, keytable.ErrUnknown)) {
			t.Fatalf("%s: Check = %v, want %v", tc.name, err, tc.err)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = tbl.Check(tc.key, now) }); n != 0 {
			t.Errorf("Check(%s key): %v allocations, want 0", tc.name, n)
		}
	}
}
