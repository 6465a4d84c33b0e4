package gateway

import (
	"github.com/redis/go-redis/v9"
)

// RateLimitOptions configure the node's rate limit buckets.
type RateLimitOptions struct {
	// Redis, when set, shares the global limits with the rest of the fleet:
	// every sync interval the node reports what its buckets admitted and
	// takes back its share (gateway/ratelimit/redissync). Nil means this
	// node's buckets are the whole truth, as for a single node.
	Redis redis.UniversalClient
	// NodeID names this node in Redis; it must be unique in the fleet.
	NodeID string
	// MaxBuckets bounds the buckets in memory; 0 means the default.
	MaxBuckets int
}
