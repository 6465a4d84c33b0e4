package ratelimit_test

import (
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/ratelimit"
	"github.com/portico-gw/portico/testing/testclock"
)

// clock is a hand-driven clock for Options.Now.
type clock = testclock.Clock

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newClock() *clock { return testclock.New(epoch) }

// newTable returns a Table on a hand-driven clock with its evictor
// stopped: a test that wants idle buckets gone calls Sweep. The evictor's
// ticker runs on real time, and on a slow machine it would sweep in the
// middle of a test at whatever time the test's clock has been moved to.
func newTable(t testing.TB, opts ratelimit.Options) (*ratelimit.Table, *clock) {
	t.Helper()
	c := newClock()
	if opts.Now == nil {
		opts.Now = c.Now
	}
	tbl := ratelimit.NewTable(opts)
	tbl.Close()
	return tbl, c
}

// step is one Take and the Result it must give, after advancing the clock.
type step struct {
	advance time.Duration
	key     string
	want    ratelimit.Result
}

func allowed(remaining, limit int64, reset time.Duration) ratelimit.Result {
	return ratelimit.Result{Remaining: remaining, Limit: limit, Reset: reset}
}

func refused(limit int64, reset, retry time.Duration) ratelimit.Result {
	return ratelimit.Result{Limit: limit, Reset: reset, RetryAfter: retry}
}

func run(t *testing.T, tbl *ratelimit.Table, c *clock, l *ratelimit.Limit, steps []step) {
	t.Helper()
	for i, s := range steps {
		c.Add(s.advance)
		key := s.key
		if key == "" {
			key = "k"
		}
		if got := tbl.Take(l, key); got != s.want {
			t.Fatalf("step %d: Take(%q, %q) = %+v, want %+v", i, l.ID, key, got, s.want)
		}
	}
}

const ms = time.Millisecond

func TestBurstThenSteadyRate(t *testing.T) {
	t.Parallel()
	tbl, c := newTable(t, ratelimit.Options{})
	l := &ratelimit.Limit{ID: "plan/gold/default", Rate: 10, Burst: 20}
	var steps []step
	for i := range 20 {
		steps = append(steps, step{want: allowed(int64(19-i), 20, time.Duration(i+1)*100*ms)})
	}
	steps = append(steps,
		step{want: refused(20, 2*time.Second, 100*ms)},
		step{advance: 40 * ms, want: refused(20, 1960*ms, 60*ms)},
		step{advance: 60 * ms, want: allowed(0, 20, 2*time.Second)},
		step{want: refused(20, 2*time.Second, 100*ms)},
		// Another key has its own bucket.
		step{key: "other", want: allowed(19, 20, 100*ms)},
	)
	// One second later, 10 more.
	steps = append(steps, step{advance: time.Second, want: allowed(9, 20, 1100*ms)})
	for i := range 9 {
		steps = append(steps, step{want: allowed(int64(8-i), 20, time.Duration(1200+100*i)*ms)})
	}
	steps = append(steps,
		step{want: refused(20, 2*time.Second, 100*ms)},
		// Full again after Reset; a full bucket's Reset is one interval
		// after a take.
		step{advance: 10 * time.Second, want: allowed(19, 20, 100*ms)},
	)
	run(t, tbl, c, l, steps)
	if got := tbl.Len(); got != 2 {
		t.Errorf("Len() = %d, want 2", got)
	}
}

func TestFractionalRate(t *testing.T) {
	t.Parallel()
	tbl, c := newTable(t, ratelimit.Options{})
	// 3 per second: 333333333 ns per token, burst 3.
	l := &ratelimit.Limit{ID: "x", Rate: 3, Burst: 3}
	const iv = 333333333
	run(t, tbl, c, l, []step{
		{want: allowed(2, 3, iv)},
		{want: allowed(1, 3, 2*iv)},
		{want: allowed(0, 3, 3*iv)},
		{want: refused(3, 3*iv, iv)},
		{advance: iv, want: allowed(0, 3, 3*iv)},
	})
}

