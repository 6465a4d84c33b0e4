package ratelimit

import "time"

// evictLoop sweeps the table every period until Close.
func (t *Table) evictLoop(period time.Duration) {
	defer close(t.done)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.sweep(t.nanos())
		}
	}
}

// sweep evicts the buckets that are idle at now (see Bucket.evict) and
// returns how many it evicted. It holds one shard's lock at a time, which
// delays only the creation of buckets in that shard.
func (t *Table) sweep(now int64) int {
	collecting := now-t.lastCollect.Load() < t.idle
	if !collecting {
		t.dropDirty(now)
	}
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		s := sh.tab.Load().s
		k := 0
		for j := range s {
			if b := s[j].Load(); b != nil && b != tombstone && b.evict(now, t.idle, collecting) {
				sh.remove(s, j)
				k++
			}
		}
		if k > 0 {
			sh.compact()
			t.count.Add(int64(-k))
		}
		sh.mu.Unlock()
		n += k
	}
	return n
}
