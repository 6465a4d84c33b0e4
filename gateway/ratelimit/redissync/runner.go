package redissync

import (
	"context"
	"log/slog"
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
}

const errLogEvery = 10 * time.Second

// Run syncs until ctx is done.
func (r *Runner) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		r.Once(ctx)
		timer.Reset(r.interval)
	}
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
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	shares, err := r.syncer.Sync(ctx, rr)
	if err != nil {
		for _, rep := range reports {
			r.pending[rep.Bucket] = rep
		}
		if now := time.Now(); now.Sub(r.lastErr) >= errLogEvery {
			r.lastErr = now
			log := r.Logger
			if log == nil {
				log = slog.Default()
			}
			log.Warn("rate limit sync failed; keeping the last shares", "error", err, "buckets", len(reports))
		}
		return err
	}
	now := time.Now()
	for i, rep := range reports {
		rep.Bucket.Apply(shares[i].Weight, shares[i].Tokens, now)
	}
	return nil
}
