package redissync

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// tags is how many hash tags buckets are spread over. It is part of the
// layout in Redis: every node of a fleet must agree on it, so changing it
// orphans every bucket (they expire, and the limits restart full).
const tags = 1024

// call is one script call: buckets that share a hash tag (on a sharded
// client) or any buckets (on a single server).
type call struct {
	keys []string
	args []any
	idx  []int // the report behind each key
	cmd  *redis.Cmd
}

// tag returns key's hash tag, in [0, tags): FNV-1a, which is cheap and
// spreads short, similar keys well.
func tag(key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % tags)
}

const hexDigits = "0123456789abcdef"

// RedisKey returns the name of the Redis hash that holds key's global
// bucket, for operators and tests.
func (s *Syncer) RedisKey(key string) string {
	return s.redisKey(key, tag(key))
}

func (s *Syncer) redisKey(key string, t int) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + 5 + len(key))
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.WriteByte(hexDigits[t>>8&0xf])
	b.WriteByte(hexDigits[t>>4&0xf])
	b.WriteByte(hexDigits[t&0xf])
	b.WriteByte('}')
	b.WriteString(key)
	return b.String()
}

// plan groups reports into script calls.
func (s *Syncer) plan(reports []Report) []*call {
	tagOf := make([]int, len(reports))
	for i, r := range reports {
		tagOf[i] = tag(r.Key)
	}
	// order lists report indices grouped by tag (counting sort); groups
	// are its runs. A single server takes any keys together.
	order := make([]int, len(reports))
	var groups [][]int
	if !s.sharded {
		for i := range order {
			order[i] = i
		}
		groups = [][]int{order}
	} else {
		var start [tags + 1]int
		for _, t := range tagOf {
			start[t+1]++
		}
		for t := 1; t <= tags; t++ {
			start[t] += start[t-1]
		}
		next := start
		for i, t := range tagOf {
			order[next[t]] = i
			next[t]++
		}
		for t := range tags {
			if start[t] < start[t+1] {
				groups = append(groups, order[start[t]:start[t+1]])
			}
		}
	}

	var calls []*call
	for _, g := range groups {
		for len(g) > 0 {
			n := min(len(g), maxKeysPerCall)
			c := &call{
				keys: make([]string, n),
				args: make([]any, 3, 3+5*n),
				idx:  g[:n],
			}
			c.args[0], c.args[1], c.args[2] = s.node, s.interval, s.ttl
			for j, i := range c.idx {
				r := &reports[i]
				c.keys[j] = s.redisKey(r.Key, tagOf[i])
				current := r.Current
				if !(current > 0) || math.IsInf(current, 0) { // unknown, NaN
					current = -1
				}
				c.args = append(c.args, r.Rate, r.Burst, r.Admitted, r.Demand, current)
			}
			calls = append(calls, c)
			g = g[n:]
		}
	}
	return calls
}

// err returns the call's error, with context.
func (c *call) err() error {
	if err := c.cmd.Err(); err != nil {
		return fmt.Errorf("redissync: sync %d buckets: %w", len(c.keys), err)
	}
	return nil
}

// decode stores the call's shares in shares, by report index.
func (c *call) decode(shares []Share) error {
	vals, err := c.cmd.StringSlice()
	if err != nil {
		return fmt.Errorf("redissync: sync %d buckets: %w", len(c.keys), err)
	}
	if len(vals) != 3*len(c.keys) {
		return fmt.Errorf("redissync: script returned %d values for %d buckets", len(vals), len(c.keys))
	}
	for j, i := range c.idx {
		w, werr := strconv.ParseFloat(vals[3*j], 64)
		tokens, terr := strconv.ParseFloat(vals[3*j+1], 64)
		others, oerr := strconv.ParseFloat(vals[3*j+2], 64)
		if werr != nil || terr != nil || oerr != nil {
			return fmt.Errorf("redissync: script returned %q, %q, %q for bucket %q", vals[3*j], vals[3*j+1], vals[3*j+2], c.keys[j])
		}
		shares[i] = Share{Weight: w, Tokens: tokens, Others: others}
	}
	return nil
}
