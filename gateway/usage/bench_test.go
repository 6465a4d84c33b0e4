package usage_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/usage"
)

// warmRecords are calls of 256 keys to 4 routes each, counted once in the
// open window, so that Record finds every row and histogram placed.
func warmRecords(b *testing.B, r *usage.Recorder) []*exchange.Record {
	xs := make([]*exchange.Record, 1024)
	now := time.Now()
	for i := range xs {
		xs[i] = call{
			key: fmt.Sprintf("key-%04d", i/4), app: "app-" + fmt.Sprint(i/16), tenant: "tenant", plan: "gold",
			route: fmt.Sprintf("acme.orders.v1.Orders/Method%d", i%4), product: "orders",
			status: 200, forwarded: true, took: time.Duration(i) * 10 * time.Microsecond,
		}.record(now)
	}
	for range 2 {
		for _, x := range xs {
			r.Record(x)
		}
		if err := r.CloseWindow(); err != nil { // publishes every series
			b.Fatal(err)
		}
	}
	for _, x := range xs {
		r.Record(x)
	}
	return xs
}

// BenchmarkRecord is the request path's cost of counting a call whose row
// the window has seen, on one goroutine and on all cores; "hot" is every
// core counting the same row.
func BenchmarkRecord(b *testing.B) {
	r := open(b, b.TempDir(), usage.Options{})
	xs := warmRecords(b, r)
	// cpu-ns/op is the process's CPU time per call: on a shared machine
	// it is steadier than ns/op, and under RunParallel ns/op is wall time
	// divided among the cores.
	cpu := func(b *testing.B, run func()) {
		b.ReportAllocs()
		start := cpuTime()
		run()
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
	b.Run("serial", func(b *testing.B) {
		cpu(b, func() {
			for i := range b.N {
				r.Record(xs[i&1023])
			}
		})
	})
	b.Run("parallel", func(b *testing.B) {
		cpu(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				i := rand.Int()
				for pb.Next() {
					r.Record(xs[i&1023])
					i++
				}
			})
		})
	})
	b.Run("parallel-hot", func(b *testing.B) {
		cpu(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r.Record(xs[0])
				}
			})
		})
	})
	if s := r.Stats(); s.Folded != 0 {
		b.Fatalf("Stats().Folded = %d", s.Folded)
	}
}

// BenchmarkMemoryPerKey measures what one window of 100k active keys (one
// row each, a few calls per key) costs: the window file's resident pages
// and the Go heap, per key; and the spooled window's bytes per key.
func BenchmarkMemoryPerKey(b *testing.B) {
	const keys = 100_000
	xs := make([]*exchange.Record, keys)
	now := time.Now()
	for i := range xs {
		xs[i] = call{
			key: fmt.Sprintf("key-%06d", i), app: fmt.Sprintf("app-%05d", i/4), tenant: "tenant", plan: "gold",
			route: "acme.orders.v1.Orders/Create", product: "orders", status: 200, forwarded: true,
		}.record(now)
	}
	var file, heap, spooled float64
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := open(b, b.TempDir(), usage.Options{MaxSeries: 1 << 20})
		for range 4 {
			for _, x := range xs {
				r.Record(x)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		res, err := r.ResidentBytes()
		if err != nil {
			b.Fatal(err)
		}
		if err := r.CloseWindow(); err != nil {
			b.Fatal(err)
		}
		file = float64(res) / keys
		heap = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / keys
		spooled = float64(r.Spool().Size()) / keys
		if s := r.Stats(); s.Folded != 0 || s.Series != keys {
			b.Fatalf("Stats() = %+v, want %d series, none folded", s, keys)
		}
		b.Logf("lanes %d", r.Lanes())
		r.Close()
	}
	b.ReportMetric(file, "file-B/key")
	b.ReportMetric(heap, "heap-B/key")
	b.ReportMetric(file+heap, "B/key")
	b.ReportMetric(spooled, "spooled-B/key")
}
