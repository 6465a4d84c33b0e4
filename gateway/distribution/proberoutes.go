package distribution

import (
	"fmt"
	"time"

	"github.com/portico-gw/portico/gateway/snapshot"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
)

// The stream's bounds of a ProbeRoutes (distribution.v1): the node
// refuses to probe more often, or for longer.
const (
	minProbeInterval = 100 * time.Millisecond
	maxProbeDuration = time.Hour
)

// probeRoutes makes the node probe the routes the control plane asks for
// while it rolls a change out, in place of what it probed before. One
// that selects no route stops the probes; one out of bounds is logged
// and ignored, and the probes go on as they were. The probes outlive the
// stream: their duration bounds them when the control plane goes away.
func (c *Client) probeRoutes(m *distributionv1.ProbeRoutes) {
	if c.opts.Node == nil {
		c.log.Debug("route probes ignored: the client has no node to run them", "sha256", m.GetSha256())
		return
	}
	sel := snapshot.RouteSelection{IDs: m.GetRouteIds(), Prefixes: m.GetRoutePrefixes(), All: m.GetAll()}
	interval, duration := m.GetInterval().AsDuration(), m.GetDuration().AsDuration()
	if err := checkProbeRoutes(sel, interval, duration); err != nil {
		c.log.Warn("route probes ignored", "sha256", m.GetSha256(), "err", err)
		return
	}
	if err := c.opts.Node.ProbeRoutes(m.GetSha256(), sel, interval, duration); err != nil {
		c.log.Warn("route probes refused by the node", "sha256", m.GetSha256(), "err", err)
	}
}

// checkProbeRoutes checks a ProbeRoutes against the stream's bounds: a
// selection of routes needs an interval of at least minProbeInterval and
// a duration within (0, maxProbeDuration]. A selection of none (a stop)
// needs neither.
func checkProbeRoutes(sel snapshot.RouteSelection, interval, duration time.Duration) error {
	if sel.Empty() {
		return nil
	}
	if interval < minProbeInterval {
		return fmt.Errorf("interval %v is under %v", interval, minProbeInterval)
	}
	if duration <= 0 || duration > maxProbeDuration {
		return fmt.Errorf("duration %v is not within (0, %v]", duration, maxProbeDuration)
	}
	return nil
}
