package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/portico-gw/portico/control/store"
)

// entry is a fast-lane entry whose data names its identity and rev, so a
// test can tell which publish an entry came from.
func entry(kind, id string, rev uint64) store.FastLaneEntry {
	return store.FastLaneEntry{Kind: kind, ID: id, Rev: rev, Data: []byte(fmt.Sprintf("%s/%s@%d", kind, id, rev))}
}

// publish publishes a batch that must be applied as version want.
func publish(t *testing.T, s *store.Store, source string, from, to uint64, want uint64, entries ...store.FastLaneEntry) {
	t.Helper()
	v, seq, err := s.PublishFastLane(ctx(t), source, from, to, entries)
	if err != nil || v != want || seq != to {
		t.Fatalf("PublishFastLane(%s, (%d, %d]) = %d, %d, %v; want %d, %d", source, from, to, v, seq, err, want, to)
	}
}

// since reads FastLaneSince(after), which must be at version want, and
// returns its entries as kind/id@rev v<version>.
func since(t *testing.T, s *store.Store, after, want uint64) []string {
	t.Helper()
	entries, v, err := s.FastLaneSince(ctx(t), after)
	if err != nil || v != want {
		t.Fatalf("FastLaneSince(%d) at version %d, %v; want version %d", after, v, err, want)
	}
	out := []string{}
	for _, e := range entries {
		out = append(out, fmt.Sprintf("%s v%d", e.Data, e.Version))
		if wantData := fmt.Sprintf("%s/%s@%d", e.Kind, e.ID, e.Rev); string(e.Data) != wantData {
			t.Errorf("FastLaneSince(%d): entry %s %s rev %d holds %q, want %q", after, e.Kind, e.ID, e.Rev, e.Data, wantData)
		}
	}
	return out
}

