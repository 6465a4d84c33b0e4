package redissync_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-gw/portico/gateway/ratelimit"
	"github.com/portico-gw/portico/gateway/ratelimit/redissync"
	"github.com/portico-gw/portico/testing/redistest"
	"github.com/portico-gw/portico/testing/testclock"
)

// fleet is n nodes, each a bucket table kept in step through Redis by a
// Runner, as gateway nodes are.
type fleet struct {
	tables  []*ratelimit.Table
	runners []*redissync.Runner
}

func startFleet(t *testing.T, client func(i int) redis.UniversalClient, n int, interval, timeout time.Duration) *fleet {
	t.Helper()
	f := &fleet{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		tbl := ratelimit.NewTable(ratelimit.Options{ExpectedNodes: n})
		r := &redissync.Runner{
			Table: tbl, Client: client(i), Node: fmt.Sprint("node-", i),
			Settings: func() (time.Duration, time.Duration) { return interval, timeout },
			Logger:   slog.New(slog.DiscardHandler),
		}
		f.tables = append(f.tables, tbl)
		f.runners = append(f.runners, r)
		wg.Go(func() { r.Run(ctx) })
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, tbl := range f.tables {
			tbl.Close()
		}
	})
	return f
}

// call is one Take: when in the run it started, and how long it took.
type call struct{ at, took time.Duration }

// drive sends demand to the fleet's nodes for d: rate(elapsed, node)
// Take calls per second at each node, paced every millisecond. It returns
// the calls admitted per node per second of the run, and every Take's
// timing (to show that nothing on the request path waits for Redis).
func drive(f *fleet, l *ratelimit.Limit, key string, d time.Duration, rate func(elapsed time.Duration, node int) float64) ([][]int64, []call) {
	secs := int(d / time.Second)
	admitted := make([][]int64, len(f.tables))
	lat := make([][]call, len(f.tables))
	start := time.Now()
	var wg sync.WaitGroup
	for i, tbl := range f.tables {
		admitted[i] = make([]int64, secs)
		wg.Go(func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			owed := 0.0
			last := start
			for now := range tick.C {
				el := now.Sub(start)
				if el >= d {
					return
				}
				owed += rate(el, i) * now.Sub(last).Seconds()
				last = now
				for ; owed >= 1; owed-- {
					t0 := time.Now()
					r := tbl.Take(l, key)
					lat[i] = append(lat[i], call{t0.Sub(start), time.Since(t0)})
					if r.Allowed() {
						atomic.AddInt64(&admitted[i][int(el/time.Second)], 1)
					}
				}
			}
		})
	}
	wg.Wait()
	var all []call
	for _, l := range lat {
		all = append(all, l...)
	}
	return admitted, all
}

// p99Between is the 99th percentile of the Takes that started in [from, to).
func p99Between(calls []call, from, to time.Duration) time.Duration {
	var d []time.Duration
	for _, c := range calls {
		if c.at >= from && c.at < to {
			d = append(d, c.took)
		}
	}
	return p99(d)
}

// windows sums the nodes' admissions per second.
func windows(admitted [][]int64) []int64 {
	total := make([]int64, len(admitted[0]))
	for _, node := range admitted {
		for s, n := range node {
			total[s] += n
		}
	}
	return total
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*99/100]
}

func describe(admitted [][]int64) string {
	var b strings.Builder
	for s := range admitted[0] {
		fmt.Fprintf(&b, "  s%02d:", s)
		sum := int64(0)
		for _, node := range admitted {
			fmt.Fprintf(&b, " %4d", node[s])
			sum += node[s]
		}
		fmt.Fprintf(&b, "  = %4d\n", sum)
	}
	return b.String()
}

