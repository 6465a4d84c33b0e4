// Package redissync shares global rate limits among the gateway nodes of a
// fleet through Redis.
//
// Every node enforces a global limit with a local token bucket and, once
// per Interval, makes one pipelined round trip per Redis shard: for every
// bucket it used, it reports what it admitted and what was demanded of it
// since its previous report, and gets back its share of the limit (a
// weight) and the global bucket's level. A node then runs its local bucket
// at Rate×Weight until the next sync. Nodes never talk to each other, and
// Redis is off the request path: when it is slow or down a node keeps its
// last shares.
//
// # State in Redis
//
// Each bucket is one Redis hash, named Prefix + "{" + tag + "}" + Key,
// where tag is three hex digits of a hash of Key (1,024 values). The tag
// keeps all of a bucket's data in one hash slot and spreads buckets over
// the slots of a Redis Cluster, while letting one script call carry every
// bucket of a tag. The hash holds:
//
//   - t, u: the global bucket's tokens T (negative when the fleet is in
//     debt) and the time u of its last refill;
//   - x: when the key's expiry was last pushed back;
//   - n<node>: for each node that reported recently, E, the EWMA of its
//     demand rate in requests per second, a, the time of its last report,
//     and R, its demand rate at that report.
//
// All times are Redis's clock (TIME; scripts replicate their effects, so
// replicas agree), so the nodes' clocks do not matter. Reports keep the
// key alive for TTL = max(10 s, 10 intervals): limits nobody uses
// disappear. (The expiry is pushed back at most every TTL/10, recorded in
// a field x, because PEXPIRE is a good part of a report's cost in Redis;
// a bucket so expires 0.9 to 1 TTL after its last report.)
//
// # The maths
//
// A report from node m at time t, for a limit of rate r tokens/s and burst
// b, with A tokens admitted and D requests demanded (admitted or refused)
// since m's previous report, does, atomically, with I the sync interval:
//
//	T ← min(b, T + r·(t − u)) − A, but not below −b;  u ← t
//	drop every node n with t − a_n > 5·I
//	R = the report's Current rate if given, else D/Δ (D/I for a new node)
//	E_m ← R                                     if m is new (or was dropped)
//	E_m ← E_m + α·(R − E_m)                     otherwise, where
//	       Δ = t − a_m,  α = 1 − exp(−Δ/τ),  τ = I/8
//	a_m ← t,  R_m ← R
//	O_m = Σ_{n≠m} max(R_n + (E_n − R_n)·exp(−(t − a_n)/τ), ε)
//	                                            over the other live nodes, ε = 0.001/s
//	Weight_m = max(R, ε) / (max(R, ε) + O_m)
//	Tokens_m = T,  Others_m = O_m
//
// D/Δ is m's demand rate over the real time since its last report, so a
// late or skipped sync (whose report covers more time) is weighed
// correctly, and α makes the average decay by time, not by report count.
// The first report of a node counts at full weight, against the others'
// current averages, so a node that joins gets its share at once. The
// weights of the live nodes sum to one, up to the few milliseconds between
// the nodes' reports; ε keeps every weight above zero and splits the limit
// evenly when nobody has demand. A node that stops reporting keeps its
// share for at most 5 intervals, then the others' weights renormalise.
//
// # Why demand, not admitted
//
// Weighting by what nodes admitted would be self-fulfilling: a node with a
// small share admits little, reports little and keeps its small share, so
// shares would stay wherever they started when traffic moves. Demand
// counts what a node was asked for, refusals included, independent of its
// current share, so the weights track the offered load: the fixed point is
// Weight_n = D_n / ΣD, the split in which every node's share matches its
// traffic. A node's own weight uses its demand as it is now (D/Δ, or the
// Current rate the Runner measured) against the
// others' averages, so a node whose traffic jumps gets its share at that
// report; the others see the move through its average, which closes
// 1 − e^(−Δ/τ) of the gap per report, τ = I/8. A node reads each other
// node's average as it stands now, having kept decaying towards that
// node's last reported rate since its report: read as it stood at the
// report, an average stays put for up to an interval after a move, and a
// fleet admitted 0.85 to 0.9 of a 1,000/s limit in the second demand moved
// (TestAccuracy). The time constant is short on purpose: with τ = 2·I and
// regular syncs only, that second admitted 70 %; one interval's demand at
// the rates where limits matter is already a stable signal. The global
// bucket's debt (Tokens < 0) charges any overshoot back at the next sync.
//
// # Failures
//
// Sync either returns every share or an error. A round trip that fails
// may still have been applied by Redis, in whole or in part; a caller that
// folds the counts of a failed sync into its next report (as it should, or
// traffic admitted during an outage would never be charged) may then
// charge some twice, which errs on the side of refusing.
package redissync

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults for the zero Options.
const (
	DefaultInterval = 500 * time.Millisecond
	DefaultTimeout  = 50 * time.Millisecond
	DefaultPrefix   = "portico:rl:"
)

