package admin

import (
	"context"
	"errors"
	"fmt"

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

// GetRollout describes the fleet.
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
	out := &adminv1.GetRolloutResponse{TargetVersion: st.Version, Halted: nackProto(st.Halted, c), Rollout: rolloutProto(st.Rollout)}
	for _, n := range st.Nodes {
		node := &adminv1.Node{Id: n.ID, Pool: n.Pool, Region: n.Region, Labels: n.Labels,
			Version: n.Version, Sha256: n.SHA256, ConnectedAt: timestamppb.New(n.ConnectedAt), LastNack: nackProto(n.LastNACK, c),
			FastLaneVersion: n.LaneVersion, FastLaneError: n.LaneError, UpstreamIdentities: n.Identities}
		for _, ch := range n.Clusters {
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
	return &adminv1.Rollout{Version: r.Version, Previous: r.Previous, Stage: r.Stage, State: r.State, Evidence: r.Evidence, Reached: int32(r.Reached)}
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
	if !c.platform() && (others > 0 || len(n.Objects) == 0) {
		out.Error = fmt.Sprintf("the node refused %d objects that are not team %s's", max(others, 1), c.team)
		if len(n.Objects) == 0 {
			out.Error = "the node refused the snapshot as a whole"
		}
	}
	return out
}
