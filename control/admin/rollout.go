package admin

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/store"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Fleet is the distribution side the admin API reports on and steers
// (distribution.Server).
type Fleet interface {
	Status() distribution.Status
	Pause() bool
	Resume() bool
	Abort() bool
}

// ClusterChecker is a Fleet that can say, before a change is committed,
// what keeps its new or changed clusters from running on the connected
// nodes (distribution.Server.CheckClusters).
type ClusterChecker interface {
	CheckClusters(ctx context.Context, clusters []*configv1.Cluster) []distribution.ClusterProblem
}

func (s *Service) fleet() (Fleet, error) {
	if s.fleetOf == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this control plane distributes no snapshots"))
	}
	return s.fleetOf, nil
}

// GetRollout describes the fleet: all of it to a platform admin. A team
// admin sees what concerns its own team only (teamView): NACKs as
// nackProto shows them, the rollout's evidence when it is about the
// team's objects, and of each node the unhealthy endpoints of the team's
// clusters and the upstream identities given to the team.
func (s *Service) GetRollout(ctx context.Context, req *connect.Request[adminv1.GetRolloutRequest]) (*connect.Response[adminv1.GetRolloutResponse], error) {
	c, err := s.authenticate(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	f, err := s.fleet()
	if err != nil {
		return nil, err
	}
	st := f.Status()
	var tv *teamView
	if !c.platform() {
		if tv, err = s.teamView(ctx, c.team, st); err != nil {
			return nil, s.storeFailed(ctx, "rollout.get", err)
		}
	}
	out := &adminv1.GetRolloutResponse{TargetVersion: st.Version, Halted: nackProto(st.Halted, c), Rollout: rolloutProto(st.Rollout)}
	if tv != nil && out.Rollout != nil {
		out.Rollout.Evidence = tv.evidence(st)
		// A team reads its own routes' calls only.
		out.Rollout.Routes = slices.DeleteFunc(out.Rollout.Routes, func(e *adminv1.RouteEvidence) bool { return !tv.ownsRoute(e.GetRoute()) })
	}
	for _, n := range st.Nodes {
		node := &adminv1.Node{Id: n.ID, Pool: n.Pool, Region: n.Region, Labels: n.Labels,
			Version: n.Version, Sha256: n.SHA256, ConnectedAt: timestamppb.New(n.ConnectedAt), LastNack: nackProto(n.LastNACK, c),
			FastLaneVersion: n.LaneVersion, FastLaneError: n.LaneError, UpstreamIdentities: n.Identities}
		if tv != nil {
			node.UpstreamIdentities = slices.DeleteFunc(slices.Clone(n.Identities), func(id string) bool { return !tv.identities[id] })
		}
		for _, ch := range n.Clusters {
			if tv != nil && !tv.clusters[ch.GetName()] {
				continue
			}
			for _, e := range ch.GetEndpoints() {
				if !e.GetHealthy() || e.GetEjected() {
					node.UnhealthyEndpoints = append(node.UnhealthyEndpoints, ch.GetName()+"/"+e.GetAddress())
				}
			}
		}
		out.Nodes = append(out.Nodes, node)
	}
	return connect.NewResponse(out), nil
}

// PauseRollout holds the rollout in progress at its stage.
func (s *Service) PauseRollout(ctx context.Context, req *connect.Request[adminv1.PauseRolloutRequest]) (*connect.Response[adminv1.PauseRolloutResponse], error) {
	ro, err := s.steer(ctx, req.Header(), "rollout.pause", Fleet.Pause)
	return respond(&adminv1.PauseRolloutResponse{Rollout: ro}, err)
}

// ResumeRollout lets a paused rollout go on.
func (s *Service) ResumeRollout(ctx context.Context, req *connect.Request[adminv1.ResumeRolloutRequest]) (*connect.Response[adminv1.ResumeRolloutResponse], error) {
	ro, err := s.steer(ctx, req.Header(), "rollout.resume", Fleet.Resume)
	return respond(&adminv1.ResumeRolloutResponse{Rollout: ro}, err)
}

// AbortRollout stops the rollout in progress and puts every node back on
// the version before it.
func (s *Service) AbortRollout(ctx context.Context, req *connect.Request[adminv1.AbortRolloutRequest]) (*connect.Response[adminv1.AbortRolloutResponse], error) {
	ro, err := s.steer(ctx, req.Header(), "rollout.abort", Fleet.Abort)
	return respond(&adminv1.AbortRolloutResponse{Rollout: ro}, err)
}

// steer runs a platform admin's pause, resume or abort, audited.
func (s *Service) steer(ctx context.Context, h map[string][]string, action string, do func(Fleet) bool) (*adminv1.Rollout, error) {
	c, err := s.authorize(ctx, h, "", action, "rollout")
	if err != nil {
		return nil, err
	}
	f, err := s.fleet()
	if err != nil {
		return nil, err
	}
	if !do(f) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New(action+": no rollout in a state that allows it"))
	}
	ro := f.Status().Rollout
	s.audit(ctx, &store.AuditEntry{Actor: c.id, Action: action, Object: "rollout", Version: ro.Version})
	return rolloutProto(ro), nil
}

