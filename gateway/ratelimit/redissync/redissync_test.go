package redissync_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-gw/portico/gateway/ratelimit/redissync"
	"github.com/portico-gw/portico/testing/redistest"
)

// backends are the Redis deployments every behaviour is checked against.
var backends = []struct {
	name  string
	start func(t *testing.T) redis.UniversalClient
}{
	{"single", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t, 3).Client(t) }},
}

// behaviours run against every backend, in parallel, each with its own
// key prefix.
var behaviours = []struct {
	name string
	fn   func(t *testing.T, client redis.UniversalClient)
}{
	{"Alone", testAlone},
	{"Refill", testRefill},
	{"Converge", testConverge},
	{"RateOverTime", testRateOverTime},
	{"DecayBetweenReports", testDecayBetweenReports},
	{"Dropout", testDropout},
	{"Expiry", testExpiry},
	{"ManyKeys", testManyKeys},
	{"ScriptFlushed", testScriptFlushed},
	{"InvalidReport", testInvalidReport},
}

func TestSync(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			client := b.start(t)
			for _, bh := range behaviours {
				t.Run(bh.name, func(t *testing.T) {
					t.Parallel()
					bh.fn(t, client)
				})
			}
		})
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newSyncer returns a Syncer for node whose keys are private to the test.
// Its timeout is generous: these tests are about the maths, not latency.
func newSyncer(t testing.TB, client redis.UniversalClient, node string, interval time.Duration) *redissync.Syncer {
	return redissync.New(client, redissync.Options{
		Node:     node,
		Interval: interval,
		Timeout:  5 * time.Second,
		Prefix:   "test:" + t.Name() + ":",
	})
}

func sync1(t testing.TB, s *redissync.Syncer, r redissync.Report) redissync.Share {
	t.Helper()
	shares, err := s.Sync(testCtx(t), []redissync.Report{r})
	if err != nil {
		t.Fatalf("Sync(%q): %v", r.Key, err)
	}
	if len(shares) != 1 {
		t.Fatalf("Sync(%q) returned %d shares, want 1", r.Key, len(shares))
	}
	return shares[0]
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func testAlone(t *testing.T, client redis.UniversalClient) {
	s := newSyncer(t, client, "a", 500*time.Millisecond)
	// Rate 0: no refill, so the tokens are exact.
	for _, step := range []struct {
		admitted, demand uint64
		tokens           float64
	}{
		{0, 0, 100},
		{30, 35, 70},
		{100, 100, -30},    // debt
		{1000, 1000, -100}, // debt is floored at -burst
		{0, 5, -100},
	} {
		got := sync1(t, s, redissync.Report{Key: "k\x00app-1", Rate: 0, Burst: 100, Admitted: step.admitted, Demand: step.demand})
		if got.Weight != 1 || got.Tokens != step.tokens {
			t.Errorf("Sync(admitted %d) = %+v, want weight 1, tokens %v", step.admitted, got, step.tokens)
		}
	}
}

func testRefill(t *testing.T, client redis.UniversalClient) {
	s := newSyncer(t, client, "a", 500*time.Millisecond)
	r := redissync.Report{Key: "refill", Rate: 10, Burst: 10}
	r.Admitted, r.Demand = 10, 10
	start := time.Now()
	if got := sync1(t, s, r); got.Tokens != 0 {
		t.Fatalf("first Sync(admitted 10 of burst 10) tokens = %v, want 0", got.Tokens)
	}
	r.Admitted, r.Demand = 0, 0
	// 10 tokens/s refills the bucket in a second, not at once, and never
	// past the burst: at most 10/s × the time since the first Sync began,
	// however long the machine took for the two.
	got := sync1(t, s, r)
	if most := 10 * time.Since(start).Seconds(); got.Tokens > most {
		t.Errorf("tokens right after emptying = %v, want at most %.2f (refill is 10/s)", got.Tokens, most)
	}
	deadline := time.Now().Add(10 * time.Second)
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		got := sync1(t, s, r)
		if got.Tokens > 10 {
			t.Fatalf("tokens = %v, above the burst 10", got.Tokens)
		}
		if got.Tokens == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tokens = %v after 10s at 10/s, want the burst 10", got.Tokens)
		}
		<-ticker.C
	}
}

