package distribution

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/control/rollout"
	"github.com/portico-gw/portico/gateway/snapshot"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
)

// While a version rolls out, the canaries run synthetic probes of the
// routes it changed (seed flow 2: "Canary proxies load the new snapshot
// first and run synthetic checks"), so that a stage whose changed routes
// get too few real calls is judged on probes instead of passing on no
// evidence. A few nodes still on the old version probe the same routes
// as they run them there: the baseline, so that a backend that fails for
// both versions is not blamed on the change. Each node sends each route's
// probe (config.v1.RouteProbe) through its own request chain as the
// platform's synthetic caller and reports the counts beside its real
// calls, which never include them.
//
// What the probers are told follows the rollout: syncProbesLocked runs
// with every change of state (notifyLocked) and sends a node a new
// ProbeRoutes only when what it should probe changed, a stop when it
// should probe nothing. The duration a node probes for bounds the
// probing of a control plane that went away.

// baselineProbers is how many nodes on the old version probe beside the
// canaries.
const baselineProbers = 2

// probeShare is what one prober probes: the routes of snapshot sha256,
// or, when they are more than a node probes, every of-th of them from
// the i-th.
type probeShare struct {
	sha256 string
	i, of  int
}

// probeInterval is how often each prober probes each changed route: the
// option, else a tenth of the bake, between 100 ms and 1 s (a 3 s bake
// gets 10 probes a route per canary, a minute's 60).
func (o RolloutOptions) probeInterval() time.Duration {
	if o.ProbeInterval > 0 {
		return max(o.ProbeInterval, 100*time.Millisecond)
	}
	return min(max(o.Bake/10, 100*time.Millisecond), time.Second)
}

// probeSelection is what ro's probers probe: the routes its judge
// judges.
func probeSelection(m rollout.Matcher) *distributionv1.ProbeRoutes {
	all, ids, prefixes := m.Parts()
	return &distributionv1.ProbeRoutes{All: all, RouteIds: ids, RoutePrefixes: prefixes}
}

// probingUnknown is what a node that just connected was last told, as
// far as this control plane knows: it may still probe for an earlier
// stream (a node keeps a set through a reconnect), so the first sync
// tells it, if only to stop.
const probingUnknown = "?"

// syncProbesLocked tells every node what to probe for the rollout in
// progress: the canaries it reached probe its version's changed routes;
// baselineProbers nodes it has not reached that run the version before
// (from the canaries' regions first) probe them there; every other node
// nothing.
func (s *Server) syncProbesLocked() {
	// node → the snapshot it probes, and its share of the routes
	want := map[string]probeShare{}
	ro := s.rollout
	if ro != nil && !ro.ended() && ro.state != RolloutHalted {
		if ro.probes == nil {
			return // the changed routes are not known yet: nothing changes
		}
		var onNew []string
		for _, id := range s.stageNodesLocked(0) {
			if ro.reached[id] {
				onNew = append(onNew, id)
			}
		}
		if len(onNew) == 0 {
			// The canaries are gone: two of the nodes it reached probe.
			for id := range ro.reached {
				if s.nodes[id] != nil {
					onNew = append(onNew, id)
				}
			}
			slices.Sort(onNew)
			onNew = onNew[:min(len(onNew), 2)]
		}
		regions := map[string]bool{}
		for i, id := range onNew {
			want[id] = probeShare{ro.next.sha256, i, len(onNew)}
			if n := s.nodes[id]; n != nil {
				regions[n.Region] = true
			}
		}
		var old []string
		for id, n := range s.nodes {
			if !ro.reached[id] && n.SHA256 == ro.previous.sha256 {
				old = append(old, id)
			}
		}
		// The canaries' regions first, so that the baseline's latency is
		// comparable, then by id.
		slices.SortFunc(old, func(a, b string) int {
			ra, rb := regions[s.nodes[a].Region], regions[s.nodes[b].Region]
			if ra != rb {
				if ra {
					return -1
				}
				return 1
			}
			return strings.Compare(a, b)
		})
		old = old[:min(len(old), baselineProbers)]
		for i, id := range old {
			want[id] = probeShare{ro.previous.sha256, i, len(old)}
		}
	}
	for id, n := range s.nodes {
		share, key := want[id], ""
		sha := share.sha256
		if sha != "" {
			key = fmt.Sprintf("%s/%d/%d/%d/%d/%d", sha, ro.next.version, ro.stage, ro.probeEpoch, share.i, share.of)
		}
		if n.probing == key {
			continue
		}
		n.probing = key
		m := &distributionv1.ProbeRoutes{} // stop
		if sha != "" {
			opts := s.opts.Rollout
			m = proto.CloneOf(ro.probes)
			m.Sha256 = sha
			if ids := m.GetRouteIds(); len(ids) > snapshot.MaxProbedRoutes && share.of > 1 {
				// More routes than a node probes: the probers of a version
				// share them out, so that each route is probed by one.
				var mine []string
				for j := share.i; j < len(ids); j += share.of {
					mine = append(mine, ids[j])
				}
				m.RouteIds = mine
			}
			m.Interval = durationpb.New(opts.probeInterval())
			// Until the stage after next is due, at the latest: every
			// stage, and a resume, sends it again.
			m.Duration = durationpb.New(min(2*(opts.MaxBake+opts.AckTimeout), time.Hour))
		}
		select {
		case <-n.probeRoutes: // replaced by this newer one
		default:
		}
		n.probeRoutes <- &distributionv1.StreamResponse{Message: &distributionv1.StreamResponse_ProbeRoutes{ProbeRoutes: m}}
	}
}