func equal(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

var epochPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

func testFastLane(t *testing.T, o Opener) {
	s := open(t, o)
	epoch, v, err := s.FastLaneInfo(ctx(t))
	if err != nil || !epochPattern.MatchString(epoch) || v != 0 {
		t.Fatalf("FastLaneInfo of an empty store = %q, %d, %v; want 32 hex digits, 0", epoch, v, err)
	}
	if got := since(t, s, 0, 0); len(got) != 0 {
		t.Errorf("FastLaneSince(0) of an empty store = %v", got)
	}
	if seq, err := s.FastLaneSource(ctx(t), "keys"); err != nil || seq != 0 {
		t.Errorf("FastLaneSource(keys) of an empty store = %d, %v; want 0", seq, err)
	}

	publish(t, s, "keys", 0, 3, 1, entry("key", "k2", 2), entry("key", "k1", 1), entry("deny", "d1", 3))
	publish(t, s, "keys", 3, 5, 2, entry("key", "k3", 4), entry("issuer_keys", "acme", 5))
	whole := []string{"deny/d1@3 v1", "key/k1@1 v1", "key/k2@2 v1", "issuer_keys/acme@5 v2", "key/k3@4 v2"}
	if got := since(t, s, 0, 2); !equal(got, whole) {
		t.Errorf("FastLaneSince(0) = %v, want %v", got, whole)
	}
	if got, want := since(t, s, 1, 2), whole[3:]; !equal(got, want) {
		t.Errorf("FastLaneSince(1) = %v, want %v", got, want)
	}
	if got := since(t, s, 2, 2); len(got) != 0 {
		t.Errorf("FastLaneSince(2) at version 2 = %v, want nothing", got)
	}
	if got := since(t, s, 9, 2); len(got) != 0 {
		t.Errorf("FastLaneSince(9) at version 2 = %v, want nothing", got)
	}
	if e2, v, err := s.FastLaneInfo(ctx(t)); err != nil || e2 != epoch || v != 2 {
		t.Errorf("FastLaneInfo after two publishes = %q, %d, %v; want %q, 2", e2, v, err, epoch)
	}
	if seq, err := s.FastLaneSource(ctx(t), "keys"); err != nil || seq != 5 {
		t.Errorf("FastLaneSource(keys) = %d, %v; want 5", seq, err)
	}

	// Binary data, an expiry and an empty entry survive as they are.
	expires := time.Date(2031, 4, 5, 6, 7, 8, 123456000, time.UTC)
	bin := store.FastLaneEntry{Kind: "deny", ID: "bin", Rev: 6, Data: []byte{0, 1, 0xff, 0xfe, 0}, Expires: expires}
	empty := store.FastLaneEntry{Kind: "key", ID: "empty", Rev: 7}
	publish(t, s, "keys", 5, 7, 3, bin, empty)
	entries, _, err := s.FastLaneSince(ctx(t), 2)
	if err != nil || len(entries) != 2 {
		t.Fatalf("FastLaneSince(2) = %+v, %v; want 2 entries", entries, err)
	}
	if got := entries[0]; got.ID != "bin" || !bytes.Equal(got.Data, bin.Data) || !got.Expires.Equal(expires) || got.Rev != 6 || got.Version != 3 {
		t.Errorf("binary entry = %+v, want %+v at version 3", got, bin)
	}
	if got := entries[1]; got.ID != "empty" || len(got.Data) != 0 || !got.Expires.IsZero() || got.Rev != 7 || got.Version != 3 {
		t.Errorf("empty entry = %+v, want %+v at version 3", got, empty)
	}
}

// testFastLaneRev: a publish replaces a stored entry only with a higher
// rev, and the replaced entry moves to the new version.
func testFastLaneRev(t *testing.T, o Opener) {
	s := open(t, o)
	publish(t, s, "keys", 0, 1, 1, entry("key", "k1", 5), entry("key", "k2", 5))

	older, same := entry("key", "k1", 4), entry("key", "k2", 5)
	same.Data = []byte("key/k2@5 but other data")
	publish(t, s, "keys", 1, 2, 2, older, same, entry("key", "k3", 1))
	if got, want := since(t, s, 0, 2), []string{"key/k1@5 v1", "key/k2@5 v1", "key/k3@1 v2"}; !equal(got, want) {
		t.Errorf("after an older and an equal rev: %v, want %v", got, want)
	}

	// A batch whose every entry is skipped still takes a version, with no
	// entry at it.
	publish(t, s, "keys", 2, 3, 3, entry("key", "k1", 1))
	if got := since(t, s, 2, 3); len(got) != 0 {
		t.Errorf("FastLaneSince(2) after a batch of skipped entries = %v, want nothing", got)
	}

	publish(t, s, "keys", 3, 4, 4, entry("key", "k1", 6))
	if got, want := since(t, s, 3, 4), []string{"key/k1@6 v4"}; !equal(got, want) {
		t.Errorf("FastLaneSince(3) after a newer rev = %v, want %v", got, want)
	}
	if got, want := since(t, s, 0, 4), []string{"key/k2@5 v1", "key/k3@1 v2", "key/k1@6 v4"}; !equal(got, want) {
		t.Errorf("FastLaneSince(0) after a newer rev = %v, want %v", got, want)
	}

	// Within one batch, the rule applies entry by entry, in order; each
	// entry of the batch says whether it was stored (its Version).
	batch := []store.FastLaneEntry{entry("deny", "d", 2), entry("deny", "d", 3), entry("deny", "d", 1), entry("key", "k1", 6)}
	batch[3].Version = 99 // whatever the caller left there
	publish(t, s, "keys", 4, 5, 5, batch...)
	if got, want := since(t, s, 4, 5), []string{"deny/d@3 v5"}; !equal(got, want) {
		t.Errorf("one identity three times in a batch: %v, want %v", got, want)
	}
	if v, _, err := s.PublishFastLane(ctx(t), "keys", 5, 6, batch); err != nil || v != 6 {
		t.Fatalf("PublishFastLane = %d, %v", v, err)
	}
	for i, want := range []uint64{0, 0, 0, 0} {
		if batch[i].Version != want {
			t.Errorf("a batch of stale entries: entry %d's Version = %d, want %d", i, batch[i].Version, want)
		}
	}
	fresh := []store.FastLaneEntry{entry("deny", "d", 4), entry("key", "k1", 5), entry("key", "k9", 1)}
	if v, _, err := s.PublishFastLane(ctx(t), "keys", 6, 7, fresh); err != nil || v != 7 {
		t.Fatalf("PublishFastLane = %d, %v", v, err)
	}
	for i, want := range []uint64{7, 0, 7} {
		if fresh[i].Version != want {
			t.Errorf("entry %d's Version = %d, want %d (stored at 7, or 0 if skipped)", i, fresh[i].Version, want)
		}
	}
}

// testFastLaneRetry: a batch the store already has changes nothing and
// answers the current version; one that overlaps is applied.
func testFastLaneRetry(t *testing.T, o Opener) {
	s := open(t, o)
	publish(t, s, "keys", 0, 2, 1, entry("key", "k1", 1), entry("key", "k2", 2))
	publish(t, s, "keys", 2, 3, 2, entry("key", "k3", 3))
	want := since(t, s, 0, 2)
	for _, b := range []struct{ from, to uint64 }{{2, 3}, {0, 2}, {0, 1}, {0, 3}} {
		v, seq, err := s.PublishFastLane(ctx(t), "keys", b.from, b.to, []store.FastLaneEntry{entry("key", "k1", 9), entry("key", "new", 9)})
		if err != nil || v != 2 || seq != 3 {
			t.Errorf("PublishFastLane((%d, %d]) again = %d, %d, %v; want 2, 3", b.from, b.to, v, seq, err)
		}
	}
	if got := since(t, s, 0, 2); !equal(got, want) {
		t.Errorf("after retries: %v, want %v unchanged", got, want)
	}
	if seq, err := s.FastLaneSource(ctx(t), "keys"); err != nil || seq != 3 {
		t.Errorf("FastLaneSource(keys) after retries = %d, %v; want 3", seq, err)
	}
	// A batch that starts inside what is stored and ends after it.
	publish(t, s, "keys", 2, 5, 3, entry("key", "k3", 3), entry("key", "k4", 5))
	if got, want := since(t, s, 2, 3), []string{"key/k4@5 v3"}; !equal(got, want) {
		t.Errorf("after an overlapping batch: %v, want %v", got, want)
	}
}

// testFastLaneGap: a batch after what is stored is refused with the seq
// the store has, and changes nothing.
func testFastLaneGap(t *testing.T, o Opener) {
	s := open(t, o)
	check := func(from, to, have uint64) {
		t.Helper()
		v, seq, err := s.PublishFastLane(ctx(t), "keys", from, to, []store.FastLaneEntry{entry("key", "gap", 1)})
		var gap *store.SeqGapError
		if !errors.As(err, &gap) || !errors.Is(err, store.ErrSeqGap) || gap.Source != "keys" || gap.Have != have || v != 0 || seq != 0 {
			t.Errorf("PublishFastLane((%d, %d]) with seq %d stored = %d, %d, %v; want a *SeqGapError{keys, %d}", from, to, have, v, seq, err, have)
		}
	}
	check(1, 2, 0)
	publish(t, s, "keys", 0, 2, 1, entry("key", "k1", 1))
	check(3, 5, 2)
	if got, want := since(t, s, 0, 1), []string{"key/k1@1 v1"}; !equal(got, want) {
		t.Errorf("after refused batches: %v, want %v", got, want)
	}
	if seq, err := s.FastLaneSource(ctx(t), "keys"); err != nil || seq != 2 {
		t.Errorf("FastLaneSource(keys) after a gap = %d, %v; want 2", seq, err)
	}
	publish(t, s, "keys", 2, 5, 2, entry("key", "k2", 5))
}

// testFastLaneSources: each source has its own seq; versions are shared.
func testFastLaneSources(t *testing.T, o Opener) {
	s := open(t, o)
	publish(t, s, "keys", 0, 10, 1, entry("key", "k1", 10))
	publish(t, s, "other", 0, 1, 2, entry("key", "o1", 1))
	v, seq, err := s.PublishFastLane(ctx(t), "other", 10, 11, nil)
	var gap *store.SeqGapError
	if !errors.As(err, &gap) || gap.Source != "other" || gap.Have != 1 {
		t.Errorf("other's batch (10, 11] = %d, %d, %v; want a gap at 1: keys' seq is not other's", v, seq, err)
	}
	publish(t, s, "keys", 10, 11, 3, entry("key", "k2", 11))
	publish(t, s, "other", 1, 2, 4)
	for source, want := range map[string]uint64{"keys": 11, "other": 2, "nobody": 0} {
		if seq, err := s.FastLaneSource(ctx(t), source); err != nil || seq != want {
			t.Errorf("FastLaneSource(%s) = %d, %v; want %d", source, seq, err, want)
		}
	}
	if got, want := since(t, s, 0, 4), []string{"key/k1@10 v1", "key/o1@1 v2", "key/k2@11 v3"}; !equal(got, want) {
		t.Errorf("FastLaneSince(0) = %v, want %v", got, want)
	}
}

// testFastLaneEpoch: the epoch is the database's: kept across reopening,
// different in another database.
func testFastLaneEpoch(t *testing.T, o, other Opener) {
	s, err := o(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	epoch, _, err := s.FastLaneInfo(ctx(t))
	if err != nil || !epochPattern.MatchString(epoch) {
		t.Fatalf("FastLaneInfo = %q, %v; want 32 hex digits", epoch, err)
	}
	publish(t, s, "keys", 0, 1, 1, entry("key", "k1", 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		e, v, err := open(t, o).FastLaneInfo(ctx(t))
		if err != nil || e != epoch || v != 1 {
			t.Errorf("FastLaneInfo after reopening (%d) = %q, %d, %v; want %q, 1", i, e, v, err, epoch)
		}
	}
	e, v, err := open(t, other).FastLaneInfo(ctx(t))
	if err != nil || !epochPattern.MatchString(e) || e == epoch || v != 0 {
		t.Errorf("FastLaneInfo of another database = %q, %d, %v; want another epoch than %q, version 0", e, v, err, epoch)
	}
}

func testFastLanePrune(t *testing.T, o Opener) {
	s := open(t, o)
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(e store.FastLaneEntry, expires time.Time) store.FastLaneEntry {
		e.Expires = expires
		return e
	}
	publish(t, s, "keys", 0, 1, 1,
		at(entry("deny", "past", 1), now.Add(-time.Hour)),
		at(entry("deny", "just-past", 1), now.Add(-time.Microsecond)),
		at(entry("deny", "now", 1), now),
		at(entry("deny", "future", 1), now.Add(time.Hour)),
		entry("key", "never", 1))
	if n, err := s.PruneFastLane(ctx(t), now); err != nil || n != 2 {
		t.Errorf("PruneFastLane(now) = %d, %v; want 2", n, err)
	}
	if got, want := since(t, s, 0, 1), []string{"deny/future@1 v1", "deny/now@1 v1", "key/never@1 v1"}; !equal(got, want) {
		t.Errorf("after pruning: %v, want %v", got, want)
	}
	if n, err := s.PruneFastLane(ctx(t), now); err != nil || n != 0 {
		t.Errorf("PruneFastLane(now) again = %d, %v; want 0", n, err)
	}
	if n, err := s.PruneFastLane(ctx(t), now.Add(100*365*24*time.Hour)); err != nil || n != 2 {
		t.Errorf("PruneFastLane(in a century) = %d, %v; want 2", n, err)
	}
	if got, want := since(t, s, 0, 1), []string{"key/never@1 v1"}; !equal(got, want) {
		t.Errorf("after pruning everything that expires: %v, want %v", got, want)
	}
}

func testFastLaneInvalid(t *testing.T, o Opener) {
	s := open(t, o)
	for _, b := range []struct {
		name     string
		source   string
		from, to uint64
		entries  []store.FastLaneEntry
	}{
		{"no source", "", 0, 1, nil},
		{"empty range", "keys", 1, 1, nil},
		{"reversed range", "keys", 2, 1, nil},
		{"seq above 2^63-1", "keys", 0, 1 << 63, nil},
		{"no kind", "keys", 0, 1, []store.FastLaneEntry{{ID: "k", Rev: 1}}},
		{"no id", "keys", 0, 1, []store.FastLaneEntry{{Kind: "key", Rev: 1}}},
		{"rev above 2^63-1", "keys", 0, 1, []store.FastLaneEntry{{Kind: "key", ID: "k", Rev: 1 << 63}}},
	} {
		if _, _, err := s.PublishFastLane(ctx(t), b.source, b.from, b.to, b.entries); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", b.name, err)
		}
	}
	if _, v, err := s.FastLaneInfo(ctx(t)); err != nil || v != 0 {
		t.Errorf("FastLaneInfo after invalid batches = %d, %v; want version 0", v, err)
	}
}

// testFastLaneConcurrent: producers publish their sources' batches at
// once, each through its own Store, while a reader reads. Versions are
// 1..N without gaps or duplicates, every entry is there at the version
// its publish returned, and every read is of one moment: since every
// batch changes an entry, the newest entry read is at the version read.
func testFastLaneConcurrent(t *testing.T, o Opener) {
	const producers, batches, perBatch = 4, 15, 3
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		versions = map[uint64]string{} // version → the batch that took it
	)
	stores := make([]*store.Store, producers+1)
	for i := range stores {
		stores[i] = open(t, o) // as separate control planes
	}
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			source := fmt.Sprintf("source-%d", p)
			for b := range batches {
				entries := make([]store.FastLaneEntry, perBatch)
				for i := range entries {
					entries[i] = entry(source, fmt.Sprintf("b%02d-%d", b, i), uint64(b+1))
				}
				// Every batch also replaces the source's one shared entry.
				entries = append(entries, entry(source, "shared", uint64(b+1)))
				v, seq, err := stores[p].PublishFastLane(ctx(t), source, uint64(b), uint64(b+1), entries)
				if err != nil || seq != uint64(b+1) {
					t.Errorf("%s batch %d: %d, %d, %v", source, b, v, seq, err)
					return
				}
				mu.Lock()
				if prev, ok := versions[v]; ok {
					t.Errorf("%s batch %d and %s both got version %d", source, b, prev, v)
				}
				versions[v] = fmt.Sprintf("%s batch %d", source, b)
				mu.Unlock()
			}
		}()
	}
	done, readerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			entries, v, err := stores[producers].FastLaneSince(ctx(t), 0)
			if err != nil {
				t.Error(err)
				return
			}
			var newest uint64
			for _, e := range entries {
				newest = max(newest, e.Version)
			}
			if newest != v {
				t.Errorf("FastLaneSince(0) read version %d with its newest entry at %d: not one moment", v, newest)
				return
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	wg.Wait()
	close(done)
	<-readerDone
	if t.Failed() {
		return
	}

	const n = producers * batches
	for v := uint64(1); v <= n; v++ {
		if _, ok := versions[v]; !ok {
			t.Errorf("no publish returned version %d of 1..%d", v, n)
		}
	}
	entries, v, err := stores[0].FastLaneSince(ctx(t), 0)
	if err != nil || v != n || len(entries) != producers*(batches*perBatch+1) {
		t.Fatalf("FastLaneSince(0) = %d entries at version %d, %v; want %d at version %d", len(entries), v, err, producers*(batches*perBatch+1), n)
	}
	for _, e := range entries {
		var b int
		if e.ID == "shared" {
			b = batches - 1
		} else if _, err := fmt.Sscanf(e.ID, "b%d-", &b); err != nil {
			t.Fatalf("entry %s %s: %v", e.Kind, e.ID, err)
		}
		if by, want := versions[e.Version], fmt.Sprintf("%s batch %d", e.Kind, b); by != want || e.Rev != uint64(b+1) {
			t.Errorf("entry %s %s rev %d is at version %d, which %q took; want rev %d of %s", e.Kind, e.ID, e.Rev, e.Version, by, b+1, want)
		}
	}
	for p := range producers {
		source := fmt.Sprintf("source-%d", p)
		if seq, err := stores[0].FastLaneSource(ctx(t), source); err != nil || seq != batches {
			t.Errorf("FastLaneSource(%s) = %d, %v; want %d", source, seq, err, batches)
		}
	}
}