// round makes each node report its demand for key, in order, and returns
// their weights. Each report gives its demand as the Current rate, as the
// Runner does for a busy bucket: the weights then follow from the demands
// alone. Without it Redis divides each demand by the time since that
// node's last report, by its own clock, and a slow machine makes those
// times differ from node to node (testRateOverTime covers that).
func round(t testing.TB, nodes []*redissync.Syncer, key string, demands []uint64) []float64 {
	t.Helper()
	w := make([]float64, len(nodes))
	for i, n := range nodes {
		d := demands[i]
		w[i] = sync1(t, n, redissync.Report{Key: key, Rate: 1000, Burst: 1000, Admitted: d, Demand: d, Current: float64(d)}).Weight
	}
	return w
}

// threeNodes returns syncers for nodes a, b and c.
func threeNodes(t *testing.T, client redis.UniversalClient, interval time.Duration) []*redissync.Syncer {
	return []*redissync.Syncer{
		newSyncer(t, client, "a", interval),
		newSyncer(t, client, "b", interval),
		newSyncer(t, client, "c", interval),
	}
}

func testConverge(t *testing.T, client redis.UniversalClient) {
	const interval = 50 * time.Millisecond
	nodes := threeNodes(t, client, interval)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()

	// A node's first report weighs it by its demand against the others'.
	w := round(t, nodes, "k", []uint64{10, 20, 70})
	if w[0] != 1 || !near(w[1], 20.0/30, 0.01) || !near(w[2], 0.7, 0.01) {
		t.Errorf("first round weights = %.3f, want [1 0.667 0.7]", w)
	}
	for range 5 {
		<-ticker.C
		w = round(t, nodes, "k", []uint64{10, 20, 70})
	}
	if !near(w[0], 0.1, 0.03) || !near(w[1], 0.2, 0.03) || !near(w[2], 0.7, 0.03) {
		t.Fatalf("weights with demands 10/20/70 = %.3f, want ≈ [0.1 0.2 0.7]", w)
	}

	// Traffic moves: a's share follows within a couple of syncs.
	want := []float64{0.7, 0.2, 0.1}
	for i := 1; i <= 12; i++ {
		<-ticker.C
		w = round(t, nodes, "k", []uint64{70, 20, 10})
		if i == 3 && w[0] < 0.4 {
			t.Errorf("a's weight 3 syncs after its demand rose from 10%% to 70%% = %.3f, want > 0.4", w[0])
		}
	}
	for i := range w {
		if !near(w[i], want[i], 0.03) {
			t.Errorf("weights with demands 70/20/10 = %.3f, want ≈ %v", w, want)
			break
		}
	}
}

// testRateOverTime: a report without a Current rate is weighed by its
// demand over the time since the node's last report, by Redis's clock, so
// a late report, which covers more time, counts at its real rate and not
// at its demand over one interval. The bounds come from the times the
// test read around the reports: they hold however slowly the machine
// runs.
func testRateOverTime(t *testing.T, client redis.UniversalClient) {
	const interval = 500 * time.Millisecond
	a, b := newSyncer(t, client, "a", interval), newSyncer(t, client, "b", interval)
	report := func(s *redissync.Syncer, demand uint64, current float64) redissync.Share {
		return sync1(t, s, redissync.Report{Key: "k", Rate: 1000, Burst: 1000, Demand: demand, Current: current})
	}
	// a's demand is 100/s, its average exactly that.
	report(a, 1, 100)
	before := time.Now()
	report(b, 50, 0) // b's first report: 50 over one interval, 100/s
	after := time.Now()
	timer := time.NewTimer(2 * interval)
	<-timer.C
	report(a, 1, 100) // a stays live
	start := time.Now()
	got := report(b, 100, 0) // 100 over about 2 intervals: 100/s again (200/s over one)
	end := time.Now()
	if end.Sub(before) >= 5*interval {
		t.Logf("b's reports were %v apart: b may have been dropped as silent, its weight not checked", end.Sub(before))
		return
	}
	// Redis saw between start-after and end-before pass since b's first
	// report.
	weight := func(rate float64) float64 { return rate / (rate + 100) }
	lo, hi := weight(100/end.Sub(before).Seconds()), weight(100/start.Sub(after).Seconds())
	if got.Weight < lo || got.Weight > hi {
		t.Errorf("b's weight after 100 calls in %v to %v = %.3f, want %.3f to %.3f (100 over one interval would be %.3f)",
			start.Sub(after), end.Sub(before), got.Weight, lo, hi, weight(100/interval.Seconds()))
	}
}

