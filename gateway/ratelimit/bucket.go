package ratelimit

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Bucket is the token bucket of one key of one limit. Its methods are safe
// for concurrent use. Once evicted from its Table a Bucket is inert: Take
// makes a new one for the key, and Apply on the old one does nothing.
type Bucket struct {
	bucket
	// Pad to whole cache lines: the counters of neighbouring buckets,
	// taken from by different cores, must not share one.
	_ [(64 - unsafe.Sizeof(bucket{})%64) % 64]byte
}

// inlineKey is the longest key a bucket holds in itself; a longer one is
// a heap object of its own.
const inlineKey = 64

// bucket is laid out by cache line, for a Take on a bucket that is not in
// the cache: line 0 holds what a lookup and every Take read, line 1 a short
// key, line 2 the first state; line 3 what only global buckets and state
// changes use. (The sizes are those of 64-bit platforms.)
type bucket struct {
	// id and key are the bucket's limit ID and key; key is a slice of
	// keyBuf if it fits.
	id, key string
	// state holds the bucket's TAT and parameters; see state.
	state atomic.Pointer[state]
	// limit is the Limit of the last Take; a Take with another one updates
	// the parameters if its numbers differ.
	limit atomic.Pointer[Limit]
	// touched is the time of the last Take, ns >> touchShift: written at
	// most once per 2^touchShift ns, so that it costs the hot path a load.
	touched  atomic.Int64
	overflow bool

	// keyBuf holds a short key, and st0 is the first state: the bucket,
	// its first state and its key are one object, for fewer cache misses
	// per Take and fewer objects for the collector to mark.
	keyBuf [inlineKey]byte
	st0    state

	// admitted and refused count the Takes of a global bucket since the
	// last Collect: one atomic add per Take.
	admitted, refused atomic.Uint64
	// dirty is set while b is on its shard's dirty list (see markDirty),
	// and nextDirty links that list.
	dirty     atomic.Bool
	nextDirty *Bucket
	hash      uint64
	t         *Table
	// mu serialises changes of state (Apply, a new Limit, eviction).
	mu sync.Mutex
}

// touchShift sets the granularity of bucket.touched: 2^26 ns ≈ 67 ms.
const touchShift = 26

// state is a bucket's GCRA state: the TAT and the parameters that give it
// meaning. The parameters never change; a change of share or of limit
// makes a new state (see Bucket.replace).
type state struct {
	// tat is the theoretical arrival time in ns on the Table's clock: when
	// the bucket will be full. frozen once the state is superseded or the
	// bucket evicted.
	tat atomic.Int64
	// next is the state that superseded this one, from just before tat
	// is frozen until the bucket points to the successor; nil otherwise,
	// so that a bucket's first state (part of the bucket) does not keep
	// its successors alive. A Take that finds tat frozen and next nil
	// looks the bucket up again.
	next atomic.Pointer[state]
	// interval is the ns one token takes to refill, >= 1; tol is the
	// tolerance τ = burst×interval, >= interval; quota is the burst in
	// whole tokens, tol/interval.
	interval, tol, quota int64
	// sharedAt is when the share was applied (or the bucket made), ns.
	sharedAt int64
	// weight is this node's part of the limit.
	weight float64
	// global is a copy of the limit's Global.
	global bool
}

// frozen is the TAT of a state that must no longer be taken from.
const frozen = math.MinInt64

// Bounds that keep a state's arithmetic in int64: a token refills at
// least every 2^50 ns (13 days), and τ is at most 2^60 ns (36 years).
const (
	maxInterval = 1 << 50
	maxTol      = 1 << 60
)

// newState returns the state of a bucket of rate and burst (a Limit's
// numbers) of which this node has weight, with no tat set.
func newState(rate, burst, weight float64, global bool, sharedAt int64) *state {
	s := &state{}
	s.init(rate, burst, weight, global, sharedAt)
	return s
}

// init sets the parameters of s, which must be new.
func (s *state) init(rate, burst, weight float64, global bool, sharedAt int64) {
	s.weight, s.global, s.sharedAt = weight, global, sharedAt
	r, b := rate*weight, burst*weight
	switch iv := 1e9 / r; {
	case !(r > 0) || iv >= maxInterval:
		s.interval = maxInterval
	case iv < 1:
		s.interval = 1
	default:
		s.interval = int64(math.Round(iv))
	}
	if !(b >= 1) { // NaN too
		b = 1
	}
	// Round, not truncate: a burst of 3 must hold 3 tokens, not 2.9999.
	if tol := math.Round(b * float64(s.interval)); tol < maxTol {
		s.tol = int64(tol)
	} else {
		s.tol = maxTol
	}
	s.quota = s.tol / s.interval
}

