package usage

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/portico-gw/portico/gateway/exchange"
)

// rowKey is what a row counts: a caller, a product, a route and a status
// class. The latency histograms use its caller and route.
type rowKey struct {
	keyID, appID, tenant, plan string
	product, route             string
	class                      uint8
}

// keyOf is x's row key.
func keyOf(x *exchange.Record) rowKey {
	k := rowKey{
		keyID:  x.Identity.KeyID,
		appID:  x.Identity.ClientID,
		tenant: x.Identity.Tenant,
		plan:   x.Identity.Plan,
	}
	if x.Route != nil {
		k.route = x.Route.ID
		if x.Route.Auth != nil {
			k.product = x.Route.Auth.Product
		}
	}
	if x.Status >= 100 && x.Status < 600 {
		k.class = uint8(x.Status / 100)
	}
	return k
}

// latKey is the key of k's latency histogram: its caller and route.
func (k *rowKey) latKey() rowKey {
	return rowKey{keyID: k.keyID, appID: k.appID, tenant: k.tenant, plan: k.plan, route: k.route}
}

// folded is the overflow row k folds into: its caller, product and class,
// with no route.
func (k *rowKey) folded() rowKey {
	f := *k
	f.route = ""
	return f
}

// clipped is k as a window may carry it: valid UTF-8 cut to the lengths
// quota.v1 allows, so that one odd id cannot get a window refused.
func (k rowKey) clipped() rowKey {
	k.keyID = clip(k.keyID, 128)
	k.appID = clip(k.appID, 256)
	k.tenant = clip(k.tenant, 128)
	k.plan = clip(k.plan, 128)
	k.product = clip(k.product, 128)
	k.route = clip(k.route, 256)
	return k
}

func clip(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (k *rowKey) hash(seed maphash.Seed) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, s := range [...]string{k.keyID, k.appID, k.tenant, k.plan, k.product, k.route} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	h.WriteByte(k.class)
	return h.Sum64()
}

// place is where a series counts in each half: the slot it was given, and
// the epoch of the window it was given it in. A slot is valid only while
// its half's epoch matches.
type place struct {
	epoch [2]atomic.Uint64
	slot  [2]atomic.Uint32
}

// series is one row the recorder has seen, with its latency histogram.
// Its key is never changed; its places are set under their half's lock.
type series struct {
	hash uint64
	next *series // another series whose key has the same hash
	key  rowKey
	row  place
	lat  *latSeries
}

type latSeries struct {
	hash  uint64
	next  *latSeries // another with the same hash
	key   rowKey     // a latKey
	place place
}

// registry finds the series of a row key. Lookups of the series it has
// published read an immutable map through an atomic pointer, taking no
// lock; a new series goes into a dirty map under mu, which is folded into
// a new published map once the misses since the last fold reach a
// quarter of its size (as sync.Map does), so the copying costs O(1) per
// new series on average.
type registry struct {
	seed maphash.Seed
	read atomic.Pointer[map[uint64]*series]

	mu     sync.Mutex
	dirty  map[uint64]*series
	lats   map[uint64]*latSeries // by the hash of their key
	misses int
	size   int // series in read and dirty
}

func newRegistry() *registry {
	g := &registry{seed: maphash.MakeSeed(), dirty: map[uint64]*series{}, lats: map[uint64]*latSeries{}}
	g.read.Store(&map[uint64]*series{})
	return g
}

// get returns the series of k, whose hash is h, adding it if it is new.
func (g *registry) get(h uint64, k *rowKey) *series {
	for s := (*g.read.Load())[h]; s != nil; s = s.next {
		if s.key == *k {
			return s
		}
	}
	return g.getSlow(h, k)
}

func (g *registry) getSlow(h uint64, k *rowKey) *series {
	g.mu.Lock()
	defer g.mu.Unlock()
	read := *g.read.Load()
	head := g.dirty[h]
	for s := head; s != nil; s = s.next {
		if s.key == *k {
			g.missed()
			return s
		}
	}
	if head == nil {
		head = read[h]
		for s := head; s != nil; s = s.next {
			if s.key == *k { // published since get looked
				return s
			}
		}
	}
	// Copy the strings: they may be slices of a larger buffer (a token)
	// that the series would otherwise keep alive.
	key := rowKey{
		keyID: strings.Clone(k.keyID), appID: strings.Clone(k.appID),
		tenant: strings.Clone(k.tenant), plan: strings.Clone(k.plan),
		product: strings.Clone(k.product), route: strings.Clone(k.route),
		class: k.class,
	}
	lk := key.latKey()
	lh := lk.hash(g.seed)
	ls := g.lats[lh]
	for ls != nil && ls.key != lk {
		ls = ls.next
	}
	if ls == nil {
		ls = &latSeries{hash: lh, next: g.lats[lh], key: lk}
		g.lats[lh] = ls
	}
	s := &series{hash: h, next: head, key: key, lat: ls}
	g.dirty[h] = s
	g.size++
	g.missed()
	return s
}

// missed counts a lookup that needed the lock, and publishes the dirty
// series once there have been enough. The caller holds mu.
func (g *registry) missed() {
	g.misses++
	if g.misses >= len(*g.read.Load())/4+32 {
		g.publish()
	}
}

// publish folds the dirty series into a new published map. The caller
// holds mu.
func (g *registry) publish() {
	if len(g.dirty) == 0 {
		g.misses = 0
		return
	}
	read := *g.read.Load()
	m := make(map[uint64]*series, len(read)+len(g.dirty))
	for h, s := range read {
		m[h] = s
	}
	for h, s := range g.dirty {
		m[h] = s
	}
	g.read.Store(&m)
	clear(g.dirty)
	g.misses = 0
}

// retain publishes everything, then drops the series for which live is
// false (a chain of same-hash series is kept if any of it is live), and
// the histograms no kept series uses. A caller that got a dropped series
// before may still count with it: that is correct, the window merges rows
// of equal keys. It returns how many series it dropped.
func (g *registry) retain(live func(*series) bool) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.publish()
	read := *g.read.Load()
	dead := 0
	for _, head := range read {
		keep := false
		n := 0
		for s := head; s != nil; s = s.next {
			keep = keep || live(s)
			n++
		}
		if !keep {
			dead += n
		}
	}
	if dead == 0 {
		return 0
	}
	m := make(map[uint64]*series, len(read))
	used := make(map[*latSeries]bool, len(g.lats))
	for h, head := range read {
		keep := false
		for s := head; s != nil; s = s.next {
			keep = keep || live(s)
		}
		if keep {
			m[h] = head
			for s := head; s != nil; s = s.next {
				used[s.lat] = true
			}
		}
	}
	g.read.Store(&m)
	// Keep a chain of histograms whole if any of it is used: its links
	// are not changed once made.
	for h, head := range g.lats {
		keep := false
		for ls := head; ls != nil; ls = ls.next {
			keep = keep || used[ls]
		}
		if !keep {
			delete(g.lats, h)
		}
	}
	g.size -= dead
	return dead
}

func (g *registry) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.size
}
