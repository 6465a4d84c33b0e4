package main

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// defaultGCHeadroomMiB is how much the heap may grow past the live heap
// before the next collection, by default.
//
// Why: a gateway node keeps a live heap of a few MiB to a few hundred
// (compiled routes, later the key table) and allocates a few KB per
// request. With Go's default pacing (GOGC=100) a small live heap means a
// collection every few hundred milliseconds under load, and each one shows
// in the latency tail — measured with testing/load: p99 at 5,000 req/s went
// from tens of milliseconds to about one with collections out of the way.
// Pacing by an absolute headroom makes collections rare while the live
// heap is small and leaves Go's proportional pacing in charge once it is
// large. The cost is memory: up to live heap + headroom.
const defaultGCHeadroomMiB = 256

// tuneGC keeps the collector's goal at least headroom bytes above the live
// heap, never below Go's default of 100 %, until ctx is done. It does
// nothing when headroom is 0 or GOGC is set in the environment: an explicit
// setting wins. GOMEMLIMIT, if set, still caps the heap.
func tuneGC(ctx context.Context, headroom uint64, log *slog.Logger) {
	if headroom == 0 {
		return
	}
	if _, set := os.LookupEnv("GOGC"); set {
		log.Info("GOGC is set; not tuning the garbage collector")
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	last := -1
	apply := func() {
		metrics.Read(sample)
		live := uint64(1 << 20)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			live = max(live, sample[0].Value.Uint64())
		}
		percent := int(min(max(headroom*100/live, 100), 100_000))
		// Retune only on a real change: SetGCPercent stops the world.
		if last < 0 || percent < last*9/10 || percent > last*11/10 {
			debug.SetGCPercent(percent)
			last = percent
		}
	}
	apply()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			apply()
		}
	}
}