// tokens returns the tokens in s at now when its TAT is tat.
func (s *state) tokens(tat, now int64) float64 {
	debt := max(tat-now, 0)
	return max(float64(s.tol-debt)/float64(s.interval), 0)
}

// tatFor returns the TAT at which s holds tokens at now (at most full).
func (s *state) tatFor(tokens float64, now int64) int64 {
	// Round the debt up: a conversion must never add a token.
	debt := math.Ceil(float64(s.tol) - tokens*float64(s.interval))
	return now + int64(min(max(debt, 0), float64(s.tol)))
}

func (t *Table) newBucket(h uint64, l *Limit, key string, overflow bool, now int64) *Bucket {
	b := &Bucket{}
	b.hash, b.id, b.overflow, b.t = h, l.ID, overflow, t
	// Copy the key: it may alias request memory.
	if n := copy(b.keyBuf[:], key); n == len(key) {
		b.key = unsafe.String(&b.keyBuf[0], n)
	} else {
		b.key = strings.Clone(key)
	}
	s := &b.st0
	s.init(l.Rate, l.Burst, t.defaultWeight(l.Global), l.Global, now)
	s.tat.Store(now) // full
	b.state.Store(s)
	b.limit.Store(l)
	b.touched.Store(now >> touchShift)
	return b
}

// take takes a token from b at now. It returns false, having done nothing,
// if b has been evicted, or (rarely) if it raced with a change of b's state
// in a way that needs b to be looked up again.
func (b *Bucket) take(l *Limit, now int64) (Result, bool) {
	if b.limit.Load() != l {
		b.setLimit(l, now)
	}
	if tc := now >> touchShift; b.touched.Load() != tc {
		b.touched.Store(tc)
	}
	s := b.state.Load()
	for {
		tat := s.tat.Load()
		if tat == frozen {
			if s = s.next.Load(); s == nil {
				return Result{}, false
			}
			continue
		}
		if s.global && l.FailClosed && now-s.sharedAt > l.staleAfter() {
			b.count(&b.refused)
			return Result{Limit: s.quota, Reset: time.Duration(max(tat-now, 0)), RetryAfter: StaleRetryAfter}, true
		}
		next := max(tat, now) + s.interval
		if wait := next - now - s.tol; wait > 0 {
			if s.global {
				b.count(&b.refused)
			}
			return Result{Limit: s.quota, Reset: time.Duration(tat - now), RetryAfter: time.Duration(wait)}, true
		}
		if s.tat.CompareAndSwap(tat, next) {
			if s.global {
				b.count(&b.admitted)
			}
			return Result{
				Remaining: (s.tol - (next - now)) / s.interval,
				Limit:     s.quota,
				Reset:     time.Duration(next - now),
			}, true
		}
	}
}

// count adds one to c, one of b's counters, and makes sure that Collect
// will look at b.
func (b *Bucket) count(c *atomic.Uint64) {
	c.Add(1)
	// Collect clears dirty before it reads the counters, so a count made
	// after that read finds dirty clear, here, and lists b again.
	if !b.dirty.Load() {
		b.markDirty()
	}
}

// markDirty puts b on its shard's dirty list unless it is there already.
func (b *Bucket) markDirty() {
	if !b.dirty.CompareAndSwap(false, true) {
		return
	}
	// Having set dirty, this goroutine alone writes nextDirty until a
	// Collect takes b off the list.
	head := &b.t.shard(b.hash).dirty
	for {
		old := head.Load()
		b.nextDirty = old
		if head.CompareAndSwap(old, b) {
			return
		}
	}
}

// setLimit makes l b's Limit. If l's numbers differ from the last Limit's,
// b gets new parameters and keeps its tokens, up to the new burst; if
// Global changed too, the share starts afresh.
func (b *Bucket) setLimit(l *Limit, now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.limit.Load()
	if old == l {
		return
	}
	s := b.state.Load()
	if s.tat.Load() == frozen { // evicted
		return
	}
	if l.Rate != old.Rate || l.Burst != old.Burst || l.Global != old.Global {
		weight, sharedAt := s.weight, s.sharedAt
		if l.Global != s.global {
			weight, sharedAt = b.t.defaultWeight(l.Global), now
		}
		b.replace(s, newState(l.Rate, l.Burst, weight, l.Global, sharedAt), now, math.Inf(1))
	}
	b.limit.Store(l)
}

