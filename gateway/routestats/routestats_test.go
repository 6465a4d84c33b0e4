package routestats_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/routestats"
)

func TestObserveAndQuantiles(t *testing.T) {
	t.Parallel()
	var r routestats.Route
	for i := range 1000 {
		d := 3 * time.Millisecond // bucket (2ms, 4ms]
		if i%100 == 0 {
			d = 300 * time.Millisecond // 1 in 100: (256ms, 512ms]
		}
		r.Observe(i%50 == 0, d)
	}
	c := r.Counts()
	if c.Requests != 1000 || c.Errors != 20 {
		t.Errorf("requests %d errors %d, want 1000 and 20", c.Requests, c.Errors)
	}
	for q, want := range map[float64]time.Duration{0.5: 4 * time.Millisecond, 0.98: 4 * time.Millisecond, 0.995: 512 * time.Millisecond} {
		if got := c.Quantile(q); got != want {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	r.Observe(false, time.Minute)
	if got := r.Counts().Quantile(1); got != 2*routestats.Bounds[len(routestats.Bounds)-1] {
		t.Errorf("Quantile(1) with a minute-long call = %v", got)
	}
	if (routestats.Counts{}).Quantile(0.99) != 0 {
		t.Error("Quantile of nothing is not 0")
	}
	d := r.Counts().Sub(c)
	if d.Requests != 1 || d.Errors != 0 || d.Buckets[routestats.NumBuckets-1] != 1 {
		t.Errorf("Sub = %+v", d)
	}
	if s := c.Add(d); s != r.Counts() {
		t.Errorf("Add = %+v, want %+v", s, r.Counts())
	}
}

func TestObserveConcurrently(t *testing.T) {
	t.Parallel()
	var r routestats.Route
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				r.Observe(g == 0, time.Duration(i)*time.Microsecond)
			}
		}()
	}
	wg.Wait()
	if c := r.Counts(); c.Requests != 8000 || c.Errors != 1000 {
		t.Errorf("requests %d errors %d, want 8000 and 1000", c.Requests, c.Errors)
	}
}

func TestRegistryKeepsCountersByID(t *testing.T) {
	t.Parallel()
	var g routestats.Registry
	first := g.Routes([]string{"a", "b"})
	first[0].Observe(false, time.Millisecond)
	second := g.Routes([]string{"b", "a", "c"})
	if second[1] != first[0] || second[0] != first[1] {
		t.Error("a route's counters changed with a new snapshot that keeps its id")
	}
	g.Routes([]string{"c"})
	seen := map[string]uint64{}
	g.Each(func(id string, c routestats.Counts) { seen[id] = c.Requests })
	if len(seen) != 1 || seen["c"] != 0 {
		t.Errorf("Each = %v, want only c: removed routes are forgotten", seen)
	}
	if again := g.Routes([]string{"a"}); again[0] == first[0] {
		t.Error("a route removed and added again kept its old counters")
	}
}

func BenchmarkObserve(b *testing.B) {
	var r routestats.Route
	b.ReportAllocs()
	var seed atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine's calls take different times, as real ones do.
		d := time.Duration(seed.Add(7919))
		for pb.Next() {
			d += 977
			r.Observe(false, d%(50*time.Millisecond))
		}
	})
}

// TestBucketsFollowBounds: a call lands in the first bucket whose bound it
// does not exceed, at and around every bound.
func TestBucketsFollowBounds(t *testing.T) {
	t.Parallel()
	want := func(d time.Duration) int {
		for b, bound := range routestats.Bounds {
			if d <= bound {
				return b
			}
		}
		return routestats.NumBuckets - 1
	}
	ds := []time.Duration{0, 1, time.Hour}
	for _, bound := range routestats.Bounds {
		ds = append(ds, bound-1, bound, bound+1)
	}
	for _, d := range ds {
		var r routestats.Route
		r.Observe(false, d)
		if c := r.Counts(); c.Buckets[want(d)] != 1 {
			t.Errorf("Observe(%v) counted in %v, want bucket %d", d, c.Buckets, want(d))
		}
	}
}

// TestRegistryMadeOnDemand: Route makes a route's counters when first
// asked and returns the same ones after; Retain forgets those of ids that
// left the snapshot and keeps the others.
func TestRegistryMadeOnDemand(t *testing.T) {
	t.Parallel()
	var g routestats.Registry
	g.Retain([]string{"a"}) // nothing to forget
	g.Route("a").Observe(true, time.Millisecond)
	g.Route("b").Observe(false, time.Millisecond)
	if a := g.Route("a").Counts(); a.Requests != 1 || a.Errors != 1 {
		t.Errorf("a = %+v, want the call counted before", a)
	}
	g.Retain([]string{"a", "c"})
	got := map[string]uint64{}
	g.Each(func(id string, c routestats.Counts) { got[id] = c.Requests })
	if len(got) != 1 || got["a"] != 1 {
		t.Errorf("after Retain(a, c): %v, want only a, with its call", got)
	}
}