func TestShareBeforeSync(t *testing.T) {
	t.Parallel()
	tbl, c := newTable(t, ratelimit.Options{ExpectedNodes: 3})
	// A local limit has the full numbers on every node.
	local := &ratelimit.Limit{ID: "anonymous", Rate: 30, Burst: 20}
	var steps []step
	for i := range 20 {
		steps = append(steps, step{want: allowed(int64(19-i), 20, time.Duration(i+1)*33333333)})
	}
	// 20 tokens at 30/s take 666.666667 ms, rounded to whole ns per token.
	steps = append(steps, step{want: refused(20, 20*33333333, 33333333)})
	run(t, tbl, c, local, steps)

	// A global one gets a third: 10/s and 20/3 tokens, of which 6 whole.
	global := &ratelimit.Limit{ID: "plan/gold/default", Rate: 30, Burst: 20, Global: true}
	steps = steps[:0]
	for i := range 6 {
		steps = append(steps, step{want: allowed(int64(5-i), 6, time.Duration(i+1)*100*ms)})
	}
	// τ = 20/3 × 100 ms = 666666667 ns; the 7th token needs 700 ms.
	steps = append(steps, step{want: refused(6, 600*ms, 700*ms-666666667)})
	run(t, tbl, c, global, steps)

	// At least one token of burst.
	tiny := &ratelimit.Limit{ID: "tiny", Rate: 3, Burst: 2, Global: true}
	run(t, tbl, c, tiny, []step{
		{want: allowed(0, 1, time.Second)},
		{want: refused(1, time.Second, time.Second)},
	})
}

// collectOne returns the only report of Collect.
func collectOne(t *testing.T, tbl *ratelimit.Table) ratelimit.Report {
	t.Helper()
	rs := tbl.Collect()
	if len(rs) != 1 {
		t.Fatalf("Collect() = %d reports, want 1", len(rs))
	}
	return rs[0]
}

func TestApply(t *testing.T) {
	t.Parallel()
	l := &ratelimit.Limit{ID: "app", Rate: 10, Burst: 20, Global: true}
	tests := []struct {
		name         string
		takeBefore   int
		weight, glob float64
		steps        []step
	}{{
		name:   "weight",
		weight: 0.5, glob: math.Inf(1),
		// 5/s, burst 10: the full bucket keeps 10 of its 20 tokens.
		steps: []step{
			{want: allowed(9, 10, 200*ms)},
			{advance: 0, want: allowed(8, 10, 400*ms)},
		},
	}, {
		name:   "cap",
		weight: 0.5, glob: 8,
		// 4 tokens: half of the fleet's 8.
		steps: []step{
			{want: allowed(3, 10, 1400*ms)},
			{want: allowed(2, 10, 1600*ms)},
			{want: allowed(1, 10, 1800*ms)},
			{want: allowed(0, 10, 2000*ms)},
			{want: refused(10, 2000*ms, 200*ms)},
		},
	}, {
		name:       "cap never adds",
		takeBefore: 18,
		weight:     1, glob: 1000,
		steps: []step{
			{want: allowed(1, 20, 1900*ms)},
			{want: allowed(0, 20, 2000*ms)},
			{want: refused(20, 2000*ms, 100*ms)},
		},
	}, {
		name:   "debt",
		weight: 1, glob: -5,
		steps: []step{
			{want: refused(20, 2000*ms, 100*ms)},
			{advance: 100 * ms, want: allowed(0, 20, 2000*ms)},
		},
	}, {
		name:       "larger share refills to its burst",
		takeBefore: 15, // 5 left of 20
		weight:     1, glob: math.Inf(1),
		steps: []step{
			{advance: time.Second, want: allowed(14, 20, 600*ms)},
		},
	}, {
		name:   "zero weight",
		weight: 0, glob: 100,
		steps: []step{
			{want: refused(1, 1<<50, 1<<50)},
		},
	}, {
		name:   "NaN weight is zero",
		weight: math.NaN(), glob: 100,
		steps: []step{
			{want: refused(1, 1<<50, 1<<50)},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tbl, c := newTable(t, ratelimit.Options{})
			for range max(tt.takeBefore, 1) {
				tbl.Take(l, "k")
			}
			if tt.takeBefore == 0 {
				c.Add(10 * time.Second) // full again
			}
			r := collectOne(t, tbl)
			r.Bucket.Apply(tt.weight, tt.glob, c.Now())
			run(t, tbl, c, l, tt.steps)
		})
	}
}

