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
//
// A Runner reads the time from its Table's clock (Table.Now), the clock the
// buckets run on: demand rates, the schedule of syncs and the dates of
// shares are all measured on it. Only Run's pause between steps is real
// time.
type Runner struct {
	Table  *ratelimit.Table
	Client redis.UniversalClient
	// Node names this node in Redis; unique in the fleet.
	Node string
	// Settings returns the sync interval and the round trip's timeout; it
	// is read every round, so a new snapshot's settings apply at once.
	Settings func() (interval, timeout time.Duration)
	// Logger gets a warning when a sync fails, at most every errLogEvery,
	// and go-redis's own lines (see Options.Logger); nil means
	// slog.Default().
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

	// others holds, per busy bucket, what its last sync said and what
	// the runner has seen of it since: between syncs the runner
	// re-estimates each bucket's weight from its own demand against the
	// others' (see adapt).
	others      map[*ratelimit.Bucket]synced
	collectedAt time.Time
	syncedAt    time.Time
}

// synced is what a bucket's last sync said — the other nodes' demand and
// this node's own demand rate then — and what adapt has seen since.
type synced struct {
	others, rate float64
	// at is when the bucket's counts were last collected for a sync.
	at time.Time
	// seen is the bucket's pending demand at the last adapt step, at
	// seenAt; cur is its demand rate over that step, 0 before the
	// first step since the bucket's last sync: a rate from before it
	// would go on being reported as current.
	seen   uint64
	seenAt time.Time
	cur    float64
	// followUntil is the end of the bucket's follow-up after its demand
	// moved: until then it syncs alone at every step.
	followUntil time.Time
}

// adaptSteps is how many times per sync interval a runner re-estimates
// its buckets' weights locally: 20, 25 ms apart at the default interval.
// With five, the fleet admitted about 0.85 of the limit in the second
// demand moved between nodes (TestAccuracy, under the race detector).
const adaptSteps = 20

// followUpSteps is how many steps a bucket whose demand moved keeps
// syncing at every step: the nodes its traffic moved from (or to) report
// their side of the move at their own steps, and a node learns of it only
// at a sync after theirs. Without the follow-up the fleet sometimes
// admitted 0.87 of the limit in the second demand moved (TestAccuracy).
const followUpSteps = 5

// minAdaptDemand is the fewest calls since the last sync a bucket needs
// for its local estimate: below it the rate is noise.
const minAdaptDemand = 10

const errLogEvery = 10 * time.Second

// Run syncs until ctx is done: every bucket every interval, and between
// those, local re-estimates of the weights and early syncs of the buckets
// whose demand moved. It takes a step every interval/adaptSteps.
func (r *Runner) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		r.step(ctx)
		timer.Reset(r.interval / adaptSteps)
	}
}

// step is one turn of Run: a sync of every bucket once most of an interval
// has passed on the Table's clock since the last one, otherwise a local
// re-estimate of the weights and an early sync of the buckets whose demand
// moved.
func (r *Runner) step(ctx context.Context) {
	if r.Table.Now().Sub(r.syncedAt) >= r.interval*(adaptSteps-1)/adaptSteps {
		_ = r.Once(ctx)
		r.syncedAt = r.Table.Now()
	} else if moved := r.adapt(); len(moved) > 0 {
		_ = r.syncSome(ctx, moved)
	}
}

// adapt re-estimates, between syncs, the weight of every busy bucket from
// the demand it has seen since the last step: a node whose traffic jumps
// would otherwise hold its old share until its next sync, and the fleet
// under-admit for up to an interval each time demand moves between nodes.
// The estimate assumes the other nodes' demand is still what Redis last
// said (Share.Others): weight = d / (d + others). If every node's demand
// rose at once the estimates could add up to more than one; the fleet's
// bucket then goes into debt, which the next sync charges back.
//
// adapt returns the buckets to sync early: those whose demand moved by
// more than a factor of two since their last sync, so that the other
// nodes learn of the move (and this one of theirs) within a step rather
// than an interval, and those still following up an earlier move. Steady
// traffic never syncs early, and an early sync carries only these
// buckets.
func (r *Runner) adapt() []*ratelimit.Bucket {
	now := r.Table.Now()
	var early []*ratelimit.Bucket
	for b, last := range r.others {
		_, demand := b.Pending()
		// The rate over the last step alone: since the last sync it would
		// mix the traffic before a move with the traffic after it.
		n, dt := demand-last.seen, now.Sub(last.seenAt).Seconds()
		if demand < last.seen { // collected meanwhile
			n = demand
		}
		if n >= minAdaptDemand && dt >= r.interval.Seconds()/(2*adaptSteps) {
			d := float64(n) / dt
			last.seen, last.seenAt, last.cur = demand, now, d
			if d > 2*last.rate || d < last.rate/2 {
				last.followUntil = now.Add(followUpSteps * r.interval / adaptSteps)
			}
			r.others[b] = last
			w := 1.0
			if last.others > 0 {
				w = d / (d + last.others)
			}
			if math.Abs(w-b.Weight()) > 0.02 {
				b.Reweigh(w)
			}
		}
		if now.Before(last.followUntil) {
			early = append(early, b)
		}
	}
	return early
}

// Once makes one sync of every bucket with activity and applies the
// shares it returns. On failure every bucket keeps its last share and the
// activity is kept for the next round. It returns the sync's error.
func (r *Runner) Once(ctx context.Context) error {
	r.settings()
	reports := r.Table.Collect()
	prev := r.collectedAt
	r.collectedAt = r.Table.Now()
	if len(r.pending) > 0 {
		in := make(map[*ratelimit.Bucket]bool, len(reports))
		for _, rep := range reports {
			in[rep.Bucket] = true
		}
		for b, p := range r.pending { // activity of buckets idle this round
			if !in[b] {
				reports = append(reports, ratelimit.Report{Limit: p.Limit, Key: p.Key, Overflow: p.Overflow, Bucket: b})
			}
		}
	}
	return r.sync(ctx, reports, r.collectedAt, prev, true)
}

