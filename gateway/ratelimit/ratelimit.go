// Package ratelimit holds the gateway's node-local token buckets: a Table
// maps a limit and a key (an app, a caller, a client IP) to a Bucket, and
// Table.Take admits or refuses one call against it in memory, on the
// request path, without a lock and without allocating once the bucket
// exists.
//
// # Buckets
//
// A bucket runs GCRA, the generic cell rate algorithm. With an emission
// interval I (the nanoseconds one token takes to refill, 1s/rate) and a
// tolerance τ = burst×I, it holds a single number, the theoretical arrival
// time (TAT): the instant at which it will be full again. A call at now is
// admitted when max(TAT, now)+I−now ≤ τ, and then moves TAT to
// max(TAT, now)+I with one compare-and-swap; a refusal writes nothing. The
// tokens left, the time to full and the wait for the next token all follow
// from TAT−now, so a bucket needs no refill timer and no lock.
//
// I and τ live with the TAT in an immutable state value behind an atomic
// pointer. Changing them (a new share, or new numbers for the limit)
// builds a new state that carries the tokens over, then freezes the old
// TAT with a sentinel in one compare-and-swap so that no token is taken
// from a superseded state; a Take that meets the sentinel follows the old
// state to its successor. Changes to one bucket are serialised by its own
// mutex, which Take never touches.
//
// # Global limits
//
// A Limit's numbers are fleet-wide. A non-global limit (the per-IP bucket
// of anonymous routes) is enforced by each node alone at the full Rate and
// Burst. For a global limit each node holds a share: until it has one, a
// weight of 1/ExpectedNodes. A syncer (redissync.Runner, over Redis) runs
// this loop every sync interval:
//
//  1. Collect returns, for every global bucket with activity since the
//     previous Collect, the tokens it admitted and the calls it saw, and
//     resets those counts.
//  2. The syncer reports them to the fleet's shared store and gets back,
//     per bucket, a weight (this node's part of the limit) and the tokens
//     left fleet-wide.
//  3. Bucket.Apply installs the weight and caps the bucket's tokens at its
//     part of the fleet's tokens. It also dates the share: a FailClosed
//     limit refuses every call once its share is older than StaleAfter.
//
// Between syncs the syncer may re-estimate a bucket's weight from its own
// recent demand (Pending, then Reweigh), which neither caps tokens nor
// dates the share, and sync a few buckets early (Bucket.Collect is
// Collect for one bucket).
//
// Take counts the calls of global buckets and lists each bucket with
// counts once, so Collect visits the active buckets only. The syncer
// should call Collect even while the store is unreachable, keeping the
// reports for the next round: if nobody collects for IdleAfter, the
// evictor drops the lists (they would keep evicted buckets alive) and stops
// waiting for counts to be read before evicting, and the next Collect
// visits every bucket.
//
// # Memory
//
// Buckets are found through 256 shards, picked by a 64-bit hash of the
// limit ID and the key (hash/maphash; a Limit caches its ID's hash, and
// the key's is seeded per Table). Each shard is an
// open-addressing table of bucket pointers that readers probe with atomic
// loads only: a lookup writes no shared memory, so cores never contend on
// the index, only on a bucket they share. Writers (a new bucket, eviction)
// take the shard's mutex and publish a grown or compacted table with one
// atomic store.
//
// A bucket is one heap object of 256 bytes that holds its first state and
// a key of up to 64 bytes; a change of share or of limit adds a 64-byte
// state, a longer key a copy of its own. Every garbage collection marks
// them all: at a million buckets, some 1 to 2 million objects.
//
// Memory is bounded by Options.MaxBuckets. Once the table holds that many,
// a key without a bucket shares its limit's single overflow bucket until
// eviction frees room: every such key then draws on one key's allowance.
// That is strict on purpose: a flood of new keys (random client IPs, say)
// must not buy itself fresh bursts.
//
// # Eviction
//
// A goroutine started by NewTable and stopped by Close sweeps the table
// every IdleAfter/4. It evicts a bucket that nobody has taken from for
// IdleAfter and that is full, so that forgetting it gives nothing away: a
// caller who comes back gets the full bucket they would have had anyway. A
// global bucket is also evicted, full or not, once its share has not been
// refreshed for IdleAfter (the syncer stops applying shares to buckets
// without activity). A global bucket with counts not yet collected is
// kept while a syncer is collecting (a Collect within IdleAfter).
//
// # Time
//
// Buckets run on nanoseconds since the Table was made, read from the
// monotonic clock (or from Options.Now, which tests drive by hand).
package ratelimit

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Limit is one compiled rate limit policy. A Table reads but never
// modifies it; do not change or copy a Limit after passing it to Take,
// build a new one instead (a new snapshot's limits are new values).
type Limit struct {
	// ID identifies the limit across snapshots, e.g. "plan/gold/default" or
	// "route/orders-create/writes". Buckets of an unchanged ID survive a
	// snapshot swap: a bucket is found by ID and key, and the first Take
	// with a Limit whose Rate, Burst or Global differ from the bucket's
	// re-parameterises it, carrying its tokens over (capped at the new
	// burst). While Takes with the old and the new Limit interleave, the
	// latest one sets the numbers.
	ID string
	// Name is the policy name shown in the RateLimit-Policy header.
	Name string
	// Rate is the refill in tokens per second over the whole fleet; it must
	// be > 0 (a bucket with no positive rate refills once every 13 days).
	// Rates above a few million per second lose precision: a token's
	// interval is a whole number of nanoseconds.
	Rate float64
	// Burst is the bucket size over the whole fleet; it must be >= 1 (less
	// counts as 1).
	Burst float64
	// Global limits are shared across nodes. A node with no share yet uses
	// Rate/ExpectedNodes and Burst/ExpectedNodes (at least 1 token of
	// burst). Non-global limits (e.g. the per-client-IP bucket of anonymous
	// routes) are node-local: full Rate and Burst, and never in Collect.
	Global bool
	// FailClosed makes a global limit refuse every call while the node's
	// share is older than StaleAfter, that is while sync is failing. By
	// default (false) a node keeps using its last share. A new bucket
	// counts as shared when it is made, so it has StaleAfter to get its
	// first share.
	FailClosed bool
	// StaleAfter is the age at which a FailClosed limit's share is stale;
	// zero means DefaultStaleAfter.
	StaleAfter time.Duration

	// hid caches the hash of ID (idSeed), made by the first Take; 0 until
	// then.
	hid atomic.Uint64
}

