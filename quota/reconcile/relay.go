package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
)

// Relay is how the reconciler reaches nodes: the control plane's
// UsageRelayService, which knows each connected node's spool and passes
// re-send requests on the node's stream.
type Relay interface {
	// Spools returns the spool of every node connected now.
	Spools(ctx context.Context) ([]*distributionv1.NodeSpool, error)
	// Resend asks node nodeID to ship windows r.FromSeq..r.ToSeq of spool
	// r.SpoolId again. It returns an error wrapping ErrNotConnected when
	// the node is not connected, ErrOtherSpool when it runs another spool.
	Resend(ctx context.Context, nodeID string, r *distributionv1.ResendUsage) error
}

// Errors of a Relay's Resend.
var (
	ErrNotConnected = errors.New("reconcile: the node is not connected")
	ErrOtherSpool   = errors.New("reconcile: the node runs another spool")
)

// NewRelay returns a Relay over the control plane's UsageRelayService at
// url, calling with the publisher token (svcauth) through client (nil:
// http.DefaultClient).
func NewRelay(client connect.HTTPClient, url, token string) Relay {
	if client == nil {
		client = http.DefaultClient
	}
	return connectRelay{distributionv1connect.NewUsageRelayServiceClient(client, url,
		connect.WithInterceptors(svcauth.Interceptor(token)))}
}

// RelayOver returns a Relay over a UsageRelayService client (or handler:
// both have its methods), e.g. an in-process one.
func RelayOver(c distributionv1connect.UsageRelayServiceClient) Relay { return connectRelay{c} }

type connectRelay struct {
	c distributionv1connect.UsageRelayServiceClient
}

func (r connectRelay) Spools(ctx context.Context) ([]*distributionv1.NodeSpool, error) {
	resp, err := r.c.Spools(ctx, connect.NewRequest(&distributionv1.SpoolsRequest{}))
	if err != nil {
		return nil, fmt.Errorf("listing the nodes' spools: %w", err)
	}
	return resp.Msg.GetNodes(), nil
}

func (r connectRelay) Resend(ctx context.Context, nodeID string, u *distributionv1.ResendUsage) error {
	_, err := r.c.Resend(ctx, connect.NewRequest(&distributionv1.ResendRequest{NodeId: nodeID, Resend: u}))
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return fmt.Errorf("%w: %s: %w", ErrNotConnected, nodeID, err)
	case connect.CodeFailedPrecondition:
		return fmt.Errorf("%w: %s: %w", ErrOtherSpool, nodeID, err)
	}
	if err != nil {
		return fmt.Errorf("asking %s to re-send: %w", nodeID, err)
	}
	return nil
}
