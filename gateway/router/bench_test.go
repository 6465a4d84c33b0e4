package router_test

import (
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
