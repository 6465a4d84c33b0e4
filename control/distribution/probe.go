package distribution

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
)

// Before a change that adds or changes clusters is committed, the control
// plane checks them against the fleet (seed flow 2: "the new cluster
// exists and has healthy endpoints"): every connected node must hold the
// identity a cluster names (nodes say which they hold in their hello), and
// some node must find one of its endpoints healthy, trying it from its own
// network (a probe on the stream).
//
// What a probe may cost is bounded, since any team may ask for one (a dry
// run is enough): one probe at a time per control plane, at most
// MaxProbeClusters clusters (a change with more is refused: split it), at
// most ProbeEndpoints endpoints of each (one healthy is all the check
// needs), checked at most ProbeParallel at a time by each node, which
// runs one probe at a time.
const (
	// probeTimeout bounds each endpoint check on a node.
	probeTimeout = 3 * time.Second
	// MaxProbeClusters is how many new or changed clusters one change may
	// bring while nodes are connected.
	MaxProbeClusters = 256
	// ProbeEndpoints is how many endpoints of a cluster are tried.
	ProbeEndpoints = 8
	// ProbeParallel is how many endpoint checks a node runs at once.
	ProbeParallel = 256
	// maxProbeWait bounds the wait for the nodes' answers.
	maxProbeWait = 30 * time.Second
	// maxProbeNodes is how many nodes are asked, spread over pools and
	// regions.
	maxProbeNodes = 8
	// maxListed bounds the nodes or endpoints a problem lists.
	maxListed = 5
)

// probeWait is how long the nodes may take to check clusters: a round of
// ProbeParallel checks per probeTimeout, and a margin for the stream.
func probeWait(clusters []*configv1.Cluster) time.Duration {
	checks := 0
	for _, c := range clusters {
		checks += len(c.GetEndpoints())
	}
	rounds := (checks + ProbeParallel - 1) / ProbeParallel
	return min(time.Duration(max(rounds, 1))*probeTimeout+2*time.Second, maxProbeWait)
}

// ClusterProblem is why a cluster cannot go to the fleet. Field is the
// field at fault ("tls.identity", "endpoints"), empty for the cluster as
// a whole.
type ClusterProblem struct {
	Cluster, Field, Message string
}

// NodeProbe is one node's answer to a probe.
type NodeProbe struct {
	Node     string
	Clusters []*distributionv1.ClusterProbe
}

// pendingProbe is a probe waiting for the nodes it was sent to.
type pendingProbe struct {
	asked   map[string]bool
	answers map[string]*distributionv1.ProbeResult
	done    chan struct{} // closed when every asked node answered
}

// CheckClusters says what keeps clusters (new or changed, as they will be
// in the snapshot) from running on the fleet: an identity a connected node
// lacks, or no endpoint that any probed node finds healthy. With no node
// connected there is nothing to check against, and nothing to push to: it
// finds no problem. A probed node that does not answer in time is left
// out, and a cluster no node probed is not judged on health (logged).
func (s *Server) CheckClusters(ctx context.Context, clusters []*configv1.Cluster) []ClusterProblem {
	if len(clusters) == 0 {
		return nil
	}
	// One probe at a time: a team's dry runs cannot pile probes onto the
	// nodes, which serve traffic meanwhile.
	select {
	case s.probing <- struct{}{}:
		defer func() { <-s.probing }()
	case <-ctx.Done():
		return []ClusterProblem{{Message: "the fleet check was cut short: " + ctx.Err().Error()}}
	}
	var problems []ClusterProblem
	s.mu.Lock()
	nodes := make([]NodeStatus, 0, len(s.nodes))
	for _, n := range s.nodes {
		nodes = append(nodes, n.NodeStatus)
	}
	s.mu.Unlock()
	if len(nodes) == 0 {
		return nil
	}
	slices.SortFunc(nodes, func(a, b NodeStatus) int { return cmp.Compare(a.ID, b.ID) })
	if len(clusters) > MaxProbeClusters {
		return []ClusterProblem{{Message: fmt.Sprintf("the change adds or changes %d clusters; the fleet checks at most %d at once: split it into smaller changes",
			len(clusters), MaxProbeClusters)}}
	}
	var probe []*configv1.Cluster
	for _, c := range clusters {
		if id := c.GetTls().GetIdentity(); id != "" {
			var lacking []string
			for _, n := range nodes {
				if !slices.Contains(n.Identities, id) {
					lacking = append(lacking, n.ID)
				}
			}
			if len(lacking) > 0 {
				problems = append(problems, ClusterProblem{Cluster: c.GetName(), Field: "tls.identity",
					Message: fmt.Sprintf("upstream identity %q is not on %s: each node needs -upstream-identity %s=CERT,KEY", id, listed("node", lacking), id)})
				continue // it could not be built there: no probe
			}
		}
		if len(c.GetEndpoints()) > ProbeEndpoints {
			c = proto.CloneOf(c)
			c.Endpoints = c.Endpoints[:ProbeEndpoints]
		}
		probe = append(probe, c)
	}
	if len(probe) == 0 {
		return problems
	}
	answers, unanswered := s.Probe(ctx, probe, pickProbeNodes(nodes))
	for _, c := range probe {
		healthy := false
		var judges, builds, failures []string
		for _, a := range answers {
			for _, cp := range a.Clusters {
				if cp.GetName() != c.GetName() {
					continue
				}
				judges = append(judges, a.Node)
				if cp.GetError() != "" {
					builds = append(builds, a.Node+": "+cp.GetError())
				}
				for _, e := range cp.GetEndpoints() {
					if e.GetHealthy() {
						healthy = true
					} else {
						failures = append(failures, a.Node+" → "+e.GetAddress()+": "+e.GetError())
					}
				}
			}
		}
		switch {
		case len(judges) == 0:
			// Nodes that did not answer in time, or that do not probe:
			// nothing is known against the cluster.
			s.log.Warn("no node probed a change's cluster; its health is not judged", "cluster", c.GetName(), "unanswered", unanswered)
		case len(builds) > 0:
			problems = append(problems, ClusterProblem{Cluster: c.GetName(),
				Message: "nodes cannot build the cluster: " + strings.Join(capped(builds), "; ")})
		case !healthy:
			problems = append(problems, ClusterProblem{Cluster: c.GetName(), Field: "endpoints",
				Message: "no endpoint is healthy from " + listed("node", judges) + ": " + strings.Join(capped(failures), "; ")})
		}
	}
	return problems
}

