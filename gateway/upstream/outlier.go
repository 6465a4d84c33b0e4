package upstream

import (
	"math"
	"time"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Defaults of the OutlierDetection fields left unset.
const (
	defaultConsecutiveFailures = 5
	defaultBaseEjectionTime    = 30 * time.Second
	defaultMaxEjectionPercent  = 50
	maxEjectionMultiplier      = 10
)

// outlierPolicy is a cluster's passive health checking, resolved from its
// config with the defaults applied.
//
// After consecutive failures (see [Failure]) an endpoint is ejected for
// base × k, where k counts its ejections, capped at 10. k decays by one for
// every base the endpoint spends in service after an ejection ended, so an
// endpoint that misbehaves once a week is not punished for last month.
// Expiry is lazy: Pick compares the earliest expiry with the clock; there are
// no timers.
//
// At most maxEjected endpoints are ejected at once: floor(n × percent / 100),
// but at least one in a cluster of two or more, so that one bad endpoint
// of a small cluster can always be shed (Envoy does the same). The only
// endpoint of a single-endpoint cluster is ejected only when
// max_ejection_percent is 100: ejecting it moves no traffic anywhere, it
// turns a degraded backend into an outage made by the gateway, so an
// operator has to ask for that explicitly.
type outlierPolicy struct {
	enabled     bool
	consecutive uint32
	base        time.Duration
	maxEjected  int32
}

func newOutlierPolicy(cfg *configv1.OutlierDetection, endpoints int) outlierPolicy {
	p := outlierPolicy{
		enabled:     !cfg.GetDisabled(),
		consecutive: cfg.GetConsecutiveFailures(),
		base:        durationOr(cfg.GetBaseEjectionTime(), defaultBaseEjectionTime),
	}
	if p.consecutive == 0 {
		p.consecutive = defaultConsecutiveFailures
	}
	percent := int(cfg.GetMaxEjectionPercent())
	if percent == 0 {
		percent = defaultMaxEjectionPercent
	}
	maxEjected := endpoints * percent / 100
	if maxEjected == 0 && endpoints > 1 {
		maxEjected = 1
	}
	p.maxEjected = int32(maxEjected)
	return p
}

// onConsecutiveFailures ejects e if the policy allows. Whether or not it
// does, the failure count starts again, so a refused ejection is retried
// after another run of failures rather than on every failed request.
func (c *Cluster) onConsecutiveFailures(e *Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.consecFails.Store(0)
	if e.ejectedUntil.Load() != 0 {
		return // requests sent before the ejection are still failing
	}
	now := c.now().UnixNano()
	c.reviveLocked(now)
	if c.ejected.Load() >= c.outlier.maxEjected {
		c.log.Debug("upstream endpoint failing but not ejected: max_ejection_percent reached",
			"endpoint", e.addr, "ejected", c.ejected.Load())
		return
	}
	base := int64(c.outlier.base)
	if e.lastEjectedEnd != 0 && now > e.lastEjectedEnd {
		e.ejections = max(e.ejections-int((now-e.lastEjectedEnd)/base), 0)
	}
	e.ejections = min(e.ejections+1, maxEjectionMultiplier)
	until := now + base*int64(e.ejections)
	e.ejectedUntil.Store(until)
	c.ejected.Add(1)
	if until < c.revive.Load() {
		c.revive.Store(until)
	}
	c.rebuildLocked()
	c.log.Warn("upstream endpoint ejected", "endpoint", e.addr,
		"for", time.Duration(until-now), "consecutive_failures", c.outlier.consecutive)
}

// maybeRevive returns expired ejections to service. It is called by Pick
// only while some endpoint is ejected. A Pick that finds the lock taken
// goes on with the current list; the next one revives.
func (c *Cluster) maybeRevive() {
	now := c.now().UnixNano()
	if now < c.revive.Load() || !c.mu.TryLock() {
		return
	}
	c.reviveLocked(now)
	c.mu.Unlock()
}

func (c *Cluster) reviveLocked(now int64) {
	if c.ejected.Load() == 0 || now < c.revive.Load() {
		return
	}
	next := int64(math.MaxInt64)
	revived := false
	for _, e := range c.endpoints {
		until := e.ejectedUntil.Load()
		switch {
		case until == 0:
		case until <= now:
			e.ejectedUntil.Store(0)
			e.lastEjectedEnd = until
			e.consecFails.Store(0)
			c.ejected.Add(-1)
			revived = true
			c.log.Info("upstream endpoint back from ejection", "endpoint", e.addr)
		default:
			next = min(next, until)
		}
	}
	c.revive.Store(next)
	if revived {
		c.rebuildLocked()
	}
}