// TestAccuracy is the accuracy run: three nodes, one key with a
// limit of 1,000/s, demand at 3× the limit split 70/20/10 across the nodes
// and then moving abruptly (10/20/70 at 10 s, 20/70/10 at 20 s), for 30 s.
//
// Every 1-s window after the first must admit within ±10 % of the limit,
// and the whole run within 10 %. The windows in which demand moves are the
// hard ones: syncing every 500 ms alone left them at about 0.7 of the
// limit. What holds them within 10 % (see Runner and the package
// documentation): each node re-estimates its weight from its own demand
// ten times per interval and syncs early, twice, when its demand moves;
// and a node reads the others' averages as they have moved since their
// last report, not as they stood then.
func TestAccuracy(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 30 s run")
	}
	srv := redistest.Start(t)
	f := startFleet(t, func(int) redis.UniversalClient { return srv.Client(t) }, 3, 500*time.Millisecond, 200*time.Millisecond)
	const limit, dur = 1000.0, 30 * time.Second
	// A burst of a tenth of the rate: a bucket may rightly admit rate +
	// burst in a second after a quiet one, so a 1-s window can only be
	// held to ±10 % with a burst no bigger than that.
	l := &ratelimit.Limit{ID: "plan/gold/default", Name: "default", Rate: limit, Burst: limit / 10, Global: true}
	splits := [][3]float64{{.7, .2, .1}, {.1, .2, .7}, {.2, .7, .1}}
	admitted, _ := drive(f, l, "app-42", dur, func(el time.Duration, node int) float64 {
		return 3 * limit * splits[int(el/(10*time.Second))%len(splits)][node]
	})
	w := windows(admitted)
	t.Logf("admitted per second (nodes a b c = total), demand 70/20/10, then 10/20/70 at 10 s, 20/70/10 at 20 s:\n%s", describe(admitted))
	var sum int64
	for s, n := range w {
		sum += n
		switch {
		case s == 0:
		case math.Abs(float64(n)-limit) > 0.1*limit:
			t.Errorf("second %d admitted %d, more than 10%% from the limit %.0f", s, n, limit)
		}
	}
	// The whole run: the burst admitted at once, then the rate.
	want := l.Burst + limit*dur.Seconds()
	t.Logf("whole run: %d admitted, %.3f of burst + limit × seconds", sum, float64(sum)/want)
	if math.Abs(float64(sum)-want) > 0.1*want {
		t.Errorf("whole run admitted %d, more than 10%% from %.0f", sum, want)
	}
}

// TestRedisOutage kills Redis mid-run and restarts it: no Take waits for
// it, admission stays within 1.1 × limit × (1 + nodes that lost sync) —
// here every node keeps its last share, so the limit holds — and the
// fleet recovers once Redis is back.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 12 s run")
	}
	srv := redistest.Start(t)
	f := startFleet(t, func(int) redis.UniversalClient { return srv.Client(t) }, 3, 200*time.Millisecond, 50*time.Millisecond)
	const limit, dur = 500.0, 12 * time.Second
	l := &ratelimit.Limit{ID: "plan/gold/default", Name: "default", Rate: limit, Burst: limit, Global: true}
	go func() {
		time.Sleep(4 * time.Second)
		srv.Kill()
		time.Sleep(4 * time.Second)
		srv.Restart(t)
	}()
	admitted, lat := drive(f, l, "app-42", dur, func(_ time.Duration, node int) float64 {
		return 3 * limit * [3]float64{.6, .3, .1}[node]
	})
	w := windows(admitted)
	t.Logf("admitted per second (Redis down from 4 s to 8 s):\n%s", describe(admitted))
	t.Logf("Take p99: %v before the outage (1–4 s), %v during it (4–8 s), %v after (8–12 s)",
		p99Between(lat, time.Second, 4*time.Second), p99Between(lat, 4*time.Second, 8*time.Second), p99Between(lat, 8*time.Second, dur))
	for s, n := range w {
		if s == 0 {
			continue
		}
		// Nodes that lost sync keep their last shares: the fleet still
		// admits about the limit. The bound is 1.1 × limit × (1 +
		// nodes that lost sync); the assertion is the stricter 1.1 ×
		// limit × 2 (one node's share drifting entirely).
		if float64(n) > 1.1*limit*2 {
			t.Errorf("second %d admitted %d, over 2.2 × the limit", s, n)
		}
		if s >= 10 && math.Abs(float64(n)-limit) > 0.1*limit {
			t.Errorf("second %d (Redis back) admitted %d, more than 10%% from the limit", s, n)
		}
	}
}

// TestSlowRedis puts 300 ms of latency between the nodes and Redis, six
// times the sync timeout: every sync fails, nothing on the request path
// waits, and each node keeps enforcing the share it started with (the
// limit ÷ expected nodes), so the fleet stays under the limit.
func TestSlowRedis(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 5 s run")
	}
	srv := redistest.Start(t)
	proxy := redistest.DelayProxy(t, srv.Addr())
	proxy.SetDelay(300 * time.Millisecond)
	f := startFleet(t, func(int) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, 3, 200*time.Millisecond, 50*time.Millisecond)
	const limit, dur = 600.0, 5 * time.Second
	l := &ratelimit.Limit{ID: "plan/gold/default", Name: "default", Rate: limit, Burst: limit / 10, Global: true}
	admitted, lat := drive(f, l, "app-42", dur, func(_ time.Duration, node int) float64 {
		return 3 * limit * [3]float64{.6, .3, .1}[node]
	})
	t.Logf("admitted per second with Redis 300 ms away:\n%s", describe(admitted))
	t.Logf("Take p99: %v over %d calls", p99Between(lat, 0, dur), len(lat))
	for s, n := range windows(admitted) {
		if s > 0 && float64(n) > 1.1*limit {
			t.Errorf("second %d admitted %d, over 1.1 × the limit", s, n)
		}
	}
	// Each node enforces a third of the limit (its share before any sync).
	for i, node := range admitted {
		for s, n := range node[1:] {
			if float64(n) > 1.1*limit/3 {
				t.Errorf("node %d second %d admitted %d, over 1.1 × its share %.0f", i, s+1, n, limit/3)
			}
		}
	}
}

