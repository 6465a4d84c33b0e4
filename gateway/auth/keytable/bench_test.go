package keytable_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/apikey"
	"github.com/portico-gw/portico/gateway/auth/keytable"
)

var (
	sinkRecord keytable.Record
	sinkErr    error
	sinkOK     bool
)

// pack returns keys back to back in one string, and their number.
func pack(keys []string) (string, int) { return strings.Join(keys, ""), len(keys) }

// cycle walks the keys packed in s, one per call.
type cycle struct {
	s    string
	n, i int
}

func (c *cycle) next() string {
	k := c.s[c.i*apikey.Len : (c.i+1)*apikey.Len]
	if c.i++; c.i == c.n {
		c.i = 0
	}
	return k
}

// BenchmarkCheck checks keys against a table of 100,000. Valid keys are
// taken in a random order, all 95,000 of them, so that most lookups miss the
// CPU caches as they would under real traffic; "same-key" is the warm case.
func BenchmarkCheck(b *testing.B) {
	const n = 100_000
	f := newFixture(b, n, 7)
	tbl := build(b, f.records...)
	now := fixtureNow.UnixNano()
	rng := rand.New(rand.NewPCG(7, 7))
	var valid, badSum []string
	var validAt []int // the positions in f of valid
	for _, i := range rng.Perm(n) {
		if _, err := tbl.Check(f.key(i), now); err == nil {
			valid = append(valid, f.key(i))
			validAt = append(validAt, i)
			badSum = append(badSum, f.key(i)[:40]+"000000")
		}
	}
	// The same keys with an overlay as large as ShouldCompact lets it grow
	// on a table this size: 4,096 of the valid keys at revision 1.
	changes := make([]keytable.Change, 4096)
	for j := range changes {
		changes[j] = keytable.Change{Record: f.records[validAt[j]], Rev: 1}
	}
	over := apply(b, tbl, changes...)
	var unknown []string
	src := rand.NewChaCha8([32]byte{'u'})
	for range 4096 {
		k, err := apikey.Generate(apikey.Live, src)
		if err != nil {
			b.Fatal(err)
		}
		unknown = append(unknown, k)
	}
	run := func(name string, tbl *keytable.Table, keys []string, want error) {
		b.Run(name, func(b *testing.B) {
			s, n := pack(keys)
			c := cycle{s: s, n: n}
			b.ReportAllocs()
			for b.Loop() {
				sinkRecord, sinkErr = tbl.Check(c.next(), now)
			}
			if !matches(sinkErr, want) {
				b.Fatalf("Check = %v, want %v", sinkErr, want)
			}
		})
	}
	run("valid", tbl, valid, nil)
	run("valid/same-key", tbl, valid[:1], nil)
	run("unknown", tbl, unknown, keytable.ErrUnknown)
	run("malformed/checksum", tbl, badSum, keytable.ErrMalformed)
	run("overlay/valid-in-base", over, valid[len(changes):], nil)
	run("overlay/valid-in-overlay", over, valid[:len(changes)], nil)
	run("overlay/unknown", over, unknown, keytable.ErrUnknown)
	b.Run("malformed/length", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkRecord, sinkErr = tbl.Check("ak_live_tooShort", now)
		}
	})
	// What the authenticator does: the fast lane's table, then the
	// snapshot's, with one parse and one hash. With a control plane every
	// key is on the lane; with -config every key is in the snapshot.
	first := func(name string, first, second *keytable.Table, keys []string, want error) {
		b.Run(name, func(b *testing.B) {
			s, n := pack(keys)
			c := cycle{s: s, n: n}
			b.ReportAllocs()
			for b.Loop() {
				sinkRecord, sinkErr = keytable.CheckFirst(first, second, c.next(), now)
			}
			if !matches(sinkErr, want) {
				b.Fatalf("CheckFirst = %v, want %v", sinkErr, want)
			}
		})
	}
	first("first/lane-only", tbl, nil, valid, nil)
	first("first/snapshot-only", nil, tbl, valid, nil)
	first("first/unknown-in-both", over, tbl, unknown, keytable.ErrUnknown)
	b.Run("valid/parallel", func(b *testing.B) {
		s, n := pack(valid)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			c := cycle{s: s, n: n, i: rand.IntN(n)}
			for pb.Next() {
				if _, err := tbl.Check(c.next(), now); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func matches(err, want error) bool {
	if want == nil {
		return err == nil
	}
	return errors.Is(err, want)
}

// BenchmarkLookup is the table's share of Check: the hash is given.
func BenchmarkLookup(b *testing.B) {
	const n = 100_000
	f := newFixture(b, n, 7)
	tbl := build(b, f.records...)
	hashes := make([][32]byte, n)
	for i, j := range rand.New(rand.NewPCG(7, 7)).Perm(n) {
		hashes[i] = [32]byte(f.records[j].Sha256)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		sinkRecord, sinkOK = tbl.Lookup(hashes[i])
		if i++; i == n {
			i = 0
		}
	}
}

func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			f := newFixture(b, n, 11)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := keytable.Build(f.records); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApply applies one change, a revocation, to a table whose overlay
// holds 1,000 keys, half of them new and half changes of keys of the base:
// the cost of a change between compactions; and to one whose overlay is as
// large as ShouldCompact lets it grow.
func BenchmarkApply(b *testing.B) {
	for _, tc := range []struct{ n, overlay int }{{100_000, 1000}, {1_000_000, 1000}, {1_000_000, 4096}} {
		b.Run(fmt.Sprintf("keys=%d/overlay=%d", tc.n, tc.overlay), func(b *testing.B) {
			n := tc.n
			f := newFixture(b, n+tc.overlay/2, 17)
			tbl := withOverlay(b, f, n, tc.overlay/2, tc.overlay/2)
			change := []keytable.Change{{Record: with(f.records[n/2+1], revoke), Rev: 2}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tbl.Apply(change); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCompact merges an overlay into a base of a million keys: one of
// 4,096 keys, as many as ShouldCompact allows, half new keys and half
// changes of keys of the base; and one of half a million changes, whose
// strings make up more than half of the arena, so that Compact rebuilds it.
func BenchmarkCompact(b *testing.B) {
	const n = 1_000_000
	f := newFixture(b, n+2048, 19)
	for _, tc := range []struct {
		name           string
		changed, added int
	}{
		{"overlay=4096", 2048, 2048},
		{"overlay=500000/arena-rebuilt", 500_000, 0},
	} {
		b.Run(fmt.Sprintf("keys=%d/%s", n, tc.name), func(b *testing.B) {
			tbl := withOverlay(b, f, n, tc.changed, tc.added)
			b.ReportAllocs()
			for b.Loop() {
				sinkTable = tbl.Compact()
			}
			if sinkTable.Len() != tbl.Len() || sinkTable.OverlayLen() != 0 {
				b.Fatalf("Compact: Len(), OverlayLen() = %d, %d; want %d, 0", sinkTable.Len(), sinkTable.OverlayLen(), tbl.Len())
			}
		})
	}
}

var sinkTable *keytable.Table

// withOverlay builds a table of f's first n records, then applies, at
// revision 1, changed of them, revoked, and added records of f after the n
// as new keys.
func withOverlay(b *testing.B, f *fixture, n, changed, added int) *keytable.Table {
	tbl := build(b, f.records[:n]...)
	var changes []keytable.Change
	for i := range changed {
		changes = append(changes, keytable.Change{Record: with(f.records[i*(n/changed)], revoke), Rev: 1})
	}
	for _, r := range f.records[n : n+added] {
		changes = append(changes, keytable.Change{Record: r, Rev: 1})
	}
	tbl = apply(b, tbl, changes...)
	if tbl.OverlayLen() != changed+added {
		b.Fatalf("OverlayLen() = %d, want %d", tbl.OverlayLen(), changed+added)
	}
	return tbl
}

// BenchmarkHeap measures what a table costs the garbage collector. Each
// iteration is one full runtime.GC() with the table alive, a proxy for the
// marking every cycle does on the gateway's core. Reported:
//
//	B/key, MB        heap the table retains
//	gc-base-µs       a runtime.GC() with no table
//	gc-table-µs      the same with the table (ns/op, in µs)
//	gc-protos-µs     the same with the KeyRecord protos the table is built from
//	gc-map-µs        the same with a map[[32]byte]Record, the plain design
func BenchmarkHeap(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			tbl, retained, protos := buildMeasured(b, n)
			withMap := gcTimeWithMap(n)
			withTable := gcTime()
			for b.Loop() {
				runtime.GC()
			}
			runtime.KeepAlive(tbl) // and no more: base is measured without it
			base := gcTime()

			b.ReportMetric(float64(retained)/float64(n), "B/key")
			b.ReportMetric(float64(retained)/1e6, "MB")
			b.ReportMetric(us(base), "gc-base-µs")
			b.ReportMetric(us(withTable), "gc-table-µs")
			b.ReportMetric(us(protos), "gc-protos-µs")
			b.ReportMetric(us(withMap), "gc-map-µs")
		})
	}
}

// buildMeasured builds a table of a fixture of n keys and returns it, the
// heap it retains, and the collection time with the fixture's protos alive.
// The fixture is garbage once it returns.
func buildMeasured(b *testing.B, n int) (*keytable.Table, int64, time.Duration) {
	f := newFixture(b, n, 13)
	before := liveHeap()
	protos := gcTime()
	tbl := build(b, f.records...)
	after := liveHeap()
	// The fixture must stay alive until after is measured, or its protos
	// would be subtracted from the table.
	runtime.KeepAlive(f)
	return tbl, after - before, protos
}

// gcTimeWithMap returns the collection time with a map of n Records alive,
// each with strings of its own, as a plain table would hold them.
func gcTimeWithMap(n int) time.Duration {
	m := make(map[[32]byte]keytable.Record, n)
	for i := range n {
		h := [32]byte{byte(i), byte(i >> 8), byte(i >> 16)}
		m[h] = keytable.Record{KeyID: fmt.Sprint("key_", i), AppID: fmt.Sprint("app_", i/2), Plan: "gold", Scopes: "a:read b:write"}
	}
	d := gcTime()
	runtime.KeepAlive(m)
	return d
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// gcTime returns the median time of a full collection.
func gcTime() time.Duration {
	runtime.GC()
	d := make([]time.Duration, 9)
	for i := range d {
		start := time.Now()
		runtime.GC()
		d[i] = time.Since(start)
	}
	slices.Sort(d)
	return d[len(d)/2]
}
