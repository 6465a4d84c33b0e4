package router_test

import (
	"runtime"
	"runtime/metrics"
	"slices"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/router"
)

func BenchmarkNew(b *testing.B) {
	routes := benchRouteSet()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := router.New(routes); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(routes)), "routes")
}

// BenchmarkMatch matches a mix of hits and misses against 5,000 routes, then each
// kind of request on its own.
func BenchmarkMatch(b *testing.B) {
	tbl := mustNew(b, benchRouteSet())
	all := benchRequests(4096)
	byKind := map[string][]router.Request{}
	var kinds []string
	var mix []router.Request
	for _, r := range all {
		if byKind[r.kind] == nil {
			kinds = append(kinds, r.kind)
		}
		byKind[r.kind] = append(byKind[r.kind], r.req)
		mix = append(mix, r.req)
	}
	slices.Sort(kinds)
	run := func(name string, reqs []router.Request) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var ps router.Params
			i := 0
			for b.Loop() {
				tbl.Match(reqs[i%len(reqs)], &ps)
				i++
			}
		})
	}
	run("mix", mix)
	for _, k := range kinds {
		run(k, byKind[k])
	}
}

func BenchmarkMatchParallel(b *testing.B) {
	tbl := mustNew(b, benchRouteSet())
	reqs := benchRequests(4096)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ps router.Params
		i := 0
		for pb.Next() {
			tbl.Match(reqs[i%len(reqs)].req, &ps)
			i++
		}
	})
}

// BenchmarkMatchLatency times every Match call of the mix on its own and reports
// the median and 99th percentile. The times include reading the clock twice, which
// the clock-ns metric estimates.
func BenchmarkMatchLatency(b *testing.B) {
	tbl := mustNew(b, benchRouteSet())
	reqs := benchRequests(4096)
	lat := make([]time.Duration, 0, 1<<20)
	var ps router.Params
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		tbl.Match(reqs[i%len(reqs)].req, &ps)
		d := time.Since(start)
		if len(lat) < cap(lat) {
			lat = append(lat, d)
		}
	}
	b.StopTimer()
	clock := make([]time.Duration, 10000)
	for i := range clock {
		start := time.Now()
		clock[i] = time.Since(start)
	}
	slices.Sort(lat)
	slices.Sort(clock)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
	b.ReportMetric(float64(clock[len(clock)/2]), "clock-ns")
}

// BenchmarkTableHeap reports what a compiled 5,000-route table costs the garbage
// collector once New has returned: the heap it keeps (retained-B, with the input
// routes excluded), the objects it keeps, the part of it the collector must scan
// (scan-B, the runtime's /gc/scan/heap metric), and gc-ns, how much longer a forced
// collection takes with the table alive than without it (best of several each).
// ns/op is the time of New alone. Run it with -cpu 1 to see the cost on one core,
// as the gateway is measured.
func BenchmarkTableHeap(b *testing.B) {
	routes := benchRouteSet()
	var retained, objects, scan, gcCost []float64
	for b.Loop() {
		r, o, s, g := tableHeap(b, routes)
		retained, objects, scan, gcCost = append(retained, r), append(objects, o), append(scan, s), append(gcCost, g)
	}
	b.ReportMetric(median(retained), "retained-B")
	b.ReportMetric(median(objects), "objects")
	b.ReportMetric(median(scan), "scan-B")
	b.ReportMetric(median(gcCost), "gc-ns")
}

// tableHeap compiles routes once and measures the table as BenchmarkTableHeap
// describes.
func tableHeap(b *testing.B, routes []router.Route[string]) (retained, objects, scan, gcCost float64) {
	b.StopTimer()
	defer b.StartTimer()
	without := gcTime()
	before := heapStats()
	b.StartTimer()
	tbl, err := router.New(routes)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	after := heapStats()
	with := gcTime()
	runtime.KeepAlive(tbl)
	runtime.KeepAlive(routes)
	return after.heap - before.heap, after.objects - before.objects, after.scan - before.scan, with - without
}

type heapSample struct{ heap, objects, scan float64 }

// heapStats collects garbage and reports the live heap, its objects, and its
// scannable bytes as the collection just found them.
func heapStats() heapSample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}}
	metrics.Read(m)
	return heapSample{float64(ms.HeapAlloc), float64(ms.HeapObjects), float64(m[0].Value.Uint64())}
}

// gcTime returns the shortest of several forced collections, in nanoseconds.
func gcTime() float64 {
	best := time.Duration(1<<63 - 1)
	for range 7 {
		start := time.Now()
		runtime.GC()
		best = min(best, time.Since(start))
	}
	return float64(best)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}
