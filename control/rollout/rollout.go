// Package rollout is the rollout's plan and its judge, as plain functions
// over the fleet's nodes and their route counters: which nodes each stage
// gives a new version, which routes a change touched, and whether the
// new version's nodes served those routes worse than the old version's.
// control/distribution runs the stages over the nodes' streams; this
// package holds no state of its own and does no I/O, so it is tested
// without streams.
package rollout

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/routestats"
	"github.com/portico-gw/portico/gateway/snapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Stages are the stages, in order; each adds nodes to the ones before.
var Stages = []string{"canary", "10%", "region", "all"}

// Node is what the plan reads of a node.
type Node struct {
	ID, Region string
	// Canary: the node is labelled canary=true.
	Canary bool
}

// StageNodes lists the nodes stage assigns, cumulative: the canaries
// (nodes labelled canary, else the first by id, two per region; a region
// with labelled canaries takes only those), then 10 % of the fleet, then
// the canaries' first region, then everyone.
func StageNodes(stage int, nodes []Node) []string {
	all := slices.Clone(nodes)
	sort.Slice(all, func(a, b int) bool { return all[a].ID < all[b].ID })
	region := make(map[string]string, len(all))
	labelledRegion := map[string]bool{}
	for _, n := range all {
		region[n.ID] = n.Region
		if n.Canary {
			labelledRegion[n.Region] = true
		}
	}
	var canaries []string
	perRegion := map[string]int{}
	for _, labelled := range []bool{true, false} {
		for _, n := range all {
			if n.Canary != labelled || perRegion[n.Region] >= 2 || (!labelled && labelledRegion[n.Region]) {
				continue
			}
			canaries = append(canaries, n.ID)
			perRegion[n.Region]++
		}
	}
	out := slices.Clone(canaries)
	in := make(map[string]bool, len(all))
	for _, id := range canaries {
		in[id] = true
	}
	add := func(id string) {
		if !in[id] {
			in[id] = true
			out = append(out, id)
		}
	}
	switch Stages[stage] {
	case "canary":
	case "10%":
		want := int(math.Ceil(0.1 * float64(len(all))))
		for _, n := range all {
			if len(out) >= want {
				break
			}
			add(n.ID)
		}
	case "region":
		r := ""
		if len(canaries) > 0 {
			r = region[canaries[0]]
		}
		for _, n := range all {
			if n.Region == r {
				add(n.ID)
			}
		}
	default:
		for _, n := range all {
			add(n.ID)
		}
	}
	return out
}

// Criteria are when a new version counts as worse than the old.
type Criteria struct {
	// MinRequests is how many calls of a changed route the new version's
	// nodes must have served for it to be judged on them.
	MinRequests uint64
	// MinProbes is how many synthetic probes of a changed route the new
	// version's nodes must have sent for it to be judged on them, when
	// it has too few real calls. Zero means 3.
	MinProbes uint64
	// MaxErrorRateIncrease is how much higher the new version's share of
	// failed calls (or probes) may be than the old one's.
	MaxErrorRateIncrease float64
	// MaxLatencyRatio and MinLatencyIncrease: the new version's p99 may not
	// exceed the old one's by both this factor and this much.
	MaxLatencyRatio    float64
	MinLatencyIncrease time.Duration
}

// Observation is one node's counters across a stage's bake, by route id:
// its real calls (Before and After) and the synthetic probes it sent
// (ProbesBefore and ProbesAfter), and whether the node runs the new
// version.
type Observation struct {
	Before, After             map[string]routestats.Counts
	ProbesBefore, ProbesAfter map[string]routestats.Counts
	OnNew                     bool
}

// Judge judges one rollout's stages. Its OldRate and OldProbeRate carry,
// from stage to stage, each changed route's failure share on the old
// version (of calls, and of probes), measured in the last stage that had
// enough of them there: the baseline once few or no nodes are left on it.
type Judge struct {
	Criteria
	// Changed selects the routes the change touched.
	Changed Matcher
	// Next and Previous are the versions, for the evidence.
	Next, Previous int64
	// OldRate and OldProbeRate are kept by Judge; nil starts empty.
	OldRate, OldProbeRate map[string]float64
	// Failed is the route of the regression Stage last found, "" while
	// it found none: the route whose change a rollout reverts.
	Failed string
	// Evidence is what Stage last read: each changed route's calls and
	// probes on the new version and on the old during the bake, by route.
	Evidence []RouteEvidence
}

// RouteEvidence is one changed route's calls and probes during a stage's
// bake, on the nodes running the new version and on those still on the
// old.
type RouteEvidence struct {
	Route                string
	New, Old             routestats.Counts
	NewProbes, OldProbes routestats.Counts
}