// TestRunnerManyBuckets syncs 12,000 active buckets with a 100 ms timeout:
// in one round trip Redis would need longer than that (some 10–15 µs a
// bucket, plus the client's encoding), so the Runner splits them into
// round trips of their own, and every bucket gets its share.
func TestRunnerManyBuckets(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	tbl := ratelimit.NewTable(ratelimit.Options{ExpectedNodes: 2})
	t.Cleanup(tbl.Close)
	r := &redissync.Runner{
		Table: tbl, Client: srv.Client(t), Node: "node-0", Logger: slog.New(slog.DiscardHandler),
		Settings: func() (time.Duration, time.Duration) { return redissync.DefaultInterval, 100 * time.Millisecond },
	}
	l := &ratelimit.Limit{ID: "plan/gold/default", Name: "default", Rate: 100, Burst: 100, Global: true}
	const n = 12000
	for i := range n {
		if res := tbl.Take(l, fmt.Sprint("app-", i)); res.Limit != 50 {
			t.Fatalf("before any sync: burst share %d, want 50 (two expected nodes)", res.Limit)
		}
	}
	start := time.Now()
	if err := r.Once(t.Context()); err != nil {
		t.Fatalf("Once: %v", err)
	}
	t.Logf("synced %d buckets in %v", n, time.Since(start))
	for i := range n {
		// Alone in Redis, this node holds the whole limit.
		if res := tbl.Take(l, fmt.Sprint("app-", i)); res.Limit != 100 {
			t.Fatalf("bucket %d after the sync: burst share %d, want 100", i, res.Limit)
		}
	}
}

// TestRunnerTableClock: the Runner reads its Table's clock, so a share is
// dated on the clock the buckets run on. A FailClosed bucket refuses once
// its share is older than StaleAfter by that clock; dated by another clock,
// it would never be, or always be.
func TestRunnerTableClock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// Years from the real time, as a test clock or a clock of another
	// kind may be.
	clk := testclock.New(time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC))
	tbl := ratelimit.NewTable(ratelimit.Options{ExpectedNodes: 1, Now: clk.Now})
	t.Cleanup(tbl.Close)
	r := &redissync.Runner{
		Table: tbl, Client: srv.Client(t), Node: "node-0", Logger: slog.New(slog.DiscardHandler),
		Settings: func() (time.Duration, time.Duration) { return redissync.DefaultInterval, 5 * time.Second },
	}
	l := &ratelimit.Limit{ID: "plan/gold/default", Name: "default", Rate: 100, Burst: 100, Global: true, FailClosed: true, StaleAfter: time.Second}
	if res := tbl.Take(l, "app-1"); !res.Allowed() {
		t.Fatalf("first Take = %+v, want allowed (a new bucket counts as shared)", res)
	}
	clk.Add(900 * time.Millisecond)
	if err := r.Once(t.Context()); err != nil {
		t.Fatalf("Once: %v", err)
	}
	// 1.8 s after the bucket was made, 0.9 s after its share.
	clk.Add(900 * time.Millisecond)
	if res := tbl.Take(l, "app-1"); !res.Allowed() {
		t.Errorf("Take 0.9 s after the share = %+v, want allowed (the share is fresh)", res)
	}
	// 1.1 s after the share, with no sync since: stale.
	clk.Add(200 * time.Millisecond)
	if res := tbl.Take(l, "app-1"); res.Allowed() || res.RetryAfter != ratelimit.StaleRetryAfter {
		t.Errorf("Take 1.1 s after the share = %+v, want refused for a stale share (StaleAfter 1 s on the Table's clock)", res)
	}
}

