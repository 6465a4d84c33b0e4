package reconcile_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control/distribution"
	controlstore "github.com/portico-gw/portico/control/store"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/quota/reconcile"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/testclock"
)

const waitFor = 20 * time.Second

// controlPlane is the control plane's distribution server, serving the
// snapshot stream and the usage relay over h2c.
type controlPlane struct {
	srv *distribution.Server
	url string
	h2c *http.Client
}

func startControl(t *testing.T, publisherToken string) *controlPlane {
	t.Helper()
	st, err := controlstore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	srv := distribution.New(st, distribution.Options{Logger: quiet, PublisherTokenHash: svcauth.Hash(publisherToken)})
	t.Cleanup(srv.Close)
	mux := http.NewServeMux()
	mux.Handle(srv.Handler())
	mux.Handle(srv.UsageRelay().Handler())
	hs := httptest.NewUnstartedServer(mux)
	gatewaytest.StartH2C(t, hs)
	return &controlPlane{srv: srv, url: hs.URL, h2c: gatewaytest.H2CClient(t)}
}

// attach connects n to the control plane's stream, as its gateway would:
// its hello names its spool, and it ships again the windows each
// ResendUsage asks for, telling resent when it did.
func (c *controlPlane) attach(t *testing.T, n *node, resent chan<- string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dc := distributionv1connect.NewDistributionServiceClient(c.h2c, c.url)
	stream := dc.Stream(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := stream.Receive()
			if err != nil {
				return
			}
			r := m.GetResendUsage()
			if r == nil || r.GetSpoolId() != n.spool {
				continue
			}
			if err := n.resend(r.GetFromSeq(), r.GetToSeq()); err != nil {
				t.Errorf("re-sending: %v", err)
			}
			select {
			case resent <- n.id:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(sync.OnceFunc(func() {
		cancel()
		_ = stream.CloseRequest()
		<-done
		_ = stream.CloseResponse()
	}))
	if err := stream.Send(&distributionv1.StreamRequest{Message: &distributionv1.StreamRequest_Hello{
		Hello: &distributionv1.Hello{NodeId: n.id, Region: n.region, Usage: n.usage().GetUsage()}}}); err != nil {
		t.Fatalf("hello: %v", err)
	}
	wctx, stop := context.WithTimeout(context.Background(), waitFor)
	defer stop()
	if err := c.srv.Wait(wctx, func(st distribution.Status) bool {
		return slices.ContainsFunc(st.Nodes, func(ns distribution.NodeStatus) bool { return ns.ID == n.id })
	}); err != nil {
		t.Fatalf("node %s not connected within %s", n.id, waitFor)
	}
}

// TestControlRelay: the reconciler reaches nodes through the control
// plane's own UsageRelayService, with the publisher token: it finds the
// connected node's trailing gap and its dropped window, the control plane
// passes the re-sends on the node's stream, and the windows come in. A
// node not connected is not asked; a wrong token is refused.
func TestControlRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const token = "ptk_reconcile_control_relay_0123456789"
	cp := startControl(t, token)
	st := sqliteStore(t)
	n1, n2 := newNode(st, "n1"), newNode(st, "n2")
	t0 := at("2026-11-10T10:00:00Z")
	n1.emit(t, t0, row(k1, "payments", 2, 1, 1))
	n1.window(t0.Add(10*time.Second), row(k1, "payments", 2, 2, 2)) // dropped
	n1.emit(t, t0.Add(20*time.Second), row(k1, "payments", 2, 3, 3))
	n1.window(t0.Add(30*time.Second), row(k1, "payments", 2, 4, 4)) // not arrived
	n2.emit(t, t0, row(k2, "payments", 2, 1, 1))
	n2.window(t0.Add(10*time.Second), row(k2, "payments", 2, 1, 1))
	n2.emit(t, t0.Add(20*time.Second), row(k2, "payments", 2, 1, 1))
	resent := make(chan string, 4)
	cp.attach(t, n1, resent)

	relay := reconcile.NewRelay(cp.h2c, cp.url, token)
	clock := testclock.New(t0.Add(time.Hour))
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Relay: relay, Now: clock.Now})
	rep, err := r.Run(ctx, nov, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"n1/" + n1.spool + " 2-2 requested", "n1/" + n1.spool + " 4-4", "n2/" + n2.spool + " 2-2"}
	if got := gaps(rep); !slices.Equal(got, want) {
		t.Fatalf("gaps = %q, want %q", got, want)
	}
	waitResent := func() {
		t.Helper()
		select {
		case <-resent:
		case <-time.After(waitFor):
			t.Fatalf("the node was not asked to re-send within %s", waitFor)
		}
	}
	waitResent()
	clock.Add(2 * time.Minute) // the default Grace: seq 4 is no longer in flight
	if rep, err = r.Run(ctx, nov, false); err != nil {
		t.Fatal(err)
	}
	want = []string{"n1/" + n1.spool + " 4-4 requested", "n2/" + n2.spool + " 2-2"}
	if got := gaps(rep); !slices.Equal(got, want) {
		t.Fatalf("gaps Grace later = %q, want %q", got, want)
	}
	waitResent()
	if got := total(t, st, k1, "payments", nov); got.Counted != 10 {
		t.Errorf("k1 counted %d after the re-sends, want 10", got.Counted)
	}

	// The relay's refusals, as the reconciler sees them.
	if err := relay.Resend(ctx, "n9", &distributionv1.ResendUsage{SpoolId: n1.spool, FromSeq: 1, ToSeq: 1}); !errors.Is(err, reconcile.ErrNotConnected) {
		t.Errorf("Resend to a node not connected: %v", err)
	}
	if err := relay.Resend(ctx, "n1", &distributionv1.ResendUsage{SpoolId: "00000000000000ff", FromSeq: 1, ToSeq: 1}); !errors.Is(err, reconcile.ErrOtherSpool) {
		t.Errorf("Resend of another spool: %v", err)
	}
	if _, err := reconcile.NewRelay(cp.h2c, cp.url, "not-the-token").Spools(ctx); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Spools with a wrong token: %v", err)
	}
}
