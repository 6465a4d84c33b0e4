package redissync

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-gw/portico/gateway/ratelimit"
)

// Runner keeps a node's global buckets in step with the fleet: every sync
// interval it collects what the table's global buckets admitted and saw,
// syncs that through Redis, and applies the shares that come back. It is
// the only caller of the table's Collect.
type Runner struct {
	Table  *ratelimit.Table
	Client redis.UniversalClient
	// Node names this node in Redis; unique in the fleet.
	Node string
	// Settings returns the sync interval and the round trip's timeout; it
	// is read every round, so a new snapshot's settings apply at once.
	Settings func() (interval, timeout time.Duration)
	// Logger gets a warning when a sync fails, at most every errLogEvery;
	// nil means slog.Default().
	Logger *slog.Logger

	syncer   *Syncer
	interval time.Duration
	timeout  time.Duration
	// pending holds activity whose sync failed, added to the next report
	// so that the fleet's buckets still learn of it. (A round trip that
	// timed out may have been applied: then that activity counts twice,
	// the conservative error.)
	pending map[*ratelimit.Bucket]ratelimit.Report
	lastErr time.Time

	// others holds, per bucket synced last round, the other nodes' demand
	// then; collectedAt is when that round collected. Between syncs the
	// runner re-estimates each bucket's weight from its own demand since
	// collectedAt against others (see adapt).
	others      map[*ratelimit.Bucket]synced
	collectedAt time.Time
	syncedAt    time.Time
}

// synced is what the last sync said about one bucket — the other nodes'
// demand and this node's own demand rate then — and the bucket's pending
// demand at the last adapt step.
type synced struct {
	others, rate float64
	seen         uint64
	seenAt       time.Time
	// cur is the demand rate over the last adapt step, 0 before one.
	cur float64
}

// adaptSteps is how many times per sync interval a runner re-estimates
// its buckets' weights locally: ten, 50 ms apart at the default interval.
// With five, the fleet admitted about 0.85 of the limit in the second
// demand moved between nodes (TestAccuracy, under the race detector).
const adaptSteps = 10

// minAdaptDemand is the fewest calls since the last sync a bucket needs
// for its local estimate: below it the rate is noise.
const minAdaptDemand = 10

const errLogEvery = 10 * time.Second

// Run syncs until ctx is done: a sync every interval, and local
// re-estimates of the weights between them.
func (r *Runner) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	followUp := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		due := time.Since(r.syncedAt) >= r.interval*(adaptSteps-1)/adaptSteps
		moved := !due && r.adapt()
		if due || moved || followUp {
			_ = r.Once(ctx)
			r.syncedAt = time.Now()
		}
		// Demand that moved here has usually moved away from (or to)
		// other nodes, which report it at their own early syncs: sync once
		// more a step later to learn of theirs.
		followUp = moved
		timer.Reset(r.interval / adaptSteps)
	}
}

// adapt re-estimates, between syncs, the weight of every bucket synced
// last round from the demand it has seen since: a node whose traffic jumps
// would otherwise hold its old share until its next sync, and the fleet
// under-admit for up to an interval each time demand moves between nodes.
// The estimate assumes the other nodes' demand is still what Redis last
// said (Share.Others): weight = d / (d + others). If every node's demand
// rose at once the estimates could add up to more than one; the fleet's
// bucket then goes into debt, which the next sync charges back.
//
// adapt reports whether some bucket's demand moved by more than a factor
// of two since the last sync: then the node syncs early, so that the other
// nodes learn of the move (and it of theirs) within a step rather than an
// interval. Steady traffic never syncs early.
func (r *Runner) adapt() bool {
	now := time.Now()
	moved := false
	for b, last := range r.others {
		_, demand := b.Pending()
		// The rate over the last step alone: since the last sync it would
		// mix the traffic before a move with the traffic after it.
		n, dt := demand-last.seen, now.Sub(last.seenAt).Seconds()
		if demand < last.seen { // collected meanwhile
			n = demand
		}
		if n < minAdaptDemand || dt < r.interval.Seconds()/(2*adaptSteps) {
			continue
		}
		d := float64(n) / dt
		last.seen, last.seenAt, last.cur = demand, now, d
		r.others[b] = last
		if d > 2*last.rate || d < last.rate/2 {
			moved = true
		}
		w := 1.0
		if last.others > 0 {
			w = d / (d + last.others)
		}
		if math.Abs(w-b.Weight()) > 0.02 {
			b.Reweigh(w)
		}
	}
	return moved
}

