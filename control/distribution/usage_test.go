package distribution_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/store"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/testclock"
)

// These tests play the nodes and the reconciler with raw Connect clients;
// testing/fleet/usage_test.go runs real nodes.

const (
	publisherToken = "usage-relay-test-publisher-token-0123456789abcdef"
	spoolA         = "0123456789abcdef"
	spoolB         = "fedcba9876543210"
	wait           = 20 * time.Second
)

type relayHarness struct {
	srv   *distribution.Server
	clock *testclock.Clock
	url   string
	h2c   http.RoundTripper
	relay distributionv1connect.UsageRelayServiceClient
}

func startRelay(t *testing.T) *relayHarness { return startRelayWith(t, "") }

// startRelayWith starts a relay whose control plane takes usageToken for
// the relay when it is not empty.
func startRelayWith(t *testing.T, usageToken string) *relayHarness {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	clock := testclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	srv := distribution.New(st, distribution.Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now,
		PublisherTokenHash: store.SHA256([]byte(publisherToken)), UsageTokenHash: usageHash(usageToken)})
	t.Cleanup(srv.Close)
	mux := http.NewServeMux()
	mux.Handle(srv.Handler())
	mux.Handle(srv.UsageRelay().Handler())
	hs := httptest.NewUnstartedServer(mux)
	gatewaytest.StartH2C(t, hs)
	h := &relayHarness{srv: srv, clock: clock, url: hs.URL, h2c: gatewaytest.H2CClient(t).Transport}
	h.relay = h.relayClient(publisherToken)
	if usageToken != "" {
		h.relay = h.relayClient(usageToken)
	}
	return h
}

func usageHash(token string) string {
	if token == "" {
		return ""
	}
	return store.SHA256([]byte(token))
}

func (h *relayHarness) relayClient(token string) distributionv1connect.UsageRelayServiceClient {
	return distributionv1connect.NewUsageRelayServiceClient(&http.Client{Transport: admintest.Bearer(token, h.h2c), Timeout: wait}, h.url)
}

// rawNode is a node's snapshot stream, played by the test.
type rawNode struct {
	stream *connect.BidiStreamForClient[distributionv1.StreamRequest, distributionv1.StreamResponse]
	// received are the Clock and ResendUsage messages the control plane
	// sent.
	received chan *distributionv1.StreamResponse
	end      chan error
}