// syncSome syncs the buckets bs alone, between rounds.
func (r *Runner) syncSome(ctx context.Context, bs []*ratelimit.Bucket) error {
	r.settings()
	reports := make([]ratelimit.Report, len(bs))
	for i, b := range bs {
		reports[i] = b.Collect()
	}
	return r.sync(ctx, reports, r.Table.Now(), r.collectedAt, false)
}

// settings reads the interval and timeout, and makes a Syncer for them
// when they change.
func (r *Runner) settings() {
	interval, timeout := r.Settings()
	if r.syncer == nil || interval != r.interval || timeout != r.timeout {
		r.interval, r.timeout = interval, timeout
		r.syncer = New(r.Client, Options{Node: r.Node, Interval: interval, Timeout: timeout, Logger: r.Logger})
	}
	if r.pending == nil {
		r.pending = map[*ratelimit.Bucket]ratelimit.Report{}
	}
	if r.others == nil {
		r.others = map[*ratelimit.Bucket]synced{}
	}
}

// sync reports the activity of reports, collected at collectedAt, and
// applies the shares that come back. A bucket's activity covers the time
// since it was last collected: its own last sync, or prev. all says that
// reports holds every busy bucket: the buckets not in it stop being
// re-estimated.
func (r *Runner) sync(ctx context.Context, reports []ratelimit.Report, collectedAt, prev time.Time, all bool) error {
	// Each report of a busy bucket tells Redis the demand rate this node
	// measured (Current): the rate at the last adapt step if that was
	// recent, otherwise the demand since the bucket's last sync over the
	// time since then. Left to itself Redis would divide the demand by
	// the time between this node's script calls, which a round trip
	// delayed on a busy node or network stretches or squeezes: a few
	// milliseconds are a fifth or more of the 25 ms between the
	// follow-ups of a bucket whose demand moved. For a bucket that is not busy, and for activity
	// folded in from a failed sync (which began before the last sync),
	// Redis's measure, since this node's last report, is the right one.
	rr := make([]Report, len(reports))
	spans := make([]float64, len(reports))
	for i := range reports {
		rep := &reports[i]
		p, folded := r.pending[rep.Bucket]
		if folded {
			rep.Admitted += p.Admitted
			rep.Demand += p.Demand
			delete(r.pending, rep.Bucket)
		}
		last, ok := r.others[rep.Bucket]
		since := prev
		if ok && last.at.After(since) {
			since = last.at
		}
		spans[i] = max(collectedAt.Sub(since).Seconds(), 1e-3)
		rr[i] = Report{
			Key:  rep.Limit.ID + "\x00" + rep.Key,
			Rate: rep.Limit.Rate, Burst: rep.Limit.Burst,
			Admitted: rep.Admitted, Demand: rep.Demand,
		}
		switch {
		case !ok:
		case last.cur > 0 && collectedAt.Sub(last.seenAt) <= 2*r.interval/adaptSteps:
			rr[i].Current = last.cur
		case !folded && collectedAt.After(last.at):
			rr[i].Current = float64(rep.Demand) / collectedAt.Sub(last.at).Seconds()
		}
	}
	if all {
		// Buckets quiet this round are no longer busy.
		busy := make(map[*ratelimit.Bucket]bool, len(reports))
		for _, rep := range reports {
			if rep.Demand >= minAdaptDemand {
				busy[rep.Bucket] = true
			}
		}
		for b := range r.others {
			if !busy[b] {
				delete(r.others, b)
			}
		}
	}
	if len(reports) == 0 {
		return nil
	}
	// Round trips of at most maxRoundTrip buckets, each with its own
	// timeout: Redis spends some 10 µs per bucket, so one round trip for
	// every bucket of a busy node would outlast any sensible timeout, and
	// no bucket would ever sync.
	var err error
	for lo := 0; lo < len(rr); lo += maxRoundTrip {
		hi := min(lo+maxRoundTrip, len(rr))
		if err == nil {
			err = r.syncChunk(ctx, reports[lo:hi], rr[lo:hi], spans[lo:hi], collectedAt)
		}
		if err != nil { // this chunk failed, or an earlier one did
			for _, rep := range reports[lo:hi] {
				if rep.Demand > 0 {
					r.pending[rep.Bucket] = rep
				}
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
// spans are the seconds each report's activity covers.
func (r *Runner) syncChunk(ctx context.Context, reports []ratelimit.Report, rr []Report, spans []float64, collectedAt time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	shares, err := r.syncer.Sync(ctx, rr)
	if err != nil {
		return err
	}
	now := r.Table.Now()
	for i, rep := range reports {
		rep.Bucket.Apply(shares[i].Weight, shares[i].Tokens, now)
		// Only busy buckets are re-estimated between syncs: a quiet one's
		// rate is noise, and adapt's work stays bounded by the busy ones.
		last, ok := r.others[rep.Bucket]
		if rep.Demand < minAdaptDemand && !ok {
			continue
		}
		// Its counts were collected: Pending starts again from zero.
		last.others, last.rate, last.at = shares[i].Others, float64(rep.Demand)/spans[i], collectedAt
		last.seen, last.seenAt, last.cur = 0, collectedAt, 0
		r.others[rep.Bucket] = last
	}
	return nil
}
