package ratelimit

import (
	"sync"
	"sync/atomic"
)

// shard is one part of the bucket index: an open-addressing hash table
// with linear probing, read without locks.
//
// Readers load the slots and probe them with atomic loads. Writers hold mu.
// A new bucket goes into an empty or tombstoned slot, and an evicted one
// leaves a tombstone, both with one atomic store, so a probe sees every
// chain either before or after the change. When the slots fill up (or
// empty out) a writer copies the live buckets into new slots and publishes
// them with one atomic store; a reader still probing the old slots may miss
// a bucket made since, and then finds it under mu in create.
type shard struct {
	mu   sync.Mutex
	tab  atomic.Pointer[slots]
	live int // buckets in tab; guarded by mu
	used int // buckets and tombstones in tab; guarded by mu
	_    cacheLinePad
	// dirty heads the list of the shard's global buckets with counts for
	// Collect, linked by bucket.nextDirty. Apart from tab, which every
	// lookup reads, since every first count of a bucket writes it.
	dirty atomic.Pointer[Bucket]
	_     cacheLinePad
}

// slots is a shard's table: a power of two of them, at most 3/4 used so
// that every probe ends at an empty slot.
type slots struct {
	s []slot
}

// slot is one entry of a shard's table. It holds the bucket's hash as well
// as the bucket, so that a probe passes other buckets without a cache miss
// on each. hash is written before b, and read after it: a reader that sees
// a bucket sees its hash.
type slot struct {
	hash atomic.Uint64
	b    atomic.Pointer[Bucket]
}

// Load returns the slot's bucket: nil if empty, tombstone if removed.
func (s *slot) Load() *Bucket { return s.b.Load() }

// minSlots is the smallest table of a shard.
const minSlots = 8

// tombstone marks the slot of an evicted bucket, which probes pass over.
var tombstone = &Bucket{}

func (sh *shard) init() {
	sh.tab.Store(&slots{s: make([]slot, minSlots)})
}

// find returns the bucket of (l.ID, key), or of l's overflow, whose hash
// is h; nil if there is none. It may be called without mu.
func (sh *shard) find(h uint64, l *Limit, key string, overflow bool) *Bucket {
	s := sh.tab.Load().s
	mask := uint64(len(s) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		b := s[i].b.Load()
		if b == nil {
			return nil
		}
		// A bucket last taken with l has l's ID: the common case skips
		// comparing it.
		if s[i].hash.Load() == h && b != tombstone && b.key == key && b.overflow == overflow &&
			(b.limit.Load() == l || b.id == l.ID) {
			return b
		}
	}
}

// insert adds b, which must not be in the table yet. The caller holds mu.
func (sh *shard) insert(b *Bucket) {
	if tab := sh.tab.Load(); (sh.used+1)*4 > len(tab.s)*3 {
		sh.rebuild(sh.live + 1)
	}
	s := sh.tab.Load().s
	mask := uint64(len(s) - 1)
	i := b.hash & mask
	for ; ; i = (i + 1) & mask {
		x := s[i].Load()
		if x == nil {
			sh.used++
			break
		}
		if x == tombstone {
			break
		}
	}
	s[i].hash.Store(b.hash)
	s[i].b.Store(b)
	sh.live++
}

// remove replaces the bucket in slot i with a tombstone. The caller holds
// mu.
func (sh *shard) remove(s []slot, i int) {
	s[i].b.Store(tombstone)
	sh.live--
}

// compact rebuilds the table after removals if it is mostly tombstones or
// mostly empty. The caller holds mu.
func (sh *shard) compact() {
	n := len(sh.tab.Load().s)
	if sh.used-sh.live > n/4 || (n > minSlots && sh.live*8 < n) {
		sh.rebuild(sh.live)
	}
}

// rebuild publishes a table of the live buckets sized for n of them, at
// most half full. The caller holds mu.
func (sh *shard) rebuild(n int) {
	size := minSlots
	for size < 2*n {
		size *= 2
	}
	ns := make([]slot, size)
	mask := uint64(size - 1)
	old := sh.tab.Load().s
	for i := range old {
		b := old[i].Load()
		if b == nil || b == tombstone {
			continue
		}
		j := b.hash & mask
		for ns[j].Load() != nil {
			j = (j + 1) & mask
		}
		ns[j].hash.Store(b.hash)
		ns[j].b.Store(b)
	}
	sh.used = sh.live
	sh.tab.Store(&slots{s: ns})
}