func (h *relayHarness) connect(t *testing.T, hello *distributionv1.Hello) *rawNode {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dc := distributionv1connect.NewDistributionServiceClient(&http.Client{Transport: h.h2c}, h.url)
	n := &rawNode{stream: dc.Stream(ctx), received: make(chan *distributionv1.StreamResponse, 16), end: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := n.stream.Receive()
			if err != nil {
				n.end <- err
				return
			}
			if m.GetClock() == nil && m.GetResendUsage() == nil {
				continue // snapshots, probes: not the usage's
			}
			select {
			case n.received <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(sync.OnceFunc(func() {
		cancel()
		_ = n.stream.CloseRequest()
		<-done
		_ = n.stream.CloseResponse()
	}))
	if err := n.stream.Send(&distributionv1.StreamRequest{Message: &distributionv1.StreamRequest_Hello{Hello: hello}}); err != nil {
		t.Fatalf("hello: %v", err)
	}
	// The hello is in when the node is listed.
	waitCtx, stop := context.WithTimeout(context.Background(), wait)
	defer stop()
	if err := h.srv.Wait(waitCtx, func(st distribution.Status) bool {
		for _, ns := range st.Nodes {
			if ns.ID == hello.GetNodeId() {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("node %s not connected within %s", hello.GetNodeId(), wait)
	}
	return n
}

func (n *rawNode) report(t *testing.T, rep *distributionv1.Report) {
	t.Helper()
	if err := n.stream.Send(&distributionv1.StreamRequest{Message: &distributionv1.StreamRequest_Report{Report: rep}}); err != nil {
		t.Fatalf("report: %v", err)
	}
}

// spoolAt is a spool whose last window is last.
func spoolAt(last uint64) *distributionv1.UsageSpool {
	return &distributionv1.UsageSpool{SpoolId: spoolA, FirstSeq: 1, LastSeq: last}
}

// reportRead sends rep on n's stream and waits until the control plane
// has read it: node id's spool is the report's, read at the clock's time.
func (h *relayHarness) reportRead(t *testing.T, n *rawNode, id string, rep *distributionv1.Report) {
	t.Helper()
	n.report(t, rep)
	ctx, stop := context.WithTimeout(context.Background(), wait)
	defer stop()
	if err := h.srv.Wait(ctx, func(st distribution.Status) bool {
		for _, ns := range st.Nodes {
			if ns.ID == id {
				return proto.Equal(ns.Usage, rep.GetUsage()) && ns.ReportedAt.Equal(h.clock.Now())
			}
		}
		return false
	}); err != nil {
		t.Fatalf("the report %v not read within %s", rep, wait)
	}
}

func (n *rawNode) next(t *testing.T) *distributionv1.StreamResponse {
	t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case m := <-n.received:
		return m
	case err := <-n.end:
		t.Fatalf("the stream ended: %v", err)
	case <-timer.C:
		t.Fatalf("no message within %s", wait)
	}
	return nil
}

// TestUsageClock: a report of a node that counts usage and says when it
// was sent is answered with a Clock echoing that and stamped with the
// control plane's clock when it read the report, at most once a second;
// Spools shows each node's spool, region and the offset the control
// plane estimates.
func TestUsageClock(t *testing.T) {
	t.Parallel()
	h := startRelay(t)
	spool := &distributionv1.UsageSpool{SpoolId: spoolA, FirstSeq: 1, LastSeq: 4}
	n := h.connect(t, &distributionv1.Hello{NodeId: "node-1", Region: "eu-west", Usage: spool})
	h.connect(t, &distributionv1.Hello{NodeId: "node-0", Region: "us-east"})

	resp, err := h.relay.Spools(context.Background(), connect.NewRequest(&distributionv1.SpoolsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	want := []*distributionv1.NodeSpool{{NodeId: "node-0", Region: "us-east"}, {NodeId: "node-1", Region: "eu-west", Usage: spool}}
	if diff := cmp.Diff(want, resp.Msg.GetNodes(), protocmp.Transform()); diff != "" {
		t.Errorf("Spools after the hellos (-want +got):\n%s", diff)
	}

	// The node's clock is 2 minutes behind the control plane's.
	sent := timestamppb.New(h.clock.Now().Add(-2 * time.Minute))
	later := &distributionv1.UsageSpool{SpoolId: spoolA, FirstSeq: 3, LastSeq: 9, Full: true}
	n.report(t, &distributionv1.Report{SentAt: sent, Usage: later})
	clk := n.next(t).GetClock()
	wantClock := &distributionv1.Clock{ReportSentAt: sent, Received: timestamppb.New(h.clock.Now())}
	if diff := cmp.Diff(wantClock, clk, protocmp.Transform()); diff != "" {
		t.Errorf("the answer to a report (-want +got):\n%s", diff)
	}
	// Not answered: a report within a second of the last answer, one
	// without sent_at, one of a node that counts no usage (no spool).
	// Each is read before the clock moves on.
	h.clock.Add(500 * time.Millisecond)
	h.reportRead(t, n, "node-1", &distributionv1.Report{SentAt: timestamppb.New(h.clock.Now()), Usage: spoolAt(5)})
	h.reportRead(t, n, "node-1", &distributionv1.Report{Usage: spoolAt(6)})
	h.clock.Add(500 * time.Millisecond)
	h.reportRead(t, n, "node-1", &distributionv1.Report{SentAt: timestamppb.New(h.clock.Now())})
	// Answered: the next that counts usage, a second after the last
	// answer. Had any of the others been, its answer would come first.
	sent2 := timestamppb.New(h.clock.Now().Add(-2 * time.Minute))
	n.report(t, &distributionv1.Report{SentAt: sent2, Usage: later})
	if clk := n.next(t).GetClock(); !clk.GetReportSentAt().AsTime().Equal(sent2.AsTime()) {
		t.Errorf("answer %v, want the answer to the report sent at %v", clk, sent2.AsTime())
	}
	resp, err = h.relay.Spools(context.Background(), connect.NewRequest(&distributionv1.SpoolsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Msg.GetNodes()[1]
	if diff := cmp.Diff(later, got.GetUsage(), protocmp.Transform()); diff != "" {
		t.Errorf("node-1's spool after its reports (-want +got):\n%s", diff)
	}
	if d := got.GetClockOffset().AsDuration(); d != 2*time.Minute {
		t.Errorf("node-1's clock offset = %v, want 2m (the control plane's clock minus the node's)", d)
	}
	if resp.Msg.GetNodes()[0].GetClockOffset() != nil {
		t.Errorf("node-0, which never reported, has a clock offset: %v", resp.Msg.GetNodes()[0])
	}
}

// TestUsageResend: a re-send reaches the node named on its stream when
// it runs the spool named; otherwise NotFound or FailedPrecondition, and
// nothing is sent.
func TestUsageResend(t *testing.T) {
	t.Parallel()
	h := startRelay(t)
	n := h.connect(t, &distributionv1.Hello{NodeId: "node-1", Usage: &distributionv1.UsageSpool{SpoolId: spoolA, FirstSeq: 1, LastSeq: 9}})
	h.connect(t, &distributionv1.Hello{NodeId: "node-2"})
	ctx := context.Background()
	rs := &distributionv1.ResendUsage{SpoolId: spoolA, FromSeq: 3, ToSeq: 5}
	if _, err := h.relay.Resend(ctx, connect.NewRequest(&distributionv1.ResendRequest{NodeId: "node-1", Resend: rs})); err != nil {
		t.Fatalf("Resend: %v", err)
	}
	if diff := cmp.Diff(rs, n.next(t).GetResendUsage(), protocmp.Transform()); diff != "" {
		t.Errorf("what the node was sent (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		name string
		req  *distributionv1.ResendRequest
		code connect.Code
	}{
		{"a node not connected", &distributionv1.ResendRequest{NodeId: "node-9", Resend: rs}, connect.CodeNotFound},
		{"another spool", &distributionv1.ResendRequest{NodeId: "node-1", Resend: &distributionv1.ResendUsage{SpoolId: spoolB, FromSeq: 3, ToSeq: 5}}, connect.CodeFailedPrecondition},
		{"a node without a spool", &distributionv1.ResendRequest{NodeId: "node-2", Resend: rs}, connect.CodeFailedPrecondition},
		{"no re-send", &distributionv1.ResendRequest{NodeId: "node-1"}, connect.CodeInvalidArgument},
		{"to before from", &distributionv1.ResendRequest{NodeId: "node-1", Resend: &distributionv1.ResendUsage{SpoolId: spoolA, FromSeq: 5, ToSeq: 3}}, connect.CodeInvalidArgument},
		{"seq 0", &distributionv1.ResendRequest{NodeId: "node-1", Resend: &distributionv1.ResendUsage{SpoolId: spoolA, ToSeq: 3}}, connect.CodeInvalidArgument},
	} {
		if _, err := h.relay.Resend(ctx, connect.NewRequest(c.req)); connect.CodeOf(err) != c.code {
			t.Errorf("Resend to %s: %v, want %v", c.name, err, c.code)
		}
	}
	// The node's report moves it to a new spool (it lost the old one):
	// re-sends of the old are refused, the new is passed.
	n.report(t, &distributionv1.Report{Usage: &distributionv1.UsageSpool{SpoolId: spoolB, FirstSeq: 1, LastSeq: 1}})
	waitCtx, stop := context.WithTimeout(ctx, wait)
	defer stop()
	if err := h.srv.Wait(waitCtx, func(st distribution.Status) bool {
		return len(st.Nodes) == 2 && st.Nodes[0].Usage.GetSpoolId() == spoolB
	}); err != nil {
		t.Fatalf("the report's spool not recorded within %s", wait)
	}
	if _, err := h.relay.Resend(ctx, connect.NewRequest(&distributionv1.ResendRequest{NodeId: "node-1", Resend: rs})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("Resend of the node's old spool: %v, want FailedPrecondition", err)
	}
	rsB := &distributionv1.ResendUsage{SpoolId: spoolB, FromSeq: 1, ToSeq: 1}
	if _, err := h.relay.Resend(ctx, connect.NewRequest(&distributionv1.ResendRequest{NodeId: "node-1", Resend: rsB})); err != nil {
		t.Fatalf("Resend of the new spool: %v", err)
	}
	// The refused re-sends sent nothing: the next message is the new one.
	if diff := cmp.Diff(rsB, n.next(t).GetResendUsage(), protocmp.Transform()); diff != "" {
		t.Errorf("what the node was sent next (-want +got):\n%s", diff)
	}
}

// TestUsageRelayAuth: the relay takes the publisher token alone.
func TestUsageRelayAuth(t *testing.T) {
	t.Parallel()
	h := startRelay(t)
	h.connect(t, &distributionv1.Hello{NodeId: "node-1", Usage: &distributionv1.UsageSpool{SpoolId: spoolA, FirstSeq: 1, LastSeq: 2}})
	ctx := context.Background()
	for _, token := range []string{"", "node-token-0123456789abcdef0123456789", publisherToken + "x"} {
		r := h.relayClient(token)
		if _, err := r.Spools(ctx, connect.NewRequest(&distributionv1.SpoolsRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("Spools with token %q: %v, want Unauthenticated", token, err)
		}
		_, err := r.Resend(ctx, connect.NewRequest(&distributionv1.ResendRequest{NodeId: "node-1", Resend: &distributionv1.ResendUsage{SpoolId: spoolA, FromSeq: 1, ToSeq: 1}}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("Resend with token %q: %v, want Unauthenticated", token, err)
		}
	}
	if resp, err := h.relay.Spools(ctx, connect.NewRequest(&distributionv1.SpoolsRequest{})); err != nil || len(resp.Msg.GetNodes()) != 1 {
		t.Errorf("Spools with the publisher token = %v, %v; want node-1", resp, err)
	}
}

// TestUsageRelayUsageToken: with a usage token set, the relay takes it
// and no longer the publisher token.
func TestUsageRelayUsageToken(t *testing.T) {
	t.Parallel()
	const usageToken = "ptk_usage_token_for_the_quota_service_0123"
	h := startRelayWith(t, usageToken)
	h.connect(t, &distributionv1.Hello{NodeId: "node-1", Usage: &distributionv1.UsageSpool{SpoolId: spoolA, FirstSeq: 1, LastSeq: 2}})
	ctx := context.Background()
	if _, err := h.relayClient(publisherToken).Spools(ctx, connect.NewRequest(&distributionv1.SpoolsRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Spools with the publisher token: %v, want Unauthenticated", err)
	}
	_, err := h.relayClient(publisherToken).Resend(ctx, connect.NewRequest(&distributionv1.ResendRequest{NodeId: "node-1", Resend: &distributionv1.ResendUsage{SpoolId: spoolA, FromSeq: 1, ToSeq: 1}}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Resend with the publisher token: %v, want Unauthenticated", err)
	}
	if resp, err := h.relay.Spools(ctx, connect.NewRequest(&distributionv1.SpoolsRequest{})); err != nil || len(resp.Msg.GetNodes()) != 1 {
		t.Errorf("Spools with the usage token = %v, %v; want node-1", resp, err)
	}
}