// Stage judges the changed routes of stage's bake that the new
// version's nodes run (a route the change removes is not judged).
//
// A route the new version's nodes served at least MinRequests calls of is
// judged on them, against the calls the nodes still on the old version
// served, else against its OldRate, else (a route the change adds, or
// one too quiet on the old version to measure) against none failing. A
// route with fewer real calls is judged on the synthetic probes
// the nodes sent, when the new version's sent at least MinProbes: its
// calls and probes together, against the old version's probes, else its
// OldProbeRate, else none failing; a regression on probes needs at least
// two failures, so that one probe lost on a loaded node reverts nothing.
//
// It returns the evidence of a regression, or "", and the changed routes
// it has no evidence to judge (too few calls and too few probes),
// comma-separated, or "": a stage must not pass on them.
func (j *Judge) Stage(stage int, nodes []Observation) (evidence, unjudged string) {
	if j.OldRate == nil {
		j.OldRate = map[string]float64{}
	}
	if j.OldProbeRate == nil {
		j.OldProbeRate = map[string]float64{}
	}
	minProbes := j.MinProbes
	if minProbes == 0 {
		minProbes = 3
	}
	j.Failed = ""
	sums := map[string]*RouteEvidence{}
	onNew := map[string]bool{} // the routes the new version's nodes run
	add := func(before, after map[string]routestats.Counts, newNode, probes bool) {
		for route, c := range after {
			if !j.Changed.Match(route) {
				continue
			}
			if newNode && !probes {
				onNew[route] = true
			}
			d := c
			if prev, ok := before[route]; ok && !reset(prev, c) {
				d = c.Sub(prev)
			}
			e := sums[route]
			if e == nil {
				e = &RouteEvidence{Route: route}
				sums[route] = e
			}
			switch {
			case newNode && probes:
				e.NewProbes = e.NewProbes.Add(d)
			case probes:
				e.OldProbes = e.OldProbes.Add(d)
			case newNode:
				e.New = e.New.Add(d)
			default:
				e.Old = e.Old.Add(d)
			}
		}
	}
	for _, n := range nodes {
		add(n.Before, n.After, n.OnNew, false)
		add(n.ProbesBefore, n.ProbesAfter, n.OnNew, true)
	}
	routes := make([]string, 0, len(sums))
	for r := range sums {
		if onNew[r] {
			routes = append(routes, r)
		}
	}
	slices.Sort(routes)
	j.Evidence = j.Evidence[:0]
	for _, r := range routes {
		e := sums[r]
		j.Evidence = append(j.Evidence, *e)
		// The old version's rates, whenever it had enough to measure
		// them: the baseline of later stages.
		if e.Old.Requests >= j.MinRequests {
			j.OldRate[r] = float64(e.Old.Errors) / float64(e.Old.Requests)
		}
		if e.OldProbes.Requests >= minProbes {
			j.OldProbeRate[r] = float64(e.OldProbes.Errors) / float64(e.OldProbes.Requests)
		}
	}
	// Real calls first: a regression they show is the stronger evidence.
	var probed, none []string
	for _, r := range routes {
		e := sums[r]
		switch {
		case e.New.Requests >= j.MinRequests:
			if ev := j.calls(e); ev != "" {
				j.Failed = r
				return ev, ""
			}
		case e.NewProbes.Requests >= minProbes:
			probed = append(probed, r)
		default:
			none = append(none, r)
		}
	}
	for _, r := range probed {
		if ev := j.probes(sums[r], minProbes); ev != "" {
			j.Failed = r
			return ev, ""
		}
	}
	return "", strings.Join(none, ",")
}

// calls judges e's route on its real calls, against the old version's
// rate (none failing without one): the evidence of a regression, or "".
func (j *Judge) calls(e *RouteEvidence) string {
	r, old, nw := e.Route, e.Old, e.New
	rateNew := float64(nw.Errors) / float64(nw.Requests)
	rateOld := j.OldRate[r]
	if rateNew-rateOld > j.MaxErrorRateIncrease {
		return fmt.Sprintf("route %s failed %d of %d calls (%.1f%%) on version %d, %d of %d (%.1f%%) on version %d",
			r, nw.Errors, nw.Requests, 100*rateNew, j.Next, old.Errors, old.Requests, 100*rateOld, j.Previous)
	}
	if old.Requests >= j.MinRequests {
		pNew, pOld := nw.Quantile(0.99), old.Quantile(0.99)
		if float64(pNew) > j.MaxLatencyRatio*float64(pOld) && pNew-pOld >= j.MinLatencyIncrease {
			return fmt.Sprintf("route %s p99 %v on version %d, %v on version %d", r, pNew, j.Next, pOld, j.Previous)
		}
	}
	return ""
}