func TestStaleShare(t *testing.T) {
	t.Parallel()
	const stale = 2 * time.Second
	closed := &ratelimit.Limit{ID: "closed", Rate: 10, Burst: 20, Global: true, FailClosed: true, StaleAfter: stale}
	open := &ratelimit.Limit{ID: "open", Rate: 10, Burst: 20, Global: true, StaleAfter: stale}
	local := &ratelimit.Limit{ID: "local", Rate: 10, Burst: 20, FailClosed: true, StaleAfter: stale}
	tbl, c := newTable(t, ratelimit.Options{})
	take := func(l *ratelimit.Limit, want bool) {
		t.Helper()
		if got := tbl.Take(l, "k"); got.Allowed() != want {
			t.Fatalf("at %v: Take(%q) = %+v, want Allowed %v", c.Now().Sub(epoch), l.ID, got, want)
		}
	}
	// A new bucket counts as shared when made.
	take(closed, true)
	take(open, true)
	take(local, true)
	c.Add(stale)
	take(closed, true) // exactly StaleAfter old: not yet stale
	c.Add(1)
	if got, want := tbl.Take(closed, "k"), refused(20, 100*ms-1, ratelimit.StaleRetryAfter); got != want {
		t.Fatalf("stale: Take = %+v, want %+v", got, want)
	}
	take(open, true)  // keeps its last share
	take(local, true) // has no share
	// A share revives it, and ages again.
	for _, r := range tbl.Collect() {
		r.Bucket.Apply(0.5, math.Inf(1), c.Now())
	}
	if got := tbl.Take(closed, "k"); !got.Allowed() || got.Limit != 10 {
		t.Fatalf("after Apply: Take = %+v, want allowed with Limit 10", got)
	}
	c.Add(stale + 1)
	take(closed, false)
	if got := tbl.Take(open, "k"); !got.Allowed() || got.Limit != 10 {
		t.Fatalf("stale open limit: Take = %+v, want allowed with the last share's Limit 10", got)
	}
	// The default StaleAfter.
	dflt := &ratelimit.Limit{ID: "default", Rate: 10, Burst: 20, Global: true, FailClosed: true}
	take(dflt, true)
	c.Add(ratelimit.DefaultStaleAfter)
	take(dflt, true)
	c.Add(1)
	take(dflt, false)
}