func rolloutProto(r *distribution.RolloutStatus) *adminv1.Rollout {
	if r == nil {
		return nil
	}
	out := &adminv1.Rollout{Version: r.Version, Previous: r.Previous, Stage: r.Stage, State: r.State, Evidence: r.Evidence, Reached: int32(r.Reached)}
	for _, e := range r.Routes {
		out.Routes = append(out.Routes, &adminv1.RouteEvidence{Route: e.Route,
			NewCalls: e.New.Requests, NewFailures: e.New.Errors, OldCalls: e.Old.Requests, OldFailures: e.Old.Errors,
			NewProbes: e.NewProbes.Requests, NewProbesFailed: e.NewProbes.Errors, OldProbes: e.OldProbes.Requests, OldProbesFailed: e.OldProbes.Errors})
	}
	return out
}

// nackProto is what caller c may see of a NACK: all of it for a
// platform admin; for a team admin, the refused objects of its own team
// with their errors, and the node's whole message only when every
// refused object is its team's (it names the others' objects).
func nackProto(n *distribution.NACK, c caller) *adminv1.Nack {
	if n == nil {
		return nil
	}
	out := &adminv1.Nack{Node: n.Node, Version: n.Version, Error: n.Error, At: timestamppb.New(n.At)}
	others := 0
	for _, o := range n.Objects {
		if !c.platform() && o.Team != c.team {
			others++
			continue
		}
		out.Objects = append(out.Objects, &adminv1.NackObject{Team: o.Team, Kind: o.Kind, Name: o.Name, Error: o.Error})
	}
	if !c.platform() && !refusedOnlyOf(n, c.team) {
		out.Error = fmt.Sprintf("the node refused %d objects that are not team %s's", max(others, 1), c.team)
		if len(n.Objects) == 0 {
			out.Error = "the node refused the snapshot as a whole"
		}
	}
	return out
}

// refusedOnlyOf reports whether every object n refused is team's: then
// the node's message names nothing of another team's.
func refusedOnlyOf(n *distribution.NACK, team string) bool {
	for _, o := range n.Objects {
		if o.Team != team {
			return false
		}
	}
	return len(n.Objects) > 0
}

// teamView is what a team owns, for filtering what the fleet reports: its
// clusters and the identities the platform gave it (in the version the
// fleet should run), and its routes and services (in the version the
// rollout is about, which a revert has since left).
type teamView struct {
	team       string
	clusters   map[string]bool
	identities map[string]bool
	// ownsRoute reports whether a route id of the rollout's version is
	// the team's: a hand-written route, or one derived from a service
	// ("<service id>.<method>").
	ownsRoute func(id string) bool
}

// teamView reads team's objects from the versions st names.
func (s *Service) teamView(ctx context.Context, team string, st distribution.Status) (*teamView, error) {
	tv := &teamView{team: team, clusters: map[string]bool{}, identities: map[string]bool{}, ownsRoute: func(string) bool { return false }}
	if st.Version > 0 {
		cfg, err := s.versionConfig(ctx, st.Version)
		if err != nil {
			return nil, err
		}
		for _, c := range teamConfig(cfg, team, false).GetClusters() {
			tv.clusters[c.GetName()] = true
		}
		for _, id := range cfg.GetPlatform().GetUpstreamIdentities() {
			if slices.Contains(id.GetTeams(), team) {
				tv.identities[id.GetName()] = true
			}
		}
	}
	if r := st.Rollout; r != nil && r.Version > 0 && regressionEvidence.MatchString(r.Evidence) {
		cfg, err := s.versionConfig(ctx, r.Version)
		if err != nil {
			return nil, err
		}
		tc := teamConfig(cfg, team, false)
		tv.ownsRoute = func(id string) bool {
			for _, rt := range tc.GetRoutes() {
				if rt.GetId() == id {
					return true
				}
			}
			for _, svc := range tc.GetServices() {
				if strings.HasPrefix(id, svc.GetId()+".") {
					return true
				}
			}
			return false
		}
	}
	return tv, nil
}

// versionConfig returns the config of version n.
func (s *Service) versionConfig(ctx context.Context, n int64) (*adminv1.Config, error) {
	v, err := s.store.Get(ctx, n)
	if err != nil {
		return nil, err
	}
	return s.config(ctx, v)
}

// The shapes of a rollout's evidence (control/distribution): a stage
// that did not settle in time names no object; a regression names the
// route that regressed; a NACK quotes the node's refusal.
var (
	stalledEvidence    = regexp.MustCompile(`^stage [^ :]+: not every node ran it within [0-9.a-zµ]+$`)
	regressionEvidence = regexp.MustCompile(`^stage [^ :]+: route (\S+) (failed|p99) `)
)

// evidence is what the team may read of the rollout's evidence: all of
// it when it is about the team's objects only, or names none; else a
// sentence that says another team's objects stopped it. Evidence of an
// unknown shape is treated as another team's: the team is told too
// little rather than too much.
func (tv *teamView) evidence(st distribution.Status) string {
	r := st.Rollout
	ev := r.Evidence
	switch {
	case ev == "", ev == "aborted by an operator", stalledEvidence.MatchString(ev):
		return ev
	case strings.HasPrefix(ev, "node "):
		if h := st.Halted; h != nil && h.Version == r.Version && ev == fmt.Sprintf("node %s refused it: %s", h.Node, h.Error) && refusedOnlyOf(h, tv.team) {
			return ev
		}
		return fmt.Sprintf("a node refused another team's or the platform's objects in version %d, which stopped the rollout", r.Version)
	}
	if m := regressionEvidence.FindStringSubmatch(ev); m != nil {
		if tv.ownsRoute(m[1]) {
			return ev
		}
		return fmt.Sprintf("a regression on another team's routes in version %d stopped the rollout", r.Version)
	}
	return fmt.Sprintf("another team's objects in version %d stopped the rollout", r.Version)
}
