package jwt

import (
	"encoding/binary"
	"sync"
	"time"
)

// cacheTTL is the longest a verified token is trusted without verifying
// it again.
const cacheTTL = 60 * time.Second

// defaultCacheSize is the entry count when Options.CacheSize is 0.
const defaultCacheSize = 65536

// entry is a verified token. It is immutable once cached.
type entry struct {
	claims Claims
	// iss and key are what verified the token. A hit counts only while
	// the current snapshot still has this very issuer (its config
	// unchanged) and key (still published under its kid).
	iss *issuer
	key *key
	// iat feeds the deny list, which is checked on every hit.
	iat    float64
	hasIat bool
	// until is when the entry lapses, in Unix nanoseconds: the token's exp
	// plus leeway, or cacheTTL after verification, whichever is first.
	until int64
}

// cache holds verified tokens by the SHA-256 of the token. It is sharded
// so that cores rarely meet on a lock, and bounded: a full shard evicts an
// arbitrary entry (Go randomises where map iteration starts), so a flood of
// distinct valid tokens costs bounded memory and needs no bookkeeping on
// hits.
type cache struct {
	shards   []cacheShard
	mask     uint64
	perShard int
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[[32]byte]*entry
	_  [32]byte // keep shards on separate cache lines
}

func newCache(size int) *cache {
	n := 1
	for n < 64 && n*32 <= size {
		n *= 2
	}
	c := &cache{shards: make([]cacheShard, n), mask: uint64(n - 1), perShard: max(size/n, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[[32]byte]*entry)
	}
	return c
}

func (c *cache) shard(sum *[32]byte) *cacheShard {
	return &c.shards[binary.LittleEndian.Uint64(sum[:8])&c.mask]
}

func (c *cache) get(sum *[32]byte) *entry {
	s := c.shard(sum)
	s.mu.RLock()
	e := s.m[*sum]
	s.mu.RUnlock()
	return e
}

func (c *cache) put(sum *[32]byte, e *entry) {
	s := c.shard(sum)
	s.mu.Lock()
	if len(s.m) >= c.perShard {
		if _, ok := s.m[*sum]; !ok {
			for k := range s.m {
				delete(s.m, k)
				break
			}
		}
	}
	s.m[*sum] = e
	s.mu.Unlock()
}

// remove drops the entry for sum if it is still e.
func (c *cache) remove(sum *[32]byte, e *entry) {
	s := c.shard(sum)
	s.mu.Lock()
	if s.m[*sum] == e {
		delete(s.m, *sum)
	}
	s.mu.Unlock()
}

func (c *cache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
