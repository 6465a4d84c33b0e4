// Package routestats counts, per route, the calls a node forwarded, those
// that failed on the server side (HTTP 5xx; gRPC UNKNOWN, DEADLINE_EXCEEDED,
// INTERNAL, UNAVAILABLE, DATA_LOSS), and a histogram of their latency. The
// control plane compares these between nodes running a new version and
// nodes still on the old one while it rolls a change out. Apart from
// them it counts the calls the gateway refused before forwarding them
// (credentials, limits, sizes, validation), which say nothing about the
// route's backend and are never judged.
//
// Counters only grow; a reader takes a Counts and subtracts the previous
// one. Observe is on the request path: a few atomic adds on one of a
// route's shards, no locks, no allocation.
package routestats

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds are the upper bounds of the latency buckets but the last, which
// holds everything slower: 1 ms doubling to 8.192 s.
var Bounds = [NumBuckets - 1]time.Duration{
	1 * time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond,
	16 * time.Millisecond, 32 * time.Millisecond, 64 * time.Millisecond, 128 * time.Millisecond,
	256 * time.Millisecond, 512 * time.Millisecond, 1024 * time.Millisecond, 2048 * time.Millisecond,
	4096 * time.Millisecond, 8192 * time.Millisecond,
}

// NumBuckets is the number of latency buckets.
const NumBuckets = 15

// shards spreads a busy route's counters over cache lines, so cores do
// not queue on one.
const shards = 4

// Route is one route's counters. The zero value is ready; it must not be
// copied after first use.
type Route struct {
	shards [shards]shard
}

type shard struct {
	requests, errors, refused atomic.Uint64
	buckets                   [NumBuckets]atomic.Uint64
	_                         [64 - (3+NumBuckets)*8%64]byte // to a cache line boundary
}

// Observe counts one call that took d; failed says the server side failed
// it. Safe for concurrent use.
func (r *Route) Observe(failed bool, d time.Duration) {
	// The duration's low bits pick the shard: random enough, and free.
	s := &r.shards[uint64(d>>6)%shards]
	s.requests.Add(1)
	if failed {
		s.errors.Add(1)
	}
	s.buckets[Bucket(d)].Add(1)
}

// Refused counts one call the gateway answered itself before forwarding
// it, d after it arrived. Safe for concurrent use.
func (r *Route) Refused(d time.Duration) {
	r.shards[uint64(d>>6)%shards].refused.Add(1)
}

// Bucket is the index of the latency bucket d falls in: that of the first
// bound d does not exceed, or NumBuckets-1 when d exceeds them all. The
// bounds double from 1 ms, so it is the bit length of d in whole
// milliseconds, rounded up, minus one. Other counters of latency (usage
// windows) use it so that their histograms match these.
func Bucket(d time.Duration) int {
	if d <= time.Millisecond {
		return 0
	}
	ms := uint64((d + time.Millisecond - 1) / time.Millisecond)
	return min(bits.Len64(ms-1), NumBuckets-1)
}

// Counts are a route's counters at one moment, or the difference of two.
// Requests, Errors and Buckets are the forwarded calls; Refused the calls
// the gateway answered itself before forwarding them.
type Counts struct {
	Requests, Errors uint64
	Buckets          [NumBuckets]uint64
	Refused          uint64
}

// Counts sums the shards.
func (r *Route) Counts() Counts {
	var c Counts
	for i := range r.shards {
		s := &r.shards[i]
		c.Requests += s.requests.Load()
		c.Errors += s.errors.Load()
		c.Refused += s.refused.Load()
		for b := range c.Buckets {
			c.Buckets[b] += s.buckets[b].Load()
		}
	}
	return c
}

// Sub returns c minus an earlier prev of the same counters.
func (c Counts) Sub(prev Counts) Counts {
	c.Requests -= prev.Requests
	c.Errors -= prev.Errors
	c.Refused -= prev.Refused
	for b := range c.Buckets {
		c.Buckets[b] -= prev.Buckets[b]
	}
	return c
}

// Add returns c plus o.
func (c Counts) Add(o Counts) Counts {
	c.Requests += o.Requests
	c.Errors += o.Errors
	c.Refused += o.Refused
	for b := range c.Buckets {
		c.Buckets[b] += o.Buckets[b]
	}
	return c
}

// Quantile returns the upper bound of the bucket holding the q-th
// quantile (0 < q <= 1) of the latencies: an over-estimate by at most
// the bucket's width; 0 with no calls. The last bucket reports twice the
// last bound.
func (c Counts) Quantile(q float64) time.Duration {
	var total uint64
	for _, n := range c.Buckets {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total) + 0.5)
	rank = max(rank, 1)
	var seen uint64
	for b, n := range c.Buckets {
		seen += n
		if seen >= rank {
			if b < len(Bounds) {
				return Bounds[b]
			}
			break
		}
	}
	return 2 * Bounds[len(Bounds)-1]
}

// Registry holds the counters of a node's routes by route id, across
// snapshots: a route keeps its counters while its id stays.
type Registry struct {
	mu     sync.Mutex
	routes map[string]*Route
}

// Routes returns the counters of ids, in order, and forgets every other
// route: called with each new snapshot's routes.
func (g *Registry) Routes(ids []string) []*Route {
	g.mu.Lock()
	defer g.mu.Unlock()
	next := make(map[string]*Route, len(ids))
	out := make([]*Route, len(ids))
	for i, id := range ids {
		r := next[id]
		if r == nil {
			if r = g.routes[id]; r == nil {
				r = new(Route)
			}
			next[id] = r
		}
		out[i] = r
	}
	g.routes = next
	return out
}

// Route returns the counters of id, new ones if the registry has none:
// for counters made as routes need them, not per snapshot (a node's
// probes, which only the routes being rolled out get).
func (g *Registry) Route(id string) *Route {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.routes[id]
	if r == nil {
		if g.routes == nil {
			g.routes = map[string]*Route{}
		}
		r = new(Route)
		g.routes[id] = r
	}
	return r
}

// Retain forgets every route whose id is not one of ids: called with each
// new snapshot's routes, for a registry that Route fills.
func (g *Registry) Retain(ids []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.routes) == 0 {
		return
	}
	keep := make(map[string]bool, len(ids))
	for _, id := range ids {
		keep[id] = true
	}
	for id := range g.routes {
		if !keep[id] {
			delete(g.routes, id)
		}
	}
}

// Each calls fn with every route's id and counters.
func (g *Registry) Each(fn func(id string, c Counts)) {
	g.mu.Lock()
	routes := make(map[string]*Route, len(g.routes))
	for id, r := range g.routes {
		routes[id] = r
	}
	g.mu.Unlock()
	for id, r := range routes {
		fn(id, r.Counts())
	}
}