func TestCollectUnderConcurrentTake(t *testing.T) {
	t.Parallel()
	tbl, c := newTable(t, ratelimit.Options{})
	global := &ratelimit.Limit{ID: "g", Rate: 1000, Burst: 300, Global: true}
	local := &ratelimit.Limit{ID: "l", Rate: 1000, Burst: 300}
	keys := []string{"a", "b", "c", "d"}
	const workers, calls = 8, 3000

	var (
		wg      sync.WaitGroup
		allowed [4]atomic.Uint64
		stop    = make(chan struct{})
		got     = map[string]*ratelimit.Report{}
		done    = make(chan struct{})
	)
	add := func(rs []ratelimit.Report) {
		for _, r := range rs {
			if r.Limit != global || r.Bucket == nil || r.Overflow {
				t.Errorf("Collect() reported %+v", r)
			}
			if r.Admitted > r.Demand {
				t.Errorf("report of %q: Admitted %d > Demand %d", r.Key, r.Admitted, r.Demand)
			}
			if g := got[r.Key]; g != nil {
				g.Admitted += r.Admitted
				g.Demand += r.Demand
			} else {
				got[r.Key] = &r
			}
		}
	}
	go func() { // the syncer
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				add(tbl.Collect())
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				k := (w + i) % len(keys)
				if tbl.Take(global, keys[k]).Allowed() {
					allowed[k].Add(1)
				}
				tbl.Take(local, keys[k])
				if i%100 == 0 {
					c.Add(ms) // refill 1 token per key
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-done
	add(tbl.Collect())
	var demand uint64
	for k, key := range keys {
		r := got[key]
		if r == nil {
			t.Fatalf("no report of %q", key)
		}
		if r.Admitted != allowed[k].Load() {
			t.Errorf("%q: Admitted = %d, want %d", key, r.Admitted, allowed[k].Load())
		}
		demand += r.Demand
	}
	if demand != workers*calls {
		t.Errorf("total Demand = %d, want %d", demand, workers*calls)
	}
	if rs := tbl.Collect(); len(rs) != 0 {
		t.Errorf("Collect() after all was collected = %d reports, want 0", len(rs))
	}
}

func TestCollectReport(t *testing.T) {
	t.Parallel()
	tbl, _ := newTable(t, ratelimit.Options{})
	l := &ratelimit.Limit{ID: "g", Rate: 1, Burst: 2, Global: true}
	key := []byte("app-1")
	for range 3 {
		tbl.Take(l, string(key))
	}
	key[0] = 'X' // the table must have its own copy
	r := collectOne(t, tbl)
	if r.Limit != l || r.Key != "app-1" || r.Admitted != 2 || r.Demand != 3 || r.Overflow || r.Bucket == nil {
		t.Errorf("Collect() = %+v, want app-1 with 2 admitted of 3", r)
	}
	// A key too long to be kept in the bucket itself.
	long := []byte(strings.Repeat("issuer/subject/client ", 10))
	want := string(long)
	tbl.Take(l, string(long))
	long[0] = 'X'
	if r := collectOne(t, tbl); r.Key != want || r.Demand != 1 {
		t.Errorf("Collect() = %+v, want %q with 1 call", r, want)
	}
	if r := tbl.Take(l, want); r.Remaining != 0 {
		t.Errorf("second Take of the long key = %+v, want 0 remaining", r)
	}
}

func TestConcurrentApplyKeepsTokens(t *testing.T) {
	t.Parallel()
	// No refill (the clock stands still): however Apply and Take
	// interleave, exactly Burst calls are admitted.
	const burst, takers, calls = 20000, 4, 8000
	tbl, c := newTable(t, ratelimit.Options{})
	l := &ratelimit.Limit{ID: "g", Rate: 1, Burst: burst, Global: true}
	tbl.Take(l, "k")
	b := collectOne(t, tbl).Bucket
	var (
		wg   sync.WaitGroup
		n    atomic.Int64
		stop atomic.Bool
	)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				b.Apply(1, math.Inf(1), c.Now())
			}
		}()
	}
	var tw sync.WaitGroup
	for range takers {
		tw.Add(1)
		go func() {
			defer tw.Done()
			for range calls {
				if tbl.Take(l, "k").Allowed() {
					n.Add(1)
				}
			}
		}()
	}
	tw.Wait()
	stop.Store(true)
	wg.Wait()
	if got := n.Load(); got != burst-1 {
		t.Errorf("admitted %d, want %d", got, burst-1)
	}
}

func TestLimitChange(t *testing.T) {
	t.Parallel()
	tbl, c := newTable(t, ratelimit.Options{})
	v1 := &ratelimit.Limit{ID: "route/orders-create/writes", Rate: 10, Burst: 20}
	for range 20 {
		tbl.Take(v1, "k")
	}
	// Same numbers in a new snapshot: the same bucket, still empty.
	same := &ratelimit.Limit{ID: v1.ID, Rate: v1.Rate, Burst: v1.Burst}
	run(t, tbl, c, same, []step{{want: refused(20, 2*time.Second, 100*ms)}})
	// A faster rate: still empty, but refills faster.
	v2 := &ratelimit.Limit{ID: v1.ID, Rate: 100, Burst: 20}
	run(t, tbl, c, v2, []step{
		{want: refused(20, 200*ms, 10*ms)},
		{advance: 100 * ms, want: allowed(9, 20, 110*ms)},
	})
	// A smaller burst caps the tokens.
	c.Add(time.Second)
	v3 := &ratelimit.Limit{ID: v1.ID, Rate: 100, Burst: 5}
	run(t, tbl, c, v3, []step{{want: allowed(4, 5, 10*ms)}})
	if got := tbl.Len(); got != 1 {
		t.Errorf("Len() = %d, want 1", got)
	}
	// Becoming global splits it.
	tbl2, c2 := newTable(t, ratelimit.Options{ExpectedNodes: 2})
	run(t, tbl2, c2, v1, []step{{want: allowed(19, 20, 100*ms)}})
	v4 := &ratelimit.Limit{ID: v1.ID, Rate: 10, Burst: 20, Global: true}
	// 19 tokens, of which the new burst keeps 10.
	run(t, tbl2, c2, v4, []step{{want: allowed(9, 10, 200*ms)}})
}

