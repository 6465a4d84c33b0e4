package distribution_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/distribution"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// fakeUsage is a node's usage counting, as the stream sees it.
type fakeUsage struct {
	spool   *distributionv1.UsageSpool
	offsets chan time.Duration
	resends chan *distributionv1.ResendUsage
}

func (u *fakeUsage) UsageSpool() *distributionv1.UsageSpool { return u.spool }
func (u *fakeUsage) SetClockOffset(d time.Duration)         { u.offsets <- d }
func (u *fakeUsage) ResendUsage(r *distributionv1.ResendUsage) {
	u.resends <- r
}

// clockServer is a control plane whose clock is the node's plus skew: it
// answers every report with a Clock, and after the first report sends
// the re-send requests of its list.
type clockServer struct {
	distributionv1connect.UnimplementedDistributionServiceHandler
	skew    time.Duration
	resends []*distributionv1.ResendUsage
	hellos  chan *distributionv1.Hello
	reports chan *distributionv1.Report
}

func (c *clockServer) Stream(ctx context.Context, s *connect.BidiStream[distributionv1.StreamRequest, distributionv1.StreamResponse]) error {
	m, err := s.Receive()
	if err != nil {
		return err
	}
	c.hellos <- m.GetHello()
	first := true
	for {
		m, err := s.Receive()
		if err != nil {
			return nil
		}
		r := m.GetReport()
		if r == nil {
			continue
		}
		clk := &distributionv1.Clock{ReportSentAt: r.GetSentAt(), Received: timestamppb.New(r.GetSentAt().AsTime().Add(c.skew))}
		if err := s.Send(&distributionv1.StreamResponse{Message: &distributionv1.StreamResponse_Clock{Clock: clk}}); err != nil {
			return nil
		}
		if first {
			first = false
			for _, rs := range c.resends {
				if err := s.Send(&distributionv1.StreamResponse{Message: &distributionv1.StreamResponse_ResendUsage{ResendUsage: rs}}); err != nil {
					return nil
				}
			}
		}
		select {
		case c.reports <- r:
		case <-ctx.Done():
			return nil
		}
	}
}

// TestUsageOnTheStream: the hello and every report say where the node's
// spool stands and when the report was sent; the control plane's Clock
// answers set the node's clock offset; a valid re-send request reaches
// the node's usage, an invalid one does not.
func TestUsageOnTheStream(t *testing.T) {
	t.Parallel()
	spool := &distributionv1.UsageSpool{SpoolId: "0123456789abcdef", FirstSeq: 3, LastSeq: 9}
	valid := &distributionv1.ResendUsage{SpoolId: "0123456789abcdef", FromSeq: 4, ToSeq: 5}
	cp := &clockServer{
		skew: 2*time.Minute + 250*time.Millisecond,
		resends: []*distributionv1.ResendUsage{
			{SpoolId: "0123456789abcdef", FromSeq: 6, ToSeq: 5}, // to before from
			{SpoolId: "not hex", FromSeq: 1, ToSeq: 1},
			valid,
		},
		hellos: make(chan *distributionv1.Hello, 4), reports: make(chan *distributionv1.Report, 64),
	}
	mux := http.NewServeMux()
	mux.Handle(distributionv1connect.NewDistributionServiceHandler(cp))
	srv := httptest.NewUnstartedServer(mux)
	gatewaytest.StartH2C(t, srv)
	u := &fakeUsage{spool: spool, offsets: make(chan time.Duration, 64), resends: make(chan *distributionv1.ResendUsage, 8)}
	// The node's clock stands still, so the round trip is nothing on it
	// and the offset is exactly the control plane's skew.
	nodeClock := time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC)
	client := distribution.New(distribution.Options{
		URL: srv.URL, HTTPClient: gatewaytest.H2CClient(t), NodeID: "n1", Pool: "public",
		Usage: u, Now: func() time.Time { return nodeClock }, ReportInterval: 20 * time.Millisecond,
	})
	runUntilCleanup(t, client)

	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	select {
	case h := <-cp.hellos:
		if diff := cmp.Diff(spool, h.GetUsage(), protocmp.Transform()); diff != "" {
			t.Errorf("hello's usage (-want +got):\n%s", diff)
		}
	case <-deadline.C:
		t.Fatal("no hello within 20s")
	}
	select {
	case r := <-cp.reports:
		if diff := cmp.Diff(spool, r.GetUsage(), protocmp.Transform()); diff != "" {
			t.Errorf("report's usage (-want +got):\n%s", diff)
		}
		if got := r.GetSentAt().AsTime(); !got.Equal(nodeClock) {
			t.Errorf("report's sent_at = %v, want the node's clock %v", got, nodeClock)
		}
	case <-deadline.C:
		t.Fatal("no report within 20s")
	}
	select {
	case d := <-u.offsets:
		if d != cp.skew {
			t.Errorf("SetClockOffset(%v), want %v", d, cp.skew)
		}
	case <-deadline.C:
		t.Fatal("no clock offset set within 20s")
	}
	select {
	case r := <-u.resends:
		if diff := cmp.Diff(valid, r, protocmp.Transform()); diff != "" {
			t.Errorf("re-send passed to the node (-want +got):\n%s", diff)
		}
	case <-deadline.C:
		t.Fatal("no re-send passed within 20s")
	}
	// The invalid requests came first: had either been passed, it would
	// have been the one received above.
	select {
	case r := <-u.resends:
		t.Errorf("a second re-send passed: %v", r)
	default:
	}
}
