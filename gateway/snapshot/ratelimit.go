package snapshot

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Rate limit defaults that a snapshot's zero values stand for.
const (
	DefaultAnonymousRate  = 10
	DefaultAnonymousBurst = 20
	DefaultSyncInterval   = 500 * time.Millisecond
	DefaultRedisTimeout   = 50 * time.Millisecond
	DefaultStaleAfter     = 5 * time.Second
)

// RateLimit is a compiled rate limit: a token bucket policy.
type RateLimit struct {
	// ID names the limit across snapshots: "plan/<plan>/<name>",
	// "route/<route id>/<name>" or "anonymous". A node keeps the buckets of
	// an ID whose numbers did not change.
	ID string
	// Name is the policy name in the RateLimit-Policy header.
	Name string
	// Scope is what one bucket counts; UNSPECIFIED for the anonymous limit,
	// whose buckets are per client IP.
	Scope configv1.RateLimitScope
	// Class is the route class a CLASS-scoped limit applies to.
	Class string
	// Rate in tokens per second and Burst in tokens, fleet-wide.
	Rate, Burst float64
	// FailClosed refuses calls while the node's share is older than
	// StaleAfter.
	FailClosed bool
	StaleAfter time.Duration
}

// RateLimiting is the compiled fleet-wide rate limit settings.
type RateLimiting struct {
	// Anonymous is the per-client-IP limit of public routes; nil when
	// disabled.
	Anonymous     *RateLimit
	ExpectedNodes int
	SyncInterval  time.Duration
	RedisTimeout  time.Duration
}

// PlanLimits returns the rate limits of plan; nil for an unknown plan.
func (s *Snapshot) PlanLimits(plan string) []*RateLimit {
	return s.planLimits[plan]
}

// RateLimitedPlans lists the plans that have rate limits, sorted.
func (s *Snapshot) RateLimitedPlans() []string {
	return slices.Sorted(maps.Keys(s.planLimits))
}

// compileRateLimiting fills s.RateLimiting from cfg.
func compileRateLimiting(cfg *configv1.Snapshot, s *Snapshot) {
	rl := cfg.GetRateLimiting()
	s.RateLimiting = RateLimiting{
		ExpectedNodes: max(int(rl.GetExpectedNodes()), 1),
		SyncInterval:  DefaultSyncInterval,
		RedisTimeout:  DefaultRedisTimeout,
	}
	if d := rl.GetSyncInterval(); d != nil {
		s.RateLimiting.SyncInterval = d.AsDuration()
	}
	if d := rl.GetRedisTimeout(); d != nil {
		s.RateLimiting.RedisTimeout = d.AsDuration()
	}
	a := rl.GetAnonymous()
	if a.GetDisabled() {
		return
	}
	anon := &RateLimit{ID: "anonymous", Name: "anonymous", Rate: DefaultAnonymousRate, Burst: DefaultAnonymousBurst}
	if a.GetRate() > 0 {
		anon.Rate, anon.Burst = a.GetRate(), burstOf(a.GetRate(), a.GetBurst())
	}
	s.RateLimiting.Anonymous = anon
}

// compileLimits checks and compiles the limits at path (a plan's or a
// route's), whose IDs start with idPrefix.
func compileLimits(path, idPrefix string, limits []*configv1.RateLimit, errs *Error) []*RateLimit {
	if len(limits) == 0 {
		return nil
	}
	out := make([]*RateLimit, 0, len(limits))
	names := make(map[string]bool, len(limits))
	for j, l := range limits {
		if names[l.GetName()] {
			errs.add(fmt.Sprintf("%s[%d].name", path, j), fmt.Sprintf("duplicate rate limit name %q", l.GetName()))
			continue
		}
		names[l.GetName()] = true
		c := &RateLimit{
			ID:         idPrefix + l.GetName(),
			Name:       l.GetName(),
			Scope:      l.GetScope(),
			Class:      l.GetClass(),
			Rate:       l.GetRate(),
			Burst:      burstOf(l.GetRate(), l.GetBurst()),
			FailClosed: l.GetOnError() == configv1.RateLimitOnError_RATE_LIMIT_ON_ERROR_CLOSED,
			StaleAfter: DefaultStaleAfter,
		}
		if d := l.GetStaleAfter(); d != nil {
			c.StaleAfter = d.AsDuration()
		}
		out = append(out, c)
	}
	return out
}

// burstOf is a limit's burst: as configured, or the rate rounded up.
func burstOf(rate float64, burst uint32) float64 {
	if burst > 0 {
		return float64(burst)
	}
	return max(math.Ceil(rate), 1)
}

// compileRouteLimits checks route i's own limits: they tighten a caller's
// plan, so the route must have callers (not be public) and the scope must be
// per caller or per app.
func compileRouteLimits(at string, rc *configv1.Route, errs *Error) []*RateLimit {
	path := at + ".rate_limits"
	if len(rc.GetRateLimits()) > 0 && rc.GetAuth().GetPublic() {
		errs.add(path, fmt.Sprintf("route %q is public: it has no caller to limit (public routes get the per-IP anonymous limit)", rc.GetId()))
		return nil
	}
	for j, l := range rc.GetRateLimits() {
		if l.GetScope() == configv1.RateLimitScope_RATE_LIMIT_SCOPE_CLASS {
			errs.add(fmt.Sprintf("%s[%d].scope", path, j), fmt.Sprintf("route %q: a route's own limit is per caller or per app; classes belong to plans", rc.GetId()))
		}
	}
	return compileLimits(path, "route/"+rc.GetId()+"/", rc.GetRateLimits(), errs)
}
