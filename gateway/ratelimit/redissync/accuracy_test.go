package redissync_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-gw/portico/gateway/ratelimit"
	"github.com/portico-gw/portico/gateway/ratelimit/redissync"
	"github.com/portico-gw/portico/testing/redistest"
	"github.com/portico-gw/portico/testing/testclock"
)

// fleet is n nodes, each a bucket table kept in step through Redis by a
// Runner, as gateway nodes are. Every table runs on one test clock, which
// only drive moves; drive also takes the Runners' steps, so that what the
// buckets and Runners see does not depend on how fast the machine is.
type fleet struct {
	clock    *testclock.Clock
	tables   []*ratelimit.Table
	runners  []*redissync.Runner
	interval time.Duration
}

func startFleet(t *testing.T, client func(i int) redis.UniversalClient, n int, interval, timeout time.Duration) *fleet {
	t.Helper()
	f := &fleet{clock: testclock.New(time.Now()), interval: interval}
	for i := range n {
		tbl := ratelimit.NewTable(ratelimit.Options{ExpectedNodes: n, Now: f.clock.Now})
		t.Cleanup(tbl.Close)
		f.tables = append(f.tables, tbl)
		f.runners = append(f.runners, &redissync.Runner{
			Table: tbl, Client: client(i), Node: fmt.Sprint("node-", i),
			Settings: func() (time.Duration, time.Duration) { return interval, timeout },
			Logger:   slog.New(slog.DiscardHandler),
		})
	}
	return f
}

// adaptSteps is the Runner's steps per sync interval.
const adaptSteps = 20

// drive offers demand to the fleet for d of its clock: rate(elapsed, node)
// Take calls per second at each node, spread over every millisecond, and
// takes each node's Runner step every interval/adaptSteps, as Run does
// (node i a fraction i/n of a step after node 0, so that the nodes do not
// sync in lockstep). at, if not nil, runs at the start of every
// millisecond, for events such as a Redis outage. drive returns the calls
// admitted per node per second of the clock.
//
// The clock moves here alone, one millisecond at a time, with the steps in
// between: a slow machine runs the loop more slowly, but every bucket sees
// the same calls at the same times and every Runner the same steps. Redis
// alone keeps real time: it refills the fleet's bucket by its own clock,
// and ages the demand averages. So the clock never runs ahead of real time
// (drive waits when it is ahead), and after a delay it catches up by as
// much as the time in which Redis refills a burst: catching up spends at
// the limit's rate what Redis refilled while drive was held up, which is
// at most a burst. Beyond that it goes on from where it is.
func drive(t *testing.T, f *fleet, l *ratelimit.Limit, key string, d time.Duration, rate func(elapsed time.Duration, node int) float64, at func(elapsed time.Duration)) [][]int64 {
	t.Helper()
	n := len(f.tables)
	step := f.interval / adaptSteps
	offset := make([]time.Duration, n)
	for i := range offset {
		offset[i] = (step * time.Duration(i) / time.Duration(n)).Truncate(time.Millisecond)
	}
	admitted := make([][]int64, n)
	owed := make([]float64, n)
	for i := range admitted {
		admitted[i] = make([]int64, int(d/time.Second))
	}
	catchUp := time.Duration(l.Burst / l.Rate * float64(time.Second))
	start, wall := f.clock.Now(), time.Now()
	for el := time.Duration(0); el < d; el += time.Millisecond {
		if late := time.Since(wall) - el; late > catchUp {
			wall = wall.Add(late - catchUp)
		} else if late < 0 {
			time.Sleep(-late)
		}
		f.clock.Set(start.Add(el))
		if at != nil {
			at(el)
		}
		for i, tbl := range f.tables {
			if (el-offset[i])%step == 0 {
				f.runners[i].Step(t.Context())
			}
			owed[i] += rate(el, i) / 1000
			for ; owed[i] >= 1; owed[i]-- {
				if tbl.Take(l, key).Allowed() {
					admitted[i][el/time.Second]++
				}
			}
		}
	}
	return admitted
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
// 20 times per interval and, when its demand moves, syncs that bucket at
// once and at each of the next five steps; and a node reads the others'
// averages as they have moved since their last report, not as they stood
// then.
//
// The seconds are the fleet's clock, which drive moves, so a loaded
// machine that runs the loop late changes neither the demand nor when the
// Runners step.
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
	admitted := drive(t, f, l, "app-42", dur, func(el time.Duration, node int) float64 {
		return 3 * limit * splits[int(el/(10*time.Second))%len(splits)][node]
	}, nil)
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

// TestRedisOutage kills Redis mid-run and restarts it: admission stays
// within 1.1 × limit × (1 + nodes that lost sync) — here every node keeps
// its last share, so the limit holds — and the fleet recovers once Redis
// is back. Redis goes down at 4 s and comes back at 8 s of the fleet's
// clock, so the outage covers the same demand however slow the machine.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 12 s run")
	}
	srv := redistest.Start(t)
	// While Redis is down a sync fails at once (one dial, no retries):
	// every sync the Runners try then is a failure, and none holds up
	// drive's clock for its timeout. A slow Redis is TestSlowRedis.
	f := startFleet(t, func(int) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, 3, 200*time.Millisecond, 200*time.Millisecond)
	const limit, dur = 500.0, 12 * time.Second
	l := &ratelimit.Limit{ID: "plan/gold/default", Name: "default", Rate: limit, Burst: limit, Global: true}
	admitted := drive(t, f, l, "app-42", dur, func(_ time.Duration, node int) float64 {
		return 3 * limit * [3]float64{.6, .3, .1}[node]
	}, func(el time.Duration) {
		switch el {
		case 4 * time.Second:
			srv.Kill()
		case 8 * time.Second:
			srv.Restart(t)
		}
	})
	w := windows(admitted)
	t.Logf("admitted per second (Redis down from 4 s to 8 s):\n%s", describe(admitted))
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
// times the sync timeout: every sync fails, and each node keeps enforcing
// the share it started with (the limit ÷ expected nodes), so the fleet
// stays under the limit.
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
	admitted := drive(t, f, l, "app-42", dur, func(_ time.Duration, node int) float64 {
		return 3 * limit * [3]float64{.6, .3, .1}[node]
	}, nil)
	t.Logf("admitted per second with Redis 300 ms away:\n%s", describe(admitted))
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