// maxKeysPerCall bounds the buckets of one script call, so that one call
// never blocks Redis for long (a few milliseconds at most).
const maxKeysPerCall = 500

// minTTL is the shortest time a bucket outlives its last report.
const minTTL = 10 * time.Second

//go:embed sync.lua
var source string

var script = redis.NewScript(source)

// Report is one bucket's activity on this node since the node's previous
// report of it.
type Report struct {
	// Key is the bucket's identity, e.g. "plan/gold/default\x00app-42":
	// any bytes. Every node must use the same Key for the same limit.
	Key string
	// Rate is the limit's fleet-wide refill rate, in tokens per second.
	Rate float64
	// Burst is the limit's fleet-wide bucket size, in tokens.
	Burst float64
	// Admitted is how many tokens this node took since its previous report
	// of Key.
	Admitted uint64
	// Demand is how many requests this node saw for Key since then,
	// admitted or refused.
	Demand uint64
	// Current, when positive, is the node's own measure of its demand rate
	// for Key, in requests per second, and replaces Demand/Δ. The Runner
	// gives its rate over its most recent moments when it has one (after
	// traffic moves, Demand spread over the whole time since the last
	// report would mix the rates before and after), and otherwise Demand
	// over the time the report covers on the node's clock: Redis measures
	// Δ between the node's script calls, which a delayed round trip
	// stretches or squeezes. Zero or negative means unknown.
	Current float64
}

// Share is what a node may use of one limit until its next sync.
type Share struct {
	// Weight is this node's fraction of the limit, in (0, 1].
	Weight float64
	// Tokens is the global bucket's level after this node's report; it is
	// negative when the fleet has taken more than the limit (debt).
	Tokens float64
	// Others is the other live nodes' smoothed demand, in requests per
	// second (Σ max(E_n, ε) over n ≠ m): with it a node can re-estimate
	// its weight from its own demand between syncs (see Runner).
	Others float64
}

// Options configure a Syncer. The zero value works.
type Options struct {
	// Node identifies this node; it must be unique in the fleet and
	// should be stable across syncs. Default: host name and process id.
	Node string
	// Interval is how often the caller syncs; default DefaultInterval.
	// All nodes of a fleet must use the same Interval: it sets the time
	// constant of the demand averages, when a silent node is dropped and
	// when an unused bucket expires.
	Interval time.Duration
	// Timeout bounds each Sync; default DefaultTimeout. A round trip's
	// time grows with the buckets it carries to one shard: each costs
	// Redis some microseconds (about 9 on a small 2-core machine), so the
	// default suits a few thousand active buckets per shard; raise it for
	// more.
	Timeout time.Duration
	// Prefix starts every Redis key; default DefaultPrefix. It must not
	// contain '{' or '}', which would change the keys' hash slots.
	Prefix string
	// Logger gets go-redis's own log lines (a dial that failed, say) as
	// warnings, at most one every 10 s with the count of those left out.
	// go-redis has one logger per process: the first Syncer made sets it,
	// and the Logger of later ones is ignored. Nil means slog.Default().
	Logger *slog.Logger
}

// Syncer syncs one node's global buckets with Redis. Its methods may be
// called concurrently.
type Syncer struct {
	client  redis.UniversalClient
	sharded bool // keys of one script call must share a hash tag
	prefix  string
	timeout time.Duration
	// node, interval and ttl are the script's first arguments.
	node, interval, ttl string
	// stranded counts round trips that Sync gave up waiting for but that
	// the client has not finished yet.
	stranded atomic.Int32
}

