package ratelimit_test

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/ratelimit"
)

// A limit that always admits, so that benchmarks measure the admitting
// path (the compare-and-swap) and not refusals.
var (
	open       = &ratelimit.Limit{ID: "plan/gold/default", Rate: 1e9, Burst: 1e12}
	openGlobal = &ratelimit.Limit{ID: "plan/gold/app", Rate: 1e9, Burst: 1e12, Global: true}
)

var sink time.Duration

// BenchmarkClock is the cost of the clock read that Take makes, for
// comparison.
func BenchmarkClock(b *testing.B) {
	start := time.Now()
	for b.Loop() {
		sink += time.Since(start)
	}
}

func BenchmarkTake(b *testing.B) {
	for _, bc := range []struct {
		name string
		l    *ratelimit.Limit
		now  func() time.Time
	}{
		{"local", open, nil},
		{"global", openGlobal, nil},
		{"local/fake-clock", open, newClock().Now},
		{"global/fake-clock", openGlobal, newClock().Now},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tbl := ratelimit.NewTable(ratelimit.Options{Now: bc.now})
			defer tbl.Close()
			key := "app_2fQ8xkT3mP9wLr"
			tbl.Take(bc.l, key)
			b.ReportAllocs()
			for b.Loop() {
				tbl.Take(bc.l, key)
			}
		})
	}
}

// BenchmarkTakeAt is the request path's take: the gateway reads the clock
// once per request and passes it to every bucket.
func BenchmarkTakeAt(b *testing.B) {
	for _, bc := range []struct {
		name string
		l    *ratelimit.Limit
	}{{"local", open}, {"global", openGlobal}} {
		b.Run(bc.name, func(b *testing.B) {
			tbl := ratelimit.NewTable(ratelimit.Options{})
			defer tbl.Close()
			key := "app_2fQ8xkT3mP9wLr"
			now := time.Now()
			tbl.TakeAt(bc.l, key, now)
			b.ReportAllocs()
			for b.Loop() {
				tbl.TakeAt(bc.l, key, now)
			}
		})
	}
}

var cas atomic.Int64

// BenchmarkCAS is the cost of one uncontended compare-and-swap, which
// every admitted take makes (a global one adds an atomic add): the floor
// under a take on this machine, for comparison.
func BenchmarkCAS(b *testing.B) {
	for b.Loop() {
		v := cas.Load()
		cas.CompareAndSwap(v, v+1)
	}
}

// keys returns n distinct keys shaped like API key ids.
func keys(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = prefix + "key_" + strconv.FormatUint(uint64(i)*0x9e3779b97f4a7c15, 36)
	}
	return ks
}

func BenchmarkTake100kKeys(b *testing.B) {
	tbl := ratelimit.NewTable(ratelimit.Options{})
	defer tbl.Close()
	ks := keys("", 100_000)
	for _, k := range ks {
		tbl.Take(openGlobal, k)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		tbl.Take(openGlobal, ks[rng.IntN(len(ks))])
	}
}

func BenchmarkTakeParallel(b *testing.B) {
	b.Run("distinct-keys", func(b *testing.B) {
		tbl := ratelimit.NewTable(ratelimit.Options{})
		defer tbl.Close()
		var id atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			key := "app_" + strconv.FormatInt(id.Add(1), 10)
			for pb.Next() {
				tbl.Take(openGlobal, key)
			}
		})
	})
	b.Run("distinct-1k-keys-each", func(b *testing.B) {
		tbl := ratelimit.NewTable(ratelimit.Options{})
		defer tbl.Close()
		var id atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ks := keys(strconv.FormatInt(id.Add(1), 10)+"/", 1000)
			for _, k := range ks {
				tbl.Take(openGlobal, k)
			}
			i := 0
			for pb.Next() {
				tbl.Take(openGlobal, ks[i%len(ks)])
				i++
			}
		})
	})
	b.Run("shared-key", func(b *testing.B) {
		tbl := ratelimit.NewTable(ratelimit.Options{})
		defer tbl.Close()
		tbl.Take(openGlobal, "app_shared")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tbl.Take(openGlobal, "app_shared")
			}
		})
	})
}