// TestRunnerReportsMeasuredDemand: every report a busy bucket makes tells
// Redis the demand rate the Runner measured on its clock since the
// bucket's last sync: never a rate from before that sync, and never
// nothing, which would leave Redis to divide the demand by the time
// between two script calls, as late as a loaded machine makes them.
//
// One node's demand falls from 2,100/s to 300/s 16 ms before a step, which
// so measures some 920/s, less than half the rate of the last sync: demand
// moved, and the bucket syncs at once and at each step of its follow-up.
// At 300/s a step sees fewer calls than the Runner needs for a rate of its
// own.
func TestRunnerReportsMeasuredDemand(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	start := time.Now()
	clk := testclock.New(start)
	rl := &reportLog{now: func() time.Duration { return clk.Now().Sub(start) }}
	client.AddHook(rl)
	tbl := ratelimit.NewTable(ratelimit.Options{ExpectedNodes: 1, Now: clk.Now})
	t.Cleanup(tbl.Close)
	const interval, step = 500 * time.Millisecond, 25 * time.Millisecond // the Runner's steps: 20 an interval
	r := &redissync.Runner{
		Table: tbl, Client: client, Node: "node-0", Logger: slog.New(slog.DiscardHandler),
		Settings: func() (time.Duration, time.Duration) { return interval, 5 * time.Second },
	}
	l := &ratelimit.Limit{ID: "plan/gold/default", Name: "default", Rate: 1e6, Burst: 1e6, Global: true}
	const drop = 1009 * time.Millisecond
	owed := 0.0
	for el := time.Duration(0); el < 1500*time.Millisecond; el += time.Millisecond {
		clk.Set(start.Add(el))
		if el%step == 0 {
			r.Step(t.Context())
		}
		if owed += 2.1; el >= drop {
			owed -= 1.8
		}
		for ; owed >= 1; owed-- {
			tbl.Take(l, "app-42")
		}
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	after := 0
	for _, r := range rl.reports {
		if r.at <= drop+step {
			continue // the step that saw the drop, and the steps before it
		}
		after++
		if r.current < 150 || r.current > 600 {
			t.Errorf("report at %v: current demand %v/s, want about 300/s (-1: none)", r.at, r.current)
		}
	}
	if after < 5 {
		t.Errorf("%d reports after the drop, want the four later follow-ups and a regular sync: %+v", after, rl.reports)
	}
}

// reportLog is a go-redis hook that records the single-bucket reports of
// script calls: when on the test's clock, and the Current they carry.
type reportLog struct {
	now     func() time.Duration
	mu      sync.Mutex
	reports []loggedReport
}

type loggedReport struct {
	at      time.Duration
	current float64
}

func (k *reportLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (k *reportLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (k *reportLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			a := c.Args()
			if c.Name() != "evalsha" || len(a) < 3 || a[2] != 1 {
				continue
			}
			cur, _ := a[len(a)-1].(float64)
			k.mu.Lock()
			k.reports = append(k.reports, loggedReport{k.now(), cur})
			k.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// keyCounter is a go-redis hook that records how many buckets each script
// call carries.
type keyCounter struct {
	mu    sync.Mutex
	calls []int
}

func (k *keyCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (k *keyCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		k.record(cmd)
		return next(ctx, cmd)
	}
}

func (k *keyCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			k.record(c)
		}
		return next(ctx, cmds)
	}
}

func (k *keyCounter) record(cmd redis.Cmder) {
	if cmd.Name() != "evalsha" {
		return
	}
	if n, ok := cmd.Args()[2].(int); ok {
		k.mu.Lock()
		k.calls = append(k.calls, n)
		k.mu.Unlock()
	}
}

// TestEarlySyncCarriesMovedBuckets: with 100 busy buckets at steady
// demand and one whose demand jumps tenfold, the runner syncs the jumped
// bucket early, on its own, and the steady ones about twice a second.
func TestEarlySyncCarriesMovedBuckets(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	kc := &keyCounter{}
	client.AddHook(kc)
	f := startFleet(t, func(int) redis.UniversalClient { return client }, 1, 500*time.Millisecond, 200*time.Millisecond)
	tbl := f.tables[0]
	l := &ratelimit.Limit{ID: "plan/gold/default", Name: "default", Rate: 1e6, Burst: 1e6, Global: true}
	const steady, secs = 100, 3
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for now := range tick.C {
		el := now.Sub(start)
		if el >= secs*time.Second {
			break
		}
		for i := range steady { // 300/s each
			for range 3 {
				tbl.Take(l, fmt.Sprint("steady-", i))
			}
		}
		jumper := 3 // 300/s, then 3,000/s from 1.5 s on
		if el >= 1500*time.Millisecond {
			jumper = 30
		}
		for range jumper {
			tbl.Take(l, "jumper")
		}
	}
	kc.mu.Lock()
	defer kc.mu.Unlock()
	small, total := 0, 0
	for _, n := range kc.calls {
		total += n
		if n < 10 {
			small++
		}
	}
	t.Logf("%d script calls carrying %d bucket reports in %d s: %v", len(kc.calls), total, secs, kc.calls)
	if small == 0 {
		t.Errorf("no early sync of a few buckets after one bucket's demand jumped")
	}
	// Regular syncs: 101 buckets twice a second. Were every early sync to
	// carry every bucket, there would be up to ten times as many.
	if max := 101 * 2 * secs * 3 / 2; total > max {
		t.Errorf("%d bucket reports in %d s, want at most %d: early syncs carry more than the moved buckets", total, secs, max)
	}
}