// Once makes one sync round trip and applies the shares it returns. On
// failure every bucket keeps its last share and the activity is kept for
// the next round. It returns the sync's error.
func (r *Runner) Once(ctx context.Context) error {
	interval, timeout := r.Settings()
	if r.syncer == nil || interval != r.interval || timeout != r.timeout {
		r.interval, r.timeout = interval, timeout
		r.syncer = New(r.Client, Options{Node: r.Node, Interval: interval, Timeout: timeout})
	}
	if r.pending == nil {
		r.pending = map[*ratelimit.Bucket]ratelimit.Report{}
	}
	reports := r.Table.Collect()
	prevCollect := r.collectedAt
	r.collectedAt = time.Now()
	// The rates measured at the last adapt step, if recent, tell Redis
	// what each bucket's demand is now.
	current := make(map[*ratelimit.Bucket]float64, len(r.others))
	for b, last := range r.others {
		if last.cur > 0 && r.collectedAt.Sub(last.seenAt) <= 2*r.interval/adaptSteps {
			current[b] = last.cur
		}
	}
	clear(r.others)
	for i := range reports {
		if p, ok := r.pending[reports[i].Bucket]; ok {
			reports[i].Admitted += p.Admitted
			reports[i].Demand += p.Demand
			delete(r.pending, reports[i].Bucket)
		}
	}
	for _, p := range r.pending { // activity of buckets idle this round
		reports = append(reports, p)
	}
	clear(r.pending)
	if len(reports) == 0 {
		return nil
	}
	rr := make([]Report, len(reports))
	for i, rep := range reports {
		rr[i] = Report{
			Key:  rep.Limit.ID + "\x00" + rep.Key,
			Rate: rep.Limit.Rate, Burst: rep.Limit.Burst,
			Admitted: rep.Admitted, Demand: rep.Demand,
			Current: current[rep.Bucket],
		}
	}
	if r.others == nil {
		r.others = map[*ratelimit.Bucket]synced{}
	}
	// Round trips of at most maxRoundTrip buckets, each with its own
	// timeout: Redis spends some 10 µs per bucket, so one round trip for
	// every bucket of a busy node would outlast any sensible timeout, and
	// no bucket would ever sync.
	var err error
	for lo := 0; lo < len(rr); lo += maxRoundTrip {
		hi := min(lo+maxRoundTrip, len(rr))
		if err == nil {
			err = r.syncChunk(ctx, reports[lo:hi], rr[lo:hi], timeout, prevCollect)
		}
		if err != nil { // this chunk failed, or an earlier one did
			for _, rep := range reports[lo:hi] {
				r.pending[rep.Bucket] = rep
			}
		}
	}
	if err != nil {
		if now := time.Now(); now.Sub(r.lastErr) >= errLogEvery {
			r.lastErr = now
			log := r.Logger
			if log == nil {
				log = slog.Default()
			}
			log.Warn("rate limit sync failed; keeping the last shares", "error", err, "buckets", len(reports))
		}
	}
	return err
}

// maxRoundTrip is the most buckets one sync round trip carries.
const maxRoundTrip = 1000

// syncChunk syncs one round trip's buckets and applies their shares.
func (r *Runner) syncChunk(ctx context.Context, reports []ratelimit.Report, rr []Report, timeout time.Duration, prevCollect time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	shares, err := r.syncer.Sync(ctx, rr)
	if err != nil {
		return err
	}
	now := time.Now()
	span := max(now.Sub(prevCollect).Seconds(), 1e-3)
	for i, rep := range reports {
		rep.Bucket.Apply(shares[i].Weight, shares[i].Tokens, now)
		// Only busy buckets are re-estimated between syncs: a quiet one's
		// rate is noise, and adapt's work stays bounded by the busy ones.
		if rep.Demand >= minAdaptDemand {
			r.others[rep.Bucket] = synced{others: shares[i].Others, rate: float64(rep.Demand) / span, seenAt: r.collectedAt}
		}
	}
	return nil
}