// testDecayBetweenReports: a node reads another's average as it stands
// when it reads it, decayed towards that node's last reported rate, not as
// it stood at that node's report.
func testDecayBetweenReports(t *testing.T, client redis.UniversalClient) {
	const interval = 500 * time.Millisecond // τ = 62.5 ms
	a, b := newSyncer(t, client, "a", interval), newSyncer(t, client, "b", interval)
	report := func(s *redissync.Syncer, current float64) redissync.Share {
		return sync1(t, s, redissync.Report{Key: "k", Rate: 1000, Burst: 1000, Demand: 1, Current: current})
	}
	for range 5 {
		report(a, 2000)
		time.Sleep(100 * time.Millisecond)
	}
	// a's demand drops to 100/s: its average is about 2000 + 0.8 × (100 -
	// 2000) ≈ 480 after this report, and keeps falling towards 100.
	report(a, 100)
	time.Sleep(5 * interval / 8) // 10 τ
	if got := report(b, 50).Others; got < 99 || got > 110 {
		t.Errorf("b sees others' demand %.1f 10τ after a reported 100/s, want ≈ 100 (not a's average at its report, ≈ 480)", got)
	}
}

func testDropout(t *testing.T, client redis.UniversalClient) {
	const interval = 100 * time.Millisecond
	nodes := threeNodes(t, client, interval)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var w []float64
	var cLast time.Time // before c's last report (Redis's clock is the same host's)
	for i := range 4 {
		if i > 0 {
			<-ticker.C
		}
		cLast = time.Now()
		w = round(t, nodes, "k", []uint64{50, 30, 20})
	}
	if !near(w[2], 0.2, 0.03) {
		t.Fatalf("c's weight = %.3f, want ≈ 0.2", w[2])
	}

	// c stops reporting. It keeps its share for up to 5 intervals, then
	// a and b split the limit 50:30.
	<-ticker.C
	w = round(t, nodes[:2], "k", []uint64{50, 30})
	if since := time.Since(cLast); since >= 5*interval {
		// c may have been dropped by now: nothing to check.
		t.Logf("the round after c's last report ended %v after it: c may be gone, its share not checked", since)
	} else if !near(w[0], 0.5, 0.03) {
		t.Errorf("a's weight right after c went silent = %.3f, want ≈ 0.5 (c still counts)", w[0])
	}
	// Wait for c's entry to go: the entry says when c was dropped.
	key := nodes[0].RedisKey("k")
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := client.HExists(testCtx(t), key, "nc").Result()
		if err != nil {
			t.Fatal(err)
		}
		if !n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("HEXISTS %q nc: c's entry still there 10s after c went silent (a's weight %.3f)", key, w[0])
		}
		<-ticker.C
		w = round(t, nodes[:2], "k", []uint64{50, 30})
	}
	if since := time.Since(cLast); since <= 5*interval {
		t.Errorf("c was dropped %v after its last report, want after > 5 intervals (%v)", since, 5*interval)
	}
	// The round that dropped c weighed a and b with it still in: the next
	// one splits the limit between them.
	<-ticker.C
	w = round(t, nodes[:2], "k", []uint64{50, 30})
	if !near(w[0], 0.625, 0.03) {
		t.Errorf("a's weight after c dropped out = %.3f, want ≈ 0.625", w[0])
	}
	if !near(w[1], 0.375, 0.03) {
		t.Errorf("b's weight after c dropped out = %.3f, want ≈ 0.375", w[1])
	}
}

