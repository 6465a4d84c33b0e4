package reconcile

import (
	"context"
	"time"
)

// Loop reconciles until ctx ends: at once and then every Interval, the
// current period, and the previous one until it is final, with finalise
// from its end + Grace. It wakes at a period's end + Grace too, so that a
// period closes then rather than up to an Interval later; a close that is
// blocked is tried again every Interval, or within seconds while it
// waits for Ready or for the grace after the start. A period older than the previous
// one that is still not final (a lost node not yet written off) is closed
// with Run.
//
// A failed run is logged and tried again at the next wake.
func (r *Reconciler) Loop(ctx context.Context) {
	for {
		r.waiting.Store(false)
		now := r.opts.Now()
		cur := PeriodOf(now)
		prev := previous(cur)
		_, prevEnd, _ := Bounds(prev)
		_, curEnd, _ := Bounds(cur)
		if st, err := r.store.Period(ctx, prev); err != nil {
			r.failed(ctx, prev, err)
		} else if !st.Final {
			r.loopRun(ctx, prev, now.After(prevEnd.Add(r.opts.Grace)))
		}
		r.loopRun(ctx, cur, false)

		wait := r.opts.Interval
		for _, close := range []time.Time{prevEnd.Add(r.opts.Grace), curEnd.Add(r.opts.Grace)} {
			// Just after the close, so that Run sees the grace over.
			if d := close.Sub(now) + time.Millisecond; d > 0 && d < wait {
				wait = d
			}
		}
		if r.waiting.Load() {
			// The close waited for the service to take in what was
			// waiting for it: that takes seconds, not an Interval.
			wait = min(wait, readyRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.opts.After(wait):
		}
	}
}

// readyRetry is how soon Loop tries a close again that waited for the
// service itself (Options.Ready, the grace after the start).
const readyRetry = 5 * time.Second

func (r *Reconciler) loopRun(ctx context.Context, period string, finalise bool) {
	if _, err := r.Run(ctx, period, finalise); err != nil {
		r.failed(ctx, period, err)
	}
}

func (r *Reconciler) failed(ctx context.Context, period string, err error) {
	if ctx.Err() != nil {
		return
	}
	r.log.ErrorContext(ctx, "reconcile: the run failed; it is tried again later", "period", period, "err", err)
}
