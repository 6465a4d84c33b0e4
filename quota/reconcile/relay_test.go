package reconcile_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/quota/reconcile"
	"github.com/portico-gw/portico/testing/testclock"
)

// relayServer is a UsageRelayService as the control plane serves it:
// behind a publisher token, NotFound for a node not connected,
// FailedPrecondition for another spool.
type relayServer struct {
	distributionv1connect.UnimplementedUsageRelayServiceHandler
	nodes     *fakeRelay
	tokenHash string
}

func (s *relayServer) Spools(ctx context.Context, req *connect.Request[distributionv1.SpoolsRequest]) (*connect.Response[distributionv1.SpoolsResponse], error) {
	if err := svcauth.Check(req.Header(), s.tokenHash, "a publisher token is required"); err != nil {
		return nil, err
	}
	nodes, err := s.nodes.Spools(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&distributionv1.SpoolsResponse{Nodes: nodes}), nil
}

func (s *relayServer) Resend(ctx context.Context, req *connect.Request[distributionv1.ResendRequest]) (*connect.Response[distributionv1.ResendResponse], error) {
	if err := svcauth.Check(req.Header(), s.tokenHash, "a publisher token is required"); err != nil {
		return nil, err
	}
	err := s.nodes.Resend(ctx, req.Msg.GetNodeId(), req.Msg.GetResend())
	switch {
	case errors.Is(err, reconcile.ErrNotConnected):
		return nil, connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, reconcile.ErrOtherSpool):
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&distributionv1.ResendResponse{}), nil
}

func startRelay(t *testing.T, nodes *fakeRelay, token string) string {
	t.Helper()
	path, h := distributionv1connect.NewUsageRelayServiceHandler(&relayServer{nodes: nodes, tokenHash: svcauth.Hash(token)})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestConnectRelay: the reconciler finds the connected nodes and asks for
// re-sends through a UsageRelayService over HTTP, with the publisher
// token; the relay's refusals come back as ErrNotConnected and
// ErrOtherSpool.
func TestConnectRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqliteStore(t)
	n1 := newNode(st, "n1")
	t0 := at("2026-11-10T10:00:00Z")
	n1.emit(t, t0, row(k1, "payments", 2, 1, 1))
	n1.window(t0.Add(10*time.Second), row(k1, "payments", 2, 2, 2))
	n1.emit(t, t0.Add(20*time.Second), row(k1, "payments", 2, 3, 3))
	n1.window(t0.Add(30*time.Second), row(k1, "payments", 2, 4, 4))
	nodes := newRelay(n1)
	const token = "ptk_relay_test_token"
	url := startRelay(t, nodes, token)

	relay := reconcile.NewRelay(nil, url, token)
	got, err := relay.Spools(ctx)
	if err != nil || len(got) != 1 || got[0].GetNodeId() != "n1" || got[0].GetUsage().GetLastSeq() != 4 {
		t.Fatalf("Spools = %v, %v", got, err)
	}
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Relay: relay, Now: testclock.New(t0.Add(time.Hour)).Now})
	rep, err := r.Run(ctx, nov, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gaps(rep), []string{"n1/" + n1.spool + " 2-2 requested", "n1/" + n1.spool + " 4-4 requested"}; !slices.Equal(got, want) {
		t.Errorf("gaps = %q, want %q", got, want)
	}
	if got := total(t, st, k1, "payments", nov); got.Counted != 10 {
		t.Errorf("k1 counted %d after the re-sends, want 10", got.Counted)
	}

	if err := relay.Resend(ctx, "n9", &distributionv1.ResendUsage{SpoolId: n1.spool, FromSeq: 1, ToSeq: 1}); !errors.Is(err, reconcile.ErrNotConnected) {
		t.Errorf("Resend to a node not connected: %v", err)
	}
	if err := relay.Resend(ctx, "n1", &distributionv1.ResendUsage{SpoolId: "00000000000000ff", FromSeq: 1, ToSeq: 1}); !errors.Is(err, reconcile.ErrOtherSpool) {
		t.Errorf("Resend of another spool: %v", err)
	}
	if _, err := reconcile.NewRelay(nil, url, "wrong").Spools(ctx); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Spools with a wrong token: %v", err)
	}
}
