package distribution

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"time"

	"buf.build/go/protovalidate"
	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
)

// maxResends bounds the usage re-sends queued on one node's stream: the
// reconciler asks once per gap and hour, and asks again for what did not
// arrive.
const maxResends = 64

// clockEvery is how often a node's reports are answered with a Clock at
// most: the offset changes slowly, and nodes in tests report every few
// milliseconds.
const clockEvery = time.Second

// clockLocked records the control plane's own estimate of the offset of
// a node whose report was sent at sent (the node's clock) and read at at
// (the control plane's): at − sent. It cannot see the round trip the
// node sees, so its estimate is high by the report's one-way delay (well
// under a millisecond on a data centre's network); the node's own
// estimate, NTP-style from the Clock, is the one that stamps its usage
// windows. A node that counts usage (its report carries its spool) is
// answered with a Clock, at most once per clockEvery; one that counts
// none has no use for it.
func (s *Server) clockLocked(n *node, sent *timestamppb.Timestamp, at time.Time, counts bool) {
	n.ClockOffset, n.ClockAt = at.Sub(sent.AsTime()), at
	if !counts || !n.clockSent.IsZero() && at.Sub(n.clockSent) < clockEvery && !at.Before(n.clockSent) {
		return
	}
	n.clockSent = at
	msg := &distributionv1.StreamResponse{Message: &distributionv1.StreamResponse_Clock{Clock: &distributionv1.Clock{
		ReportSentAt: sent, Received: timestamppb.New(at)}}}
	// The newest answer replaces one not sent yet: either gives the node
	// an offset, the newer a fresher one.
	select {
	case <-n.clock:
	default:
	}
	n.clock <- msg
}

// UsageRelay serves portico.distribution.v1.UsageRelayService for a
// Server: how the quota service's reconciler learns where every
// connected node's usage spool stands and asks a node to re-send windows,
// over the node's snapshot stream. Calls carry the usage token (the
// publisher token when none is set), as the quota service's usage marks
// do.
type UsageRelay struct{ s *Server }

// UsageRelay returns the usage relay of s.
func (s *Server) UsageRelay() *UsageRelay { return &UsageRelay{s} }

// Handler returns the service's path and HTTP handler.
func (r *UsageRelay) Handler() (string, http.Handler) {
	return distributionv1connect.NewUsageRelayServiceHandler(r,
		connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				if err := r.s.lanes.UsageCaller(req.Header()); err != nil {
					return nil, err
				}
				if msg, ok := req.Any().(proto.Message); ok {
					if err := protovalidate.Validate(msg); err != nil {
						return nil, connect.NewError(connect.CodeInvalidArgument, err)
					}
				}
				return next(ctx, req)
			}
		})))
}

// Spools answers every node on the snapshot stream, by id, with its
// region, its usage spool (unset for a node that counts no usage) and
// its clock offset as the control plane estimates it (unset before the
// node's first report): see clockLocked.
func (r *UsageRelay) Spools(_ context.Context, _ *connect.Request[distributionv1.SpoolsRequest]) (*connect.Response[distributionv1.SpoolsResponse], error) {
	s := r.s
	s.mu.Lock()
	resp := &distributionv1.SpoolsResponse{Nodes: make([]*distributionv1.NodeSpool, 0, len(s.nodes))}
	for _, n := range s.nodes {
		ns := &distributionv1.NodeSpool{NodeId: n.ID, Region: n.Region, Usage: n.Usage}
		if !n.ClockAt.IsZero() {
			ns.ClockOffset = durationpb.New(n.ClockOffset)
		}
		resp.Nodes = append(resp.Nodes, ns)
	}
	s.mu.Unlock()
	sort.Slice(resp.Nodes, func(i, j int) bool { return resp.Nodes[i].GetNodeId() < resp.Nodes[j].GetNodeId() })
	return connect.NewResponse(resp), nil
}

// Resend passes a ResendUsage to the node on its snapshot stream. It
// answers once the request is queued on the stream: NotFound when the
// node is not connected, FailedPrecondition when the node's spool (as its
// hello or last report said) is another than the one named (or it has
// none), ResourceExhausted when too many re-sends wait to be sent to it.
// Delivery is not acknowledged: the reconciler sees the windows arrive,
// or asks again.
func (r *UsageRelay) Resend(_ context.Context, req *connect.Request[distributionv1.ResendRequest]) (*connect.Response[distributionv1.ResendResponse], error) {
	s := r.s
	id, rs := req.Msg.GetNodeId(), req.Msg.GetResend()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[id]
	switch {
	case n == nil:
		return nil, connect.NewError(connect.CodeNotFound, errors.New("the node is not connected"))
	case n.Usage.GetSpoolId() == "":
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the node reports no usage spool"))
	case n.Usage.GetSpoolId() != rs.GetSpoolId():
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the node runs spool "+n.Usage.GetSpoolId()+", not "+rs.GetSpoolId()))
	}
	select {
	case n.resends <- &distributionv1.StreamResponse{Message: &distributionv1.StreamResponse_ResendUsage{ResendUsage: rs}}:
	default:
		return nil, connect.NewError(connect.CodeResourceExhausted, errors.New("too many re-sends wait to be sent to the node; retry later"))
	}
	s.log.Info("usage re-send passed to a node", "node", id, "spool", rs.GetSpoolId(), "from", rs.GetFromSeq(), "to", rs.GetToSeq())
	return connect.NewResponse(&distributionv1.ResendResponse{}), nil
}