func testExpiry(t *testing.T, client redis.UniversalClient) {
	for _, tc := range []struct {
		interval time.Duration
		ttl      time.Duration
	}{
		{100 * time.Millisecond, 10 * time.Second}, // the 10s floor
		{3 * time.Second, 30 * time.Second},        // 10 intervals
	} {
		s := newSyncer(t, client, "a", tc.interval)
		key := fmt.Sprintf("k-%v", tc.interval)
		sync1(t, s, redissync.Report{Key: key, Rate: 1, Burst: 1, Demand: 1})
		ttl, err := client.PTTL(testCtx(t), s.RedisKey(key)).Result()
		if err != nil || ttl > tc.ttl || ttl < tc.ttl-5*time.Second {
			t.Errorf("interval %v: PTTL = %v, %v; want just under %v", tc.interval, ttl, err, tc.ttl)
		}
	}

	// Later reports push the expiry back, at most every tenth of the TTL.
	// Both are read from Redis, by its clock: when the expiry is (PEXPIRETIME)
	// and when it was last pushed back (the hash's x), not by when this
	// test, which a slow machine delays, happens to look.
	const interval = 100 * time.Millisecond // TTL 10 s
	s := newSyncer(t, client, "a", interval)
	r := redissync.Report{Key: "pushed", Rate: 1, Burst: 1, Demand: 1}
	key := s.RedisKey(r.Key)
	expiry := func() (at time.Duration, pushed float64) {
		ms, err := client.PExpireTime(testCtx(t), key).Result()
		if err != nil {
			t.Fatalf("PEXPIRETIME: %v", err)
		}
		x, err := client.HGet(testCtx(t), key, "x").Float64()
		if err != nil {
			t.Fatalf("HGET x: %v", err)
		}
		return ms, x
	}
	sync1(t, s, r)
	at0, x0 := expiry()
	at1, x1 := at0, x0
	waitFor(t, 10*time.Second, "expiry pushed back by later reports", func() bool {
		sync1(t, s, r)
		at1, x1 = expiry()
		return at1 != at0
	})
	if at1 < at0 || x1-x0 < 1 {
		t.Errorf("expiry moved from %v to %v, pushed back %.3f s after it was set; want later, and not before TTL/10 = 1 s", at0, at1, x1-x0)
	}
	// x is the script's TIME, read when it starts; PEXPIRE counts the TTL
	// from when Redis runs it, later in the same script, and
	// PEXPIRETIME has millisecond resolution. On a loaded machine the
	// two moments drift apart by a few milliseconds between two runs
	// (1.002 s against 1.004 s was seen): the bound is the script's run
	// time, far below the TTL/10 a wrong push would miss by.
	const slack = 50 * time.Millisecond
	if d := at1 - at0; d < time.Duration((x1-x0)*float64(time.Second))-slack {
		t.Errorf("expiry pushed back by %v after %.3f s, want by as much (a TTL from the report)", d, x1-x0)
	}
}

func testManyKeys(t *testing.T, client redis.UniversalClient) {
	const n = 5000
	s := newSyncer(t, client, "a", 500*time.Millisecond)
	reports := make([]redissync.Report, n)
	for i := range reports {
		burst := uint64(i%97 + 10)
		reports[i] = redissync.Report{
			Key:      fmt.Sprintf("plan/gold/default\x00app-%d", i),
			Burst:    float64(burst),
			Admitted: uint64(i) % burst,
			Demand:   uint64(i)%burst + 1,
		}
	}
	shares, err := s.Sync(testCtx(t), reports)
	if err != nil {
		t.Fatalf("Sync(%d reports): %v", n, err)
	}
	if len(shares) != n {
		t.Fatalf("Sync(%d reports) returned %d shares", n, len(shares))
	}
	for i, sh := range shares {
		// Rate 0: tokens are exactly burst - admitted, different for
		// neighbouring reports, so a share out of order shows.
		want := reports[i].Burst - float64(reports[i].Admitted)
		if sh.Weight != 1 || sh.Tokens != want {
			t.Fatalf("share %d (%q) = %+v, want weight 1, tokens %v", i, reports[i].Key, sh, want)
		}
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var counts []int
		err := cc.ForEachMaster(testCtx(t), func(ctx context.Context, m *redis.Client) error {
			keys, err := m.Keys(ctx, "test:"+t.Name()+":*").Result()
			mu.Lock()
			counts = append(counts, len(keys))
			mu.Unlock()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range counts {
			if c < n/10 {
				t.Errorf("buckets per master = %v, want them spread over all masters", counts)
				break
			}
		}
	}
}

func testScriptFlushed(t *testing.T, client redis.UniversalClient) {
	s := newSyncer(t, client, "a", 500*time.Millisecond)
	r := redissync.Report{Key: "k", Burst: 10, Admitted: 1, Demand: 1}
	sync1(t, s, r)
	flush := func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }
	var err error
	if cc, ok := client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(testCtx(t), flush)
	} else {
		err = flush(testCtx(t), client.(*redis.Client))
	}
	if err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
	if got := sync1(t, s, r); got.Tokens != 8 {
		t.Errorf("Sync after SCRIPT FLUSH tokens = %v, want 8", got.Tokens)
	}
}