func TestOverflow(t *testing.T) {
	t.Parallel()
	tbl, c := newTable(t, ratelimit.Options{MaxBuckets: 2, IdleAfter: time.Minute})
	l := &ratelimit.Limit{ID: "anonymous", Rate: 1, Burst: 2}
	other := &ratelimit.Limit{ID: "other", Rate: 1, Burst: 2, Global: true}
	run(t, tbl, c, l, []step{
		{key: "a", want: allowed(1, 2, time.Second)},
		{key: "b", want: allowed(1, 2, time.Second)},
		// The table is full: c and d share one bucket.
		{key: "c", want: allowed(1, 2, time.Second)},
		{key: "d", want: allowed(0, 2, 2*time.Second)},
		{key: "c", want: refused(2, 2*time.Second, time.Second)},
		// Buckets that exist are unaffected.
		{key: "a", want: allowed(0, 2, 2*time.Second)},
	})
	if got := tbl.Len(); got != 3 {
		t.Errorf("Len() = %d, want 3", got)
	}
	// Each limit has its own overflow bucket, reported as such.
	run(t, tbl, c, other, []step{{key: "e", want: allowed(1, 2, time.Second)}})
	if r := collectOne(t, tbl); !r.Overflow || r.Key != "" || r.Limit != other {
		t.Errorf("Collect() = %+v, want other's overflow bucket", r)
	}
	// Eviction makes room again.
	c.Add(2 * time.Minute)
	if n := ratelimit.Sweep(tbl); n != 4 {
		t.Errorf("Sweep() = %d, want 4", n)
	}
	run(t, tbl, c, l, []step{
		{key: "f", want: allowed(1, 2, time.Second)},
		{key: "g", want: allowed(1, 2, time.Second)},
		{key: "h", want: allowed(1, 2, time.Second)},
		{key: "i", want: allowed(0, 2, 2*time.Second)},
	})
}

// TestEvictIdle: the evictor, which sweeps every IdleAfter/4 of real
// time, drops buckets idle on the Table's clock. The clock moves only
// when the test says, so a bucket made after the sweep stays.
func TestEvictIdle(t *testing.T) {
	t.Parallel()
	c := newClock()
	tbl := ratelimit.NewTable(ratelimit.Options{IdleAfter: 50 * ms, Now: c.Now})
	t.Cleanup(tbl.Close)
	l := &ratelimit.Limit{ID: "x", Rate: 1000, Burst: 1}
	for _, k := range []string{"a", "b", "c"} {
		tbl.Take(l, k)
	}
	if got := tbl.Len(); got != 3 {
		t.Fatalf("Len() = %d, want 3", got)
	}
	c.Add(time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for tbl.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Len() = %d 10 s after the buckets went idle, want 0", tbl.Len())
		}
		time.Sleep(5 * ms)
	}
	if r := tbl.Take(l, "a"); !r.Allowed() || tbl.Len() != 1 {
		t.Errorf("Take after eviction = %+v with Len %d, want allowed with Len 1", r, tbl.Len())
	}
}