// Probe asks nodes (connected node ids) to try clusters, and waits until
// they have all answered, the time the checks may take passes, or ctx
// ends. It returns the
// answers, in the order of nodes, and the nodes that did not answer.
func (s *Server) Probe(ctx context.Context, clusters []*configv1.Cluster, nodes []string) ([]NodeProbe, []string) {
	var idb [12]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	p := &pendingProbe{asked: map[string]bool{}, answers: map[string]*distributionv1.ProbeResult{}, done: make(chan struct{})}
	msg := &distributionv1.StreamResponse{Message: &distributionv1.StreamResponse_Probe{Probe: &distributionv1.Probe{
		Id: id, Clusters: clusters, Timeout: durationpb.New(probeTimeout)}}}
	s.mu.Lock()
	for _, nid := range nodes {
		n := s.nodes[nid]
		if n == nil {
			continue
		}
		select {
		case n.probes <- msg:
			p.asked[nid] = true
		default: // its stream is backed up: left out
		}
	}
	if len(p.asked) == 0 {
		s.mu.Unlock()
		return nil, nodes
	}
	s.probes[id] = p
	s.mu.Unlock()

	t := time.NewTimer(probeWait(clusters))
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.probes, id)
	var answers []NodeProbe
	var unanswered []string
	for _, nid := range nodes {
		if r := p.answers[nid]; r != nil {
			answers = append(answers, NodeProbe{Node: nid, Clusters: r.GetClusters()})
		} else {
			unanswered = append(unanswered, nid)
		}
	}
	return answers, unanswered
}

// probeAnswered records a node's answer to a probe it was asked; any
// other is ignored.
func (s *Server) probeAnswered(node string, res *distributionv1.ProbeResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.probes[res.GetId()]
	if p == nil || !p.asked[node] || p.answers[node] != nil {
		return
	}
	p.answers[node] = res
	if len(p.answers) == len(p.asked) {
		close(p.done)
	}
}

// pickProbeNodes chooses up to maxProbeNodes of nodes (sorted by id):
// canaries first, then one of each pool and region in turn, so that a
// backend reachable from some places only is found healthy by a node
// there.
func pickProbeNodes(nodes []NodeStatus) []string {
	type group struct{ ids []string }
	var order []string
	groups := map[string]*group{}
	add := func(key, id string) {
		g := groups[key]
		if g == nil {
			g = &group{}
			groups[key] = g
			order = append(order, key)
		}
		g.ids = append(g.ids, id)
	}
	for _, n := range nodes {
		if n.Labels["canary"] == "true" {
			add("\x00canary", n.ID)
		}
	}
	for _, n := range nodes {
		if n.Labels["canary"] != "true" {
			add(n.Pool+"\x00"+n.Region, n.ID)
		}
	}
	var out []string
	for round := 0; len(out) < maxProbeNodes; round++ {
		took := false
		for _, k := range order {
			if g := groups[k]; round < len(g.ids) && len(out) < maxProbeNodes {
				out = append(out, g.ids[round])
				took = true
			}
		}
		if !took {
			break
		}
	}
	return out
}

// listed is "node a", "nodes a, b" or "nodes a, b, ... and 3 more".
func listed(what string, names []string) string {
	if len(names) == 1 {
		return what + " " + names[0]
	}
	return what + "s " + strings.Join(capped(names), ", ")
}

// capped keeps the first maxListed of list and says how many more there
// were.
func capped(list []string) []string {
	if len(list) <= maxListed {
		return list
	}
	return append(slices.Clip(list[:maxListed]), fmt.Sprintf("and %d more", len(list)-maxListed))
}

// objectNames lists refused objects for a log line.
func objectNames(objs []RefusedObject) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = strings.TrimPrefix(o.Team+" ", " ") + o.Kind + " " + o.Name
	}
	return out
}
