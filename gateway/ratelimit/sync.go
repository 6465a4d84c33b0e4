package ratelimit

// Report is the activity of one global bucket since the previous Collect.
type Report struct {
	// Limit is the Limit the bucket was last taken with.
	Limit *Limit
	// Key is the bucket's key (e.g. the app id); "" for an overflow bucket.
	Key string
	// Overflow reports whether this is the limit's overflow bucket, shared
	// by the keys that found the table full (see the package
	// documentation).
	Overflow bool
	// Admitted is the tokens taken since the last Collect.
	Admitted uint64
	// Demand is the Take calls (allowed and refused) since the last
	// Collect; Demand >= Admitted.
	Demand uint64
	// Bucket is the handle for Apply. It may be evicted by the time the
	// share comes back; Apply on it then does nothing.
	Bucket *Bucket
}

// Collect returns a Report for every global bucket with activity since the
// last Collect, in no particular order, and resets their counts.
//
// Counts are read and reset with atomic swaps, so none is lost or counted
// twice under concurrent Take: a Take that races with Collect shows in this
// report or in the next one. Summed over successive Collects, Admitted is
// the calls that Take admitted and Demand all the calls to Take on those
// buckets. Collect does not block Take. One syncer should own it, but
// concurrent calls are safe: each count goes to one of them.
//
// Collect visits only the buckets with counts, which a Take lists for it
// (see Bucket.count), so its cost follows the activity, not the size of
// the table. The first Collect, and one that comes more than IdleAfter
// after the previous, visit every bucket instead: the lists are dropped
// while nobody collects. Collecting at least once every IdleAfter also
// tells the evictor to keep buckets until their counts are collected.
func (t *Table) Collect() []Report {
	t.collectMu.Lock()
	defer t.collectMu.Unlock()
	now := t.nanos()
	all := now-t.lastCollect.Swap(now) >= t.idle
	var out []Report
	for i := range t.shards {
		sh := &t.shards[i]
		for b := sh.dirty.Swap(nil); b != nil; {
			next := b.nextDirty
			b.nextDirty = nil
			b.dirty.Store(false)
			if !all {
				out = b.report(out)
			}
			b = next
		}
		if all {
			s := sh.tab.Load().s
			for j := range s {
				if b := s[j].Load(); b != nil && b != tombstone {
					out = b.report(out)
				}
			}
		}
	}
	return out
}

// report appends b's counts to out, if it has any, and resets them.
func (b *Bucket) report(out []Report) []Report {
	if b.admitted.Load()|b.refused.Load() == 0 {
		return out
	}
	if rep := b.Collect(); rep.Demand > 0 {
		out = append(out, rep)
	}
	return out
}

// Collect returns b's counts since they were last collected (by the
// Table's Collect or by this method), possibly none, and resets them: a
// syncer that syncs a few buckets early collects just those. As with the
// Table's Collect, each count goes to exactly one report.
func (b *Bucket) Collect() Report {
	a, r := b.admitted.Swap(0), b.refused.Swap(0)
	return Report{
		Limit:    b.limit.Load(),
		Key:      b.key,
		Overflow: b.overflow,
		Admitted: a,
		Demand:   a + r,
		Bucket:   b,
	}
}

// dropDirty empties the dirty lists if nobody has collected for IdleAfter
// at now, so that they do not keep evicted buckets alive. The next Collect
// visits every bucket.
func (t *Table) dropDirty(now int64) {
	t.collectMu.Lock()
	defer t.collectMu.Unlock()
	if now-t.lastCollect.Load() < t.idle {
		return
	}
	for i := range t.shards {
		for b := t.shards[i].dirty.Swap(nil); b != nil; {
			next := b.nextDirty
			b.nextDirty = nil
			b.dirty.Store(false)
			b = next
		}
	}
}