func TestEvictKeepsBucketsThatAreNotIdle(t *testing.T) {
	t.Parallel()
	const idle = time.Minute
	tbl, c := newTable(t, ratelimit.Options{IdleAfter: idle})
	slow := &ratelimit.Limit{ID: "slow", Rate: 1.0 / 60, Burst: 10} // 10 minutes to refill
	fast := &ratelimit.Limit{ID: "fast", Rate: 100, Burst: 10}
	for range 10 {
		tbl.Take(slow, "k")
	}
	tbl.Take(fast, "k")
	c.Add(idle / 2)
	if n := ratelimit.Sweep(tbl); n != 0 {
		t.Errorf("Sweep() at %v = %d, want 0", idle/2, n)
	}
	c.Add(idle)
	// fast is full and idle; slow is idle but not full: evicting it would
	// hand out tokens.
	if n := ratelimit.Sweep(tbl); n != 1 {
		t.Errorf("Sweep() at %v = %d, want 1", 3*idle/2, n)
	}
	// 1.5 tokens have come back in 90 s.
	run(t, tbl, c, slow, []step{{want: allowed(0, 10, 9*time.Minute+30*time.Second)}})
	c.Add(20 * time.Minute)
	if n := ratelimit.Sweep(tbl); n != 1 {
		t.Errorf("Sweep() when full = %d, want 1", n)
	}
	if got := tbl.Len(); got != 0 {
		t.Errorf("Len() = %d, want 0", got)
	}
}

// TestCloseStopsEvictor: closing ten tables ends ten goroutines, their
// evictors. It counts from the tables open, not from before they were
// made: a goroutine of an earlier test that is still on its way out (a
// closed evictor returns after Close does) would otherwise leave too few.
func TestCloseStopsEvictor(t *testing.T) {
	// Not parallel: it counts goroutines.
	tbls := make([]*ratelimit.Table, 10)
	for i := range tbls {
		tbls[i] = ratelimit.NewTable(ratelimit.Options{IdleAfter: ms})
	}
	open := runtime.NumGoroutine()
	for _, tbl := range tbls {
		tbl.Close()
		tbl.Close() // idempotent
	}
	want := open - len(tbls)
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			t.Fatalf("NumGoroutine() = %d after closing %d tables, want at most %d", runtime.NumGoroutine(), len(tbls), want)
		}
		runtime.Gosched()
	}
}

func TestTakeDoesNotAllocate(t *testing.T) {
	// Not parallel: AllocsPerRun counts every goroutine's allocations.
	for _, opts := range []ratelimit.Options{{}, {Now: time.Now}} {
		tbl := ratelimit.NewTable(opts)
		defer tbl.Close()
		for _, l := range []*ratelimit.Limit{
			{ID: "local", Rate: 1e6, Burst: 1e6},
			{ID: "global", Rate: 1e6, Burst: 1e6, Global: true},
			{ID: "closed", Rate: 1, Burst: 1, Global: true, FailClosed: true}, // refuses
		} {
			key := string([]byte("app-1234"))
			tbl.Take(l, key)
			if n := testing.AllocsPerRun(1000, func() { tbl.Take(l, key) }); n != 0 {
				t.Errorf("Take(%q) allocates %v times, want 0", l.ID, n)
			}
			now := time.Now()
			if n := testing.AllocsPerRun(1000, func() { tbl.TakeAt(l, key, now) }); n != 0 {
				t.Errorf("TakeAt(%q) allocates %v times, want 0", l.ID, n)
			}
		}
	}
}

func TestTakeAt(t *testing.T) {
	t.Parallel()
	tbl, c := newTable(t, ratelimit.Options{})
	l := &ratelimit.Limit{ID: "x", Rate: 10, Burst: 1}
	now := c.Now()
	if r := tbl.TakeAt(l, "k", now); !r.Allowed() {
		t.Fatalf("TakeAt = %+v, want allowed", r)
	}
	if r := tbl.TakeAt(l, "k", now.Add(50*ms)); r != refused(1, 50*ms, 50*ms) {
		t.Errorf("TakeAt(+50ms) = %+v, want %+v", r, refused(1, 50*ms, 50*ms))
	}
	if r := tbl.TakeAt(l, "k", now.Add(100*ms)); !r.Allowed() {
		t.Errorf("TakeAt(+100ms) = %+v, want allowed", r)
	}
}