// TestRunnerManyBuckets syncs 12,000 active buckets. In one round trip
// Redis would need some 10–15 µs a bucket, plus the client's encoding
// (BenchmarkSync), far beyond a timeout of 50 ms, so the Runner splits them
// into round trips of at most 1,000 buckets, each with a timeout of its
// own, and every bucket gets its share. The timeout here is generous: the
// test checks the round trips, not how fast this machine makes them.
func TestRunnerManyBuckets(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	kc := &keyCounter{}
	client.AddHook(kc)
	tbl := ratelimit.NewTable(ratelimit.Options{ExpectedNodes: 2})
	t.Cleanup(tbl.Close)
	r := &redissync.Runner{
		Table: tbl, Client: client, Node: "node-0", Logger: slog.New(slog.DiscardHandler),
		Settings: func() (time.Duration, time.Duration) { return redissync.DefaultInterval, 10 * time.Second },
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
	kc.mu.Lock()
	trips := kc.trips
	kc.mu.Unlock()
	sum := 0
	for i, tr := range trips {
		sum += tr.buckets
		if tr.buckets > 1000 {
			t.Errorf("round trip %d carried %d buckets, want at most 1,000", i, tr.buckets)
		}
		if i > 0 && !tr.deadline.After(trips[i-1].deadline) {
			t.Errorf("round trip %d has the deadline of the one before (%v): want a timeout of its own", i, tr.deadline)
		}
	}
	if len(trips) != n/1000 || sum != n {
		t.Errorf("%d round trips carrying %d buckets, want %d carrying %d", len(trips), sum, n/1000, n)
	}
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
// call carries and, for each pipeline of script calls by hash (one per
// round trip; a retry with the script's source is not counted), how many
// buckets it carries and its context's deadline.
type keyCounter struct {
	mu    sync.Mutex
	calls []int
	trips []trip
}

type trip struct {
	buckets  int
	deadline time.Time
}

func (k *keyCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (k *keyCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		_ = k.record(cmd)
		return next(ctx, cmd)
	}
}

func (k *keyCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		tr := trip{}
		tr.deadline, _ = ctx.Deadline()
		for _, c := range cmds {
			tr.buckets += k.record(c)
		}
		if tr.buckets > 0 {
			k.mu.Lock()
			k.trips = append(k.trips, tr)
			k.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// record records cmd if it is a script call by hash, and returns the
// buckets it carries.
func (k *keyCounter) record(cmd redis.Cmder) int {
	if cmd.Name() != "evalsha" {
		return 0
	}
	n, ok := cmd.Args()[2].(int)
	if !ok {
		return 0
	}
	k.mu.Lock()
	k.calls = append(k.calls, n)
	k.mu.Unlock()
	return n
}

// TestEarlySyncCarriesMovedBuckets: with 100 busy buckets at steady
// demand and one whose demand jumps tenfold, the runner syncs the jumped
// bucket early, on its own, and the steady ones about twice a second.
//
// The test moves the Table's clock and takes the Runner's steps itself,
// so the demand each step sees is exact: steady stays steady however late
// the machine runs the loop. Nothing here depends on Redis's clock (the
// limit is far above the demand), so the clock runs as fast as the loop.
func TestEarlySyncCarriesMovedBuckets(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	kc := &keyCounter{}
	client.AddHook(kc)
	// A generous timeout: a sync that timed out would be reported again.
	f := startFleet(t, func(int) redis.UniversalClient { return client }, 1, 500*time.Millisecond, 5*time.Second)
	tbl := f.tables[0]
	l := &ratelimit.Limit{ID: "plan/gold/default", Name: "default", Rate: 1e6, Burst: 1e6, Global: true}
	const steady, secs = 100, 3
	keys := make([]string, steady)
	for i := range keys {
		keys[i] = fmt.Sprint("steady-", i)
	}
	start := f.clock.Now()
	step := f.interval / adaptSteps
	for el := time.Duration(0); el < secs*time.Second; el += 5 * time.Millisecond {
		f.clock.Set(start.Add(el))
		if el%step == 0 {
			f.runners[0].Step(t.Context())
		}
		if el%(10*time.Millisecond) != 0 {
			continue
		}
		for _, k := range keys { // 300/s each
			for range 3 {
				tbl.Take(l, k)
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
