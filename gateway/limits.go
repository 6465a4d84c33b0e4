package gateway

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-gw/portico/gateway/auth"
	"github.com/portico-gw/portico/gateway/ratelimit"
	"github.com/portico-gw/portico/gateway/snapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// RateLimitOptions configure the node's rate limit buckets.
type RateLimitOptions struct {
	// Redis, when set, shares the global limits with the rest of the fleet:
	// every sync interval the node reports what its buckets admitted and
	// takes back its share (gateway/ratelimit/redissync). Nil means this
	// node's buckets are the whole truth, as for a single node.
	Redis redis.UniversalClient
	// RedisAddrs, when Redis is nil, are the Redis the node connects to
	// itself (and closes when it stops): one address, or the seed
	// addresses of a Redis Cluster. RedisPassword is their AUTH password.
	RedisAddrs    []string
	RedisPassword string
	// NodeID names this node in Redis; it must be unique in the fleet.
	// Empty means the host name and the process id.
	NodeID string
	// MaxBuckets bounds the buckets in memory; 0 means the default.
	MaxBuckets int
}

// limitSet is a snapshot's rate limits bound to the node's bucket table,
// resolved so a request does one map lookup (its plan) at most.
type limitSet struct {
	plans     map[string][]boundLimit
	routes    [][]boundLimit // by route index
	anonymous *boundLimit    // nil when disabled
}

// boundLimit is a compiled limit with its bucket policy and its
// RateLimit-Policy header value, formatted once.
type boundLimit struct {
	spec *snapshot.RateLimit
	lim  *ratelimit.Limit
	// policy is the RateLimit-Policy header value, shared by every
	// response (net/http never changes a header's values).
	policy []string
}

func bind(l *snapshot.RateLimit) boundLimit {
	return boundLimit{
		spec: l,
		lim: &ratelimit.Limit{
			ID: l.ID, Name: l.Name, Rate: l.Rate, Burst: l.Burst,
			// Per-IP buckets of anonymous callers stay on their node.
			Global:     l.Scope != configv1.RateLimitScope_RATE_LIMIT_SCOPE_UNSPECIFIED,
			FailClosed: l.FailClosed, StaleAfter: l.StaleAfter,
		},
		policy: []string{policyHeader(l)},
	}
}

// policyHeader is the RateLimit-Policy field of l (IETF httpapi
// RateLimit fields draft): the quota q is the fleet-wide burst, over a
// window w of the seconds the bucket takes to refill from empty, at least
// 1. The RateLimit field's r is what this node will still admit: its share
// of the limit, never more than q.
func policyHeader(l *snapshot.RateLimit) string {
	w := max(math.Ceil(l.Burst/l.Rate), 1)
	return `"` + l.Name + `";q=` + strconv.FormatFloat(l.Burst, 'f', 0, 64) + ";w=" + strconv.FormatFloat(w, 'f', 0, 64)
}

func newLimitSet(s *snapshot.Snapshot) *limitSet {
	ls := &limitSet{plans: map[string][]boundLimit{}, routes: make([][]boundLimit, len(s.Routes))}
	if a := s.RateLimiting.Anonymous; a != nil {
		b := bind(a)
		ls.anonymous = &b
	}
	for _, p := range s.RateLimitedPlans() {
		for _, l := range s.PlanLimits(p) {
			ls.plans[p] = append(ls.plans[p], bind(l))
		}
	}
	for i := range s.Routes {
		for _, l := range s.Routes[i].RateLimits {
			ls.routes[i] = append(ls.routes[i], bind(l))
		}
	}
	return ls
}

// verdict is the outcome of a request's rate limits.
type verdict struct {
	limited bool
	// the limit reported in the headers: the refusing one, or the most
	// restrictive
	by  *boundLimit
	res ratelimit.Result
}

// consider folds one bucket's result into v: a refusal wins over a pass
// (the longest wait among refusals), otherwise the fewest tokens left.
func (v *verdict) consider(b *boundLimit, r ratelimit.Result) {
	switch {
	case v.by == nil:
	case !r.Allowed() && (!v.limited || r.RetryAfter > v.res.RetryAfter):
	case r.Allowed() && !v.limited && r.Remaining < v.res.Remaining:
	default:
		return
	}
	v.by, v.res, v.limited = b, r, !r.Allowed()
}

// rateLimit takes a token from every bucket that applies to the request:
// per client IP on public routes; otherwise the caller's plan limits (per
// caller, per app, per caller and route class) and the route's own.
func (n *Node) rateLimit(ls *limitSet, route *snapshot.Route, id *auth.Identity, clientIP string) verdict {
	var v verdict
	if route.Auth.Public {
		if a := ls.anonymous; a != nil {
			v.consider(a, n.limits.TakeAt(a.lim, clientIP, n.now()))
		}
		return v
	}
	planLimits, routeLimits := ls.plans[id.Plan], ls.routes[route.Index]
	if len(planLimits) == 0 && len(routeLimits) == 0 {
		return v
	}
	// One clock read for every bucket: on some machines it costs as much
	// as a take.
	now := n.now()
	k := bucketKeys{id: id}
	for i, b := range planLimits {
		if b.spec.Scope == configv1.RateLimitScope_RATE_LIMIT_SCOPE_CLASS && b.spec.Class != route.RateLimitClass {
			continue
		}
		v.consider(&planLimits[i], n.limits.TakeAt(b.lim, k.of(b.spec.Scope), now))
	}
	for i, b := range routeLimits {
		v.consider(&routeLimits[i], n.limits.TakeAt(b.lim, k.of(b.spec.Scope), now))
	}
	return v
}

// bucketKeys names a request's buckets, each key made at most once and
// only if a limit needs it (for tokens, making one allocates).
type bucketKeys struct {
	id          *auth.Identity
	caller, app string
}

// of returns the bucket key for scope: the app for APP, the caller for
// CALLER and CLASS.
func (k *bucketKeys) of(scope configv1.RateLimitScope) string {
	if scope == configv1.RateLimitScope_RATE_LIMIT_SCOPE_APP {
		if k.app == "" {
			k.app = appKey(k.id)
		}
		return k.app
	}
	if k.caller == "" {
		k.caller = callerKey(k.id)
	}
	return k.caller
}

// callerKey names the caller a CALLER bucket counts: the API key, or the
// token's subject with its client (the same user through two apps is two
// callers).
func callerKey(id *auth.Identity) string {
	if id.Kind == auth.APIKey {
		return id.KeyID
	}
	return id.Issuer + "\x00" + id.Subject + "\x00" + id.ClientID
}

// appKey names the app an APP bucket counts: the key's app, or the token's
// client; a token without a client counts as its subject's own app.
func appKey(id *auth.Identity) string {
	if id.ClientID != "" {
		return id.ClientID
	}
	return id.Issuer + "\x00" + id.Subject
}

// now reads the node's clock.
func (n *Node) now() time.Time {
	if n.opts.Now != nil {
		return n.opts.Now()
	}
	return time.Now()
}

// writeHeaders sets the RateLimit-Policy and RateLimit fields of v's limit.
func (v *verdict) writeHeaders(h http.Header) {
	if v.by == nil {
		return
	}
	h["Ratelimit-Policy"] = v.by.policy
	h["Ratelimit"] = []string{`"` + v.by.spec.Name + `";r=` + strconv.FormatInt(v.res.Remaining, 10) +
		";t=" + strconv.FormatInt(int64((v.res.Reset+time.Second-1)/time.Second), 10)}
}