func TestSetExpectedNodes(t *testing.T) {
	t.Parallel()
	tbl := ratelimit.NewTable(ratelimit.Options{})
	t.Cleanup(tbl.Close)
	l := &ratelimit.Limit{ID: "g", Name: "g", Rate: 30, Burst: 30, Global: true}
	if r := tbl.Take(l, "a"); r.Limit != 30 {
		t.Errorf("one expected node: burst share %d, want 30", r.Limit)
	}
	tbl.SetExpectedNodes(3)
	if r := tbl.Take(l, "b"); r.Limit != 10 {
		t.Errorf("three expected nodes: a new bucket's burst share is %d, want 10", r.Limit)
	}
	tbl.SetExpectedNodes(0)
	if r := tbl.Take(l, "c"); r.Limit != 30 {
		t.Errorf("SetExpectedNodes(0): burst share %d, want 30 (at least one node)", r.Limit)
	}
}

func TestPendingAndReweigh(t *testing.T) {
	t.Parallel()
	// The clock stands still: on real time a slow machine lets the
	// bucket refill a token between the takes.
	tbl, _ := newTable(t, ratelimit.Options{ExpectedNodes: 2})
	l := &ratelimit.Limit{ID: "g", Name: "g", Rate: 100, Burst: 100, Global: true}
	for range 60 {
		tbl.Take(l, "k")
	}
	reps := tbl.Collect()
	if len(reps) != 1 || reps[0].Admitted != 50 || reps[0].Demand != 60 {
		t.Fatalf("Collect = %+v, want one bucket with 50 admitted of 60", reps)
	}
	b := reps[0].Bucket
	tbl.Take(l, "k")
	if a, d := b.Pending(); a != 0 || d != 1 {
		t.Errorf("Pending = %d, %d; want 0 admitted of 1", a, d)
	}
	if a, d := b.Pending(); a != 0 || d != 1 {
		t.Errorf("Pending reset the counts: %d, %d", a, d)
	}
	if b.Weight() != 0.5 {
		t.Errorf("Weight = %v, want 0.5 (two expected nodes)", b.Weight())
	}
	b.Reweigh(0.9)
	if r := tbl.Take(l, "k"); b.Weight() != 0.9 || r.Limit != 90 {
		t.Errorf("after Reweigh(0.9): weight %v, burst share %d; want 0.9, 90", b.Weight(), r.Limit)
	}
	if reps := tbl.Collect(); len(reps) != 1 || reps[0].Demand != 2 {
		t.Errorf("Collect after Pending = %+v, want the 2 calls since the last Collect", reps)
	}
}

// TestBucketCollect: collecting one bucket takes its counts out of the
// table's next Collect, and each count is reported once.
func TestBucketCollect(t *testing.T) {
	t.Parallel()
	tbl, _ := newTable(t, ratelimit.Options{})
	l := &ratelimit.Limit{ID: "g", Rate: 1, Burst: 4, Global: true}
	tbl.Take(l, "k")
	reps := tbl.Collect()
	if len(reps) != 1 || reps[0].Admitted != 1 {
		t.Fatalf("Collect = %+v, want one report of 1", reps)
	}
	b := reps[0].Bucket
	for range 5 { // 3 admitted (burst 4, one taken), 2 refused
		tbl.Take(l, "k")
	}
	if got := b.Collect(); got.Admitted != 3 || got.Demand != 5 || got.Key != "k" || got.Limit != l {
		t.Errorf("Bucket.Collect = %+v, want 3 admitted of 5, key k", got)
	}
	if got := b.Collect(); got.Demand != 0 {
		t.Errorf("second Bucket.Collect = %+v, want no counts", got)
	}
	if reps := tbl.Collect(); len(reps) != 0 {
		t.Errorf("Table.Collect after Bucket.Collect = %+v, want nothing", reps)
	}
	tbl.Take(l, "k")
	if reps := tbl.Collect(); len(reps) != 1 || reps[0].Demand != 1 {
		t.Errorf("Table.Collect = %+v, want the one new call", reps)
	}
}