// New returns a Syncer that keeps its state in client, which may be a
// *redis.Client (a single server, or a failover client) or a
// *redis.ClusterClient. The client should set ContextTimeoutEnabled, so
// that a round trip that times out also frees its connection at once;
// Sync returns on time either way.
func New(client redis.UniversalClient, opts Options) *Syncer {
	if opts.Node == "" {
		host, _ := os.Hostname()
		opts.Node = host + "/" + strconv.Itoa(os.Getpid())
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	setRedisLogger(opts.Logger)
	_, single := client.(*redis.Client)
	return &Syncer{
		client:   client,
		sharded:  !single,
		prefix:   opts.Prefix,
		timeout:  opts.Timeout,
		node:     opts.Node,
		interval: strconv.FormatFloat(opts.Interval.Seconds(), 'g', -1, 64),
		ttl:      strconv.FormatInt(max(minTTL, 10*opts.Interval).Milliseconds(), 10),
	}
}

// errStranded is returned while an earlier round trip that timed out is
// still waiting for Redis, so that a slow Redis does not collect one
// abandoned round trip (and connection) per sync.
var errStranded = errors.New("redissync: an earlier round trip that timed out is still outstanding")

// Sync reports reports to Redis and returns one Share per report, in
// order. It makes one pipelined round trip per Redis shard, in parallel,
// with one script call per hash tag (at most 500 buckets each). Each Key
// should appear at most once.
//
// Sync returns within Timeout (or ctx's deadline, if earlier). On timeout
// or any error it returns an error and no shares; the caller keeps its
// last shares and folds the counts into its next report (see the package
// documentation for what that implies).
func (s *Syncer) Sync(ctx context.Context, reports []Report) ([]Share, error) {
	if len(reports) == 0 {
		return nil, nil
	}
	for i := range reports {
		r := &reports[i]
		if !(r.Rate >= 0 && r.Burst >= 0) || math.IsInf(r.Rate, 0) || math.IsInf(r.Burst, 0) {
			return nil, fmt.Errorf("redissync: report %q: rate %v and burst %v must be finite and non-negative", r.Key, r.Rate, r.Burst)
		}
	}
	if s.stranded.Load() > 0 {
		return nil, errStranded
	}
	calls := s.plan(reports)

	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()

	// The round trip runs on its own goroutine because a client without
	// ContextTimeoutEnabled ignores ctx and waits for its ReadTimeout.
	const (
		running = iota
		finished
		abandoned
	)
	var state atomic.Int32
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		err = s.roundTrip(ctx, calls)
		if !state.CompareAndSwap(running, finished) {
			s.stranded.Add(-1)
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.stranded.Add(1)
		if state.CompareAndSwap(running, abandoned) {
			return nil, fmt.Errorf("redissync: %w", ctx.Err())
		}
		s.stranded.Add(-1)
		<-done
	}
	if err != nil {
		return nil, err
	}

	shares := make([]Share, len(reports))
	for _, c := range calls {
		if err := c.decode(shares); err != nil {
			return nil, err
		}
	}
	return shares, nil
}

// roundTrip runs calls in one pipeline. Calls that fail because a server
// does not have the script cached (after a restart or failover) are run
// again with the script's source in a second pipeline.
func (s *Syncer) roundTrip(ctx context.Context, calls []*call) error {
	pipe := s.client.Pipeline()
	for _, c := range calls {
		c.cmd = script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	if _, err := pipe.Exec(ctx); err == nil {
		return nil
	}
	var again []*call
	for _, c := range calls {
		switch err := c.cmd.Err(); {
		case err == nil:
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			again = append(again, c)
		default:
			return c.err()
		}
	}
	pipe = s.client.Pipeline()
	for _, c := range again {
		c.cmd = script.Eval(ctx, pipe, c.keys, c.args...)
	}
	pipe.Exec(ctx)
	for _, c := range again {
		if err := c.err(); err != nil {
			return err
		}
	}
	return nil
}