// idSeed seeds the hashes of limit IDs, which a Limit caches for every
// Table it is used with.
var idSeed = maphash.MakeSeed()

// idHash returns the hash of l.ID, never 0.
func (l *Limit) idHash() uint64 {
	if h := l.hid.Load(); h != 0 {
		return h
	}
	h := maphash.String(idSeed, l.ID) | 1
	l.hid.Store(h)
	return h
}

// DefaultStaleAfter is the StaleAfter of a Limit that leaves it zero.
const DefaultStaleAfter = 5 * time.Second

// staleAfter returns l's StaleAfter in nanoseconds.
func (l *Limit) staleAfter() int64 {
	if l.StaleAfter <= 0 {
		return int64(DefaultStaleAfter)
	}
	return int64(l.StaleAfter)
}

// Options configure a Table. The zero value is ready to use.
type Options struct {
	// ExpectedNodes is the number of nodes a global limit is split across
	// before a node has its share; 0 means 1.
	ExpectedNodes int
	// MaxBuckets bounds the buckets in memory; 0 means 1,000,000. Each
	// bucket takes about 300 bytes (see the package documentation). Beyond the bound, new keys
	// share their limit's overflow bucket (see the package documentation),
	// so Len may exceed MaxBuckets by one overflow bucket per limit.
	MaxBuckets int
	// IdleAfter is how long a bucket must go untouched before it is
	// evicted; 0 means 60 s.
	IdleAfter time.Duration
	// Now is the clock; nil means time.Now. Tests inject one to drive time.
	// It must not go backwards by much: a bucket that sees the clock go
	// back refuses as if the time had not yet come.
	Now func() time.Time
}