// Apply sets b's share of its global limit. From now on this node may
// admit weight×Rate tokens per second with a burst of max(1, weight×Burst),
// and b's current tokens are capped at max(0, weight×globalTokens): a
// share can only restrict; it never adds tokens beyond what the node's own
// refill gives. The tokens b holds carry over to the new burst; with a
// larger one, b refills up to it at the new rate.
//
// weight is clamped to [0, 1]; a NaN counts as 0. globalTokens may be
// negative (the fleet is in debt) or +Inf (no cap). Apply records now as
// the share's time, for FailClosed and StaleAfter; now must come from the
// Table's clock. Apply is meant for the buckets of global limits as
// returned by Collect; on an evicted bucket it does nothing.
func (b *Bucket) Apply(weight, globalTokens float64, now time.Time) {
	n := int64(now.Sub(b.t.epoch))
	if !(weight > 0) {
		weight = 0
	}
	weight = min(weight, 1)
	capped := weight * globalTokens
	if !(capped > 0) { // NaN (0×Inf) too
		capped = 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.state.Load()
	if s.tat.Load() == frozen { // evicted
		return
	}
	l := b.limit.Load()
	b.replace(s, newState(l.Rate, l.Burst, weight, s.global, n), n, capped)
}

// Reweigh changes b's share of its limit to weight between syncs, without
// capping its tokens and without counting as a share for FailClosed and
// StaleAfter: it is a syncer's local estimate, made from b's own recent
// demand, that the next Apply replaces. weight is clamped to [0, 1].
func (b *Bucket) Reweigh(weight float64) {
	if !(weight > 0) {
		weight = 0
	}
	weight = min(weight, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.state.Load()
	if s.tat.Load() == frozen || s.weight == weight {
		return
	}
	l := b.limit.Load()
	now := b.t.nanos()
	b.replace(s, newState(l.Rate, l.Burst, weight, s.global, s.sharedAt), now, math.Inf(1))
}

// Weight returns b's current share of its limit.
func (b *Bucket) Weight() float64 { return b.state.Load().weight }

// Pending returns b's counts since the last Collect without resetting
// them: the tokens taken and the Take calls (allowed and refused).
func (b *Bucket) Pending() (admitted, demand uint64) {
	a, r := b.admitted.Load(), b.refused.Load()
	return a, a + r
}

// replace makes ns b's state in place of s, with s's tokens at now, at
// most ns's burst and at most capped. The caller holds b.mu.
//
// ns is private until s is frozen, so its TAT can be set from s's at
// leisure; freezing s with a compare-and-swap against the TAT that ns was
// computed from makes sure that no Take on s is lost. A Take that finds s
// frozen follows s.next to ns, even before b.state points to it.
func (b *Bucket) replace(s, ns *state, now int64, capped float64) {
	s.next.Store(ns)
	for {
		tat := s.tat.Load()
		ns.tat.Store(ns.tatFor(min(s.tokens(tat, now), capped), now))
		if s.tat.CompareAndSwap(tat, frozen) {
			break
		}
	}
	b.state.Store(ns)
	s.next.Store(nil)
}

// evict freezes b for good if it is idle at now: untouched for idle ns,
// and full or with a share older than idle, and, when collecting, with no
// counts left for Collect. It reports whether it did. The caller holds
// b's shard's lock and takes b out of the index.
func (b *Bucket) evict(now, idle int64, collecting bool) bool {
	// touched is rounded down: the last Take may have been up to
	// 2^touchShift ns later.
	if (b.touched.Load()+1)<<touchShift > now-idle {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.state.Load()
	tat := s.tat.Load()
	if tat == frozen {
		return false
	}
	if tat > now && !(s.global && s.sharedAt <= now-idle) {
		return false
	}
	if s.global && collecting && b.admitted.Load()|b.refused.Load() != 0 {
		return false
	}
	// A Take that admits a call moves the TAT, so this fails if one came
	// in since the checks above. (A refusal does not; its count could be
	// lost only if it was stalled for idle after reading the clock.)
	return s.tat.CompareAndSwap(tat, frozen)
}