// probes judges e's route on its synthetic probes and the few real calls
// it had, together: the evidence of a regression, or "". Probes are few,
// so their latency is judged on the median, which one slow probe (a
// pause on a loaded node) does not move, and only against the old
// version's probes in the same bake.
func (j *Judge) probes(e *RouteEvidence, minProbes uint64) string {
	r, old, nw := e.Route, e.OldProbes, e.NewProbes
	n, failed := nw.Requests+e.New.Requests, nw.Errors+e.New.Errors
	rateNew := float64(failed) / float64(n)
	rateOld, known := j.OldProbeRate[r]
	var baseline string
	switch {
	case old.Requests >= minProbes:
		baseline = fmt.Sprintf("%d of %d probes (%.1f%%) on version %d", old.Errors, old.Requests, 100*rateOld, j.Previous)
	case known:
		baseline = fmt.Sprintf("%.1f%% of probes on version %d earlier", 100*rateOld, j.Previous)
	default:
		baseline = fmt.Sprintf("none probed on version %d", j.Previous)
	}
	if failed >= 2 && rateNew-rateOld > j.MaxErrorRateIncrease {
		calls := ""
		if e.New.Requests > 0 {
			calls = fmt.Sprintf(" and %d of %d calls", e.New.Errors, e.New.Requests)
		}
		return fmt.Sprintf("route %s failed %d of %d synthetic probes%s (%.1f%%) on version %d, %s",
			r, nw.Errors, nw.Requests, calls, 100*rateNew, j.Next, baseline)
	}
	if old.Requests >= minProbes {
		mNew, mOld := nw.Quantile(0.5), old.Quantile(0.5)
		if float64(mNew) > j.MaxLatencyRatio*float64(mOld) && mNew-mOld >= j.MinLatencyIncrease {
			return fmt.Sprintf("route %s synthetic probes took %v (median) on version %d, %v on version %d", r, mNew, j.Next, mOld, j.Previous)
		}
	}
	return ""
}

// reset reports whether counters went down between two reports: the node
// restarted, or dropped the route and counts it afresh.
func reset(prev, now routestats.Counts) bool {
	if now.Requests < prev.Requests || now.Errors < prev.Errors {
		return true
	}
	for b := range now.Buckets {
		if now.Buckets[b] < prev.Buckets[b] {
			return true
		}
	}
	return false
}

// Matcher selects the routes a change touched: by id, or by the prefix
// of the routes a service derives ("<service id>.", as a node's
// snapshot.RouteSelection selects them: only ids a service derives).
// The zero value matches none; All matches every route.
type Matcher struct {
	All bool
	sel snapshot.RouteSelection
	set *snapshot.Selector
}

// Parts returns what m selects: every route, or the routes ids names,
// sorted, and those a service whose prefix is one of prefixes derives.
func (m Matcher) Parts() (all bool, ids, prefixes []string) {
	ids = slices.Clone(m.sel.IDs)
	slices.Sort(ids)
	return m.All, ids, slices.Clone(m.sel.Prefixes)
}

// Match reports whether the change touched route.
func (m Matcher) Match(route string) bool {
	return m.All || m.set != nil && m.set.Selects(route)
}

// ChangedRoutes compares two encoded snapshots: the routes that are new
// or differ, those whose cluster differs, and the routes of services that
// are new, differ or whose cluster differs. If either does not decode, it
// matches every route, with the error.
func ChangedRoutes(prevData, nextData []byte) (Matcher, error) {
	var prev, next configv1.Snapshot
	if err := proto.Unmarshal(prevData, &prev); err != nil {
		return Matcher{All: true}, err
	}
	if err := proto.Unmarshal(nextData, &next); err != nil {
		return Matcher{All: true}, err
	}
	clusters := map[string]*configv1.Cluster{}
	for _, c := range prev.GetClusters() {
		clusters[c.GetName()] = c
	}
	changedCluster := map[string]bool{}
	for _, c := range next.GetClusters() {
		if !proto.Equal(clusters[c.GetName()], c) {
			changedCluster[c.GetName()] = true
		}
	}
	var sel snapshot.RouteSelection
	routes := map[string]*configv1.Route{}
	for _, r := range prev.GetRoutes() {
		routes[r.GetId()] = r
	}
	for _, r := range next.GetRoutes() {
		if !proto.Equal(routes[r.GetId()], r) || changedCluster[r.GetCluster()] {
			sel.IDs = append(sel.IDs, r.GetId())
		}
	}
	services := map[string]*configv1.Service{}
	for _, svc := range prev.GetServices() {
		services[svc.GetId()] = svc
	}
	for _, svc := range next.GetServices() {
		if !proto.Equal(services[svc.GetId()], svc) || changedCluster[svc.GetCluster()] {
			sel.Prefixes = append(sel.Prefixes, svc.GetId()+".")
		}
	}
	return Matcher{sel: sel, set: sel.Selector()}, nil
}