// Defaults of the zero Options.
const (
	defaultMaxBuckets = 1_000_000
	defaultIdleAfter  = 60 * time.Second
)

// shardBits is log2 of the number of index shards.
const shardBits = 8

// Table is a node's rate limit buckets. Its methods are safe for
// concurrent use. Make one with NewTable, use it, and Close it to stop its
// evictor.
type Table struct {
	shards [1 << shardBits]shard

	seed     maphash.Seed
	epoch    time.Time
	clock    func() time.Time // nil: time.Since(epoch)
	nodes    atomic.Int64     // expected nodes, >= 1; see SetExpectedNodes
	max      int64
	idle     int64 // ns
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}

	_ cacheLinePad
	// count is the number of buckets in the index, overflow buckets
	// included. It is written only when buckets come and go.
	count atomic.Int64
	// lastCollect is when Collect last ran, ns; never is far in the past.
	lastCollect atomic.Int64
	// collectMu serialises Collect and the dropping of the dirty lists.
	collectMu sync.Mutex
	_         cacheLinePad
}

// cacheLinePad keeps the fields around it on cache lines of their own.
type cacheLinePad struct{ _ [64]byte }

// NewTable returns an empty Table and starts its evictor; Close stops it.
func NewTable(opts Options) *Table {
	t := &Table{
		seed:  maphash.MakeSeed(),
		clock: opts.Now,
		max:   int64(opts.MaxBuckets),
		idle:  int64(opts.IdleAfter),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	t.SetExpectedNodes(opts.ExpectedNodes)
	if t.max <= 0 {
		t.max = defaultMaxBuckets
	}
	if t.idle <= 0 {
		t.idle = int64(defaultIdleAfter)
	}
	if t.clock != nil {
		t.epoch = t.clock()
	} else {
		t.epoch = time.Now()
	}
	t.lastCollect.Store(math.MinInt64 / 2)
	for i := range t.shards {
		t.shards[i].init()
	}
	go t.evictLoop(time.Duration(max(t.idle/4, int64(time.Millisecond))))
	return t
}

// Close stops the evictor and waits for it to return. The Table stays
// usable, but idle buckets are no longer evicted. Close may be called more
// than once.
func (t *Table) Close() {
	t.stopOnce.Do(func() { close(t.stop) })
	<-t.done
}

// Len returns the number of buckets in the table, overflow buckets
// included.
func (t *Table) Len() int {
	return int(t.count.Load())
}

// Result is the outcome of one Take.
//
// It has four fields, no more, so that the compiler keeps it in registers:
// with a fifth (an Allowed flag, say) each return copies it through memory
// in a way that stalls store forwarding, which cost Take some 20 ns.
type Result struct {
	// Remaining is the whole tokens left after this take (>= 0).
	Remaining int64
	// Limit is the bucket's burst as a whole number of tokens: this node's
	// part of the limit's Burst (for the header's quota).
	Limit int64
	// Reset is the time until the bucket is full again.
	Reset time.Duration
	// RetryAfter is, for a refused call, the time until one token is
	// available; 0 when allowed. A call refused for a stale share
	// (FailClosed) is told to retry after StaleRetryAfter.
	RetryAfter time.Duration
}

// Allowed reports whether the call was admitted: a refused call always
// has a RetryAfter.
func (r Result) Allowed() bool { return r.RetryAfter == 0 }

// StaleRetryAfter is the RetryAfter of a call refused because its
// FailClosed limit's share is stale: when sync will recover is unknown, so
// it is the smallest wait a Retry-After header can say.
const StaleRetryAfter = time.Second

// Take takes one token from the bucket of (l, key), creating the bucket on
// first use, and reports whether the call is admitted. It reads the clock
// once. It does not block and, once the bucket exists, does not allocate.
// key may alias request memory: a new bucket keeps a copy.
func (t *Table) Take(l *Limit, key string) Result {
	return t.take(l, key, t.nanos())
}

// TakeAt is Take at now, for a caller that has already read the clock (a
// request's arrival time): a clock read can cost as much as the rest of
// Take. now must come from the Table's clock (time.Now, or Options.Now),
// and should be recent: a bucket measures time from it.
func (t *Table) TakeAt(l *Limit, key string, now time.Time) Result {
	return t.take(l, key, int64(now.Sub(t.epoch)))
}

// Now reads the Table's clock: Options.Now, or time.Now. What a syncer
// passes to Bucket.Apply, and a caller to TakeAt, must come from it.
func (t *Table) Now() time.Time {
	if t.clock == nil {
		return time.Now()
	}
	return t.clock()
}

// nanos reads the Table's clock: nanoseconds since the Table was made.
func (t *Table) nanos() int64 {
	if t.clock == nil {
		return int64(time.Since(t.epoch))
	}
	return int64(t.clock().Sub(t.epoch))
}

// mixK spreads the limit ID's hash before it is combined with the key's,
// so that (id, key) and (key, id) hash apart.
const mixK = 0x9e3779b97f4a7c15

// overflowSalt stands for the key in the hash of a limit's overflow bucket.
const overflowSalt = 0x5bd1e9955bd1e995

func (t *Table) take(l *Limit, key string, now int64) Result {
	h, hid := t.hash(l, key)
	b := t.shard(h).find(h, l, key, false)
	for {
		if b == nil {
			b = t.create(h, hid, l, key, now)
		}
		if r, ok := b.take(l, now); ok {
			return r
		}
		// b was evicted after we found it, or its state changed under
		// us. create looks again under the shard's lock, which the
		// evictor holds until b is out of the index.
		b = nil
	}
}

// hash returns the index hash of (l.ID, key) and the hash of l.ID alone.
func (t *Table) hash(l *Limit, key string) (h, hid uint64) {
	hid = l.idHash()
	return hid*mixK ^ maphash.String(t.seed, key), hid
}

func (t *Table) shard(h uint64) *shard {
	return &t.shards[h>>(64-shardBits)]
}

// create returns the bucket of (l, key), making it unless the table is
// full, in which case it returns l's overflow bucket.
func (t *Table) create(h, hid uint64, l *Limit, key string, now int64) *Bucket {
	sh := t.shard(h)
	sh.mu.Lock()
	b := sh.find(h, l, key, false)
	if b == nil && t.count.Load() < t.max {
		t.count.Add(1)
		b = t.newBucket(h, l, key, false, now)
		sh.insert(b)
	}
	sh.mu.Unlock()
	if b != nil {
		return b
	}
	h = hid*mixK ^ overflowSalt
	sh = t.shard(h)
	if b := sh.find(h, l, "", true); b != nil {
		return b
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b = sh.find(h, l, "", true)
	if b == nil {
		t.count.Add(1)
		b = t.newBucket(h, l, "", true, now)
		sh.insert(b)
	}
	return b
}

// SetExpectedNodes changes the number of nodes a global limit is split
// across before a share arrives (at least 1). Buckets made from then on
// start with the new weight; buckets that exist keep theirs until the next
// Apply.
func (t *Table) SetExpectedNodes(n int) {
	t.nodes.Store(int64(max(n, 1)))
}

// defaultWeight is the share of a bucket that has had none applied.
func (t *Table) defaultWeight(global bool) float64 {
	if global {
		return 1 / float64(t.nodes.Load())
	}
	return 1
}