func testInvalidReport(t *testing.T, client redis.UniversalClient) {
	s := newSyncer(t, client, "a", 500*time.Millisecond)
	for _, r := range []redissync.Report{
		{Key: "nan", Rate: math.NaN(), Burst: 1},
		{Key: "inf", Rate: 1, Burst: math.Inf(1)},
		{Key: "neg", Rate: -1, Burst: 1},
	} {
		shares, err := s.Sync(testCtx(t), []redissync.Report{{Key: "ok", Rate: 1, Burst: 1}, r})
		if err == nil || shares != nil {
			t.Errorf("Sync(rate %v, burst %v) = %v, %v; want an error and no shares", r.Rate, r.Burst, shares, err)
		}
	}
	if shares, err := s.Sync(testCtx(t), nil); err != nil || len(shares) != 0 {
		t.Errorf("Sync(nil) = %v, %v; want no shares, no error", shares, err)
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			t.Parallel()
			proxy := redistest.DelayProxy(t, srv.Addr())
			client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: ctxTimeouts})
			t.Cleanup(func() { client.Close() })
			s := redissync.New(client, redissync.Options{Node: "a", Timeout: 50 * time.Millisecond, Prefix: "test:" + t.Name() + ":"})
			reports := []redissync.Report{{Key: "k", Rate: 1, Burst: 10, Admitted: 1, Demand: 1}}

			// Warm up (connection, script cache) with a generous deadline:
			// -race on a busy machine can be slow.
			ok := func() bool {
				_, err := s.Sync(testCtx(t), reports)
				return err == nil
			}
			waitFor(t, 10*time.Second, "Sync through the proxy without delay", ok)

			proxy.SetDelay(200 * time.Millisecond)
			start := time.Now()
			shares, err := s.Sync(testCtx(t), reports)
			if took := time.Since(start); err == nil || shares != nil || took > time.Second {
				t.Fatalf("Sync with Redis 200ms away and Timeout 50ms = %v, %v after %v; want an error within 1s", shares, err, took)
			}
			if !strings.Contains(err.Error(), "redissync") {
				t.Errorf("error %q does not say where it comes from", err)
			}

			proxy.SetDelay(0)
			waitFor(t, 10*time.Second, "Sync after the delay is gone", ok)
		})
	}
}

// TestCalls checks that a Sync's buckets are split into script calls of at
// most 500, so that one call never blocks Redis for long.
func TestCalls(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	s := newSyncer(t, client, "a", 500*time.Millisecond)
	sync1(t, s, redissync.Report{Key: "warm-up", Burst: 1}) // loads the script
	if err := client.ConfigResetStat(testCtx(t)).Err(); err != nil {
		t.Fatalf("CONFIG RESETSTAT: %v", err)
	}
	reports := make([]redissync.Report, 1200)
	for i := range reports {
		reports[i] = redissync.Report{Key: fmt.Sprint(i), Burst: 1}
	}
	if _, err := s.Sync(testCtx(t), reports); err != nil {
		t.Fatalf("Sync(%d reports): %v", len(reports), err)
	}
	stats, err := client.Info(testCtx(t), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	if !strings.Contains(stats, "cmdstat_evalsha:calls=3,") {
		t.Errorf("INFO commandstats after a Sync of 1,200 buckets = %q, want 3 EVALSHA calls", stats)
	}
}

func TestRedisKilled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := redissync.New(srv.Client(t), redissync.Options{Node: "a", Timeout: time.Second, Prefix: "test:"})
	r := redissync.Report{Key: "k", Burst: 10, Admitted: 1, Demand: 1}
	sync1(t, s, r)

	srv.Kill()
	if shares, err := s.Sync(testCtx(t), []redissync.Report{r}); err == nil || shares != nil {
		t.Fatalf("Sync with Redis down = %v, %v; want an error and no shares", shares, err)
	}

	srv.Restart(t)
	// The restarted server has neither the script nor the bucket.
	if got := sync1(t, s, r); got.Tokens != 9 || got.Weight != 1 {
		t.Errorf("Sync after restart = %+v, want a new bucket: weight 1, tokens 9", got)
	}
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done after %v", what, d)
		}
		<-ticker.C
	}
}
