package distribution_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/distribution"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/logbuf"
)

// prober is a control plane that sends a node one snapshot, then, once
// the node has run it, the ProbeRoutes in its list, and passes on every
// report the node sends.
type prober struct {
	distributionv1connect.UnimplementedDistributionServiceHandler
	snap    *distributionv1.Snapshot
	probes  []*distributionv1.ProbeRoutes
	reports chan *distributionv1.Report
}

func (p *prober) Stream(ctx context.Context, s *connect.BidiStream[distributionv1.StreamRequest, distributionv1.StreamResponse]) error {
	if _, err := s.Receive(); err != nil { // the hello
		return err
	}
	ack, err := push(s, p.snap)
	if err != nil {
		return err
	}
	if ack.GetError() != "" {
		return connect.NewError(connect.CodeInternal, nil)
	}
	for _, pr := range p.probes {
		if err := s.Send(&distributionv1.StreamResponse{Message: &distributionv1.StreamResponse_ProbeRoutes{ProbeRoutes: pr}}); err != nil {
			return err
		}
	}
	for {
		m, err := s.Receive()
		if err != nil {
			return nil
		}
		if r := m.GetReport(); r != nil {
			select {
			case p.reports <- r:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// TestProbeRoutes: a ProbeRoutes from the control plane makes the node
// probe the routes it selects, and the reports that follow count the
// probes apart from the routes' calls; one out of bounds is logged and
// ignored.
func TestProbeRoutes(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/fail" {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	t.Cleanup(backend.Close)
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	node, err := gateway.New(gateway.Options{Logger: log, Listeners: []gateway.Listener{{Pool: "public", Addr: "127.0.0.1:0"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)

	public := &configv1.RouteAuth{Public: true, Reviewer: "tests"}
	data, sha := encoded(t, &configv1.Snapshot{Version: "v1",
		Clusters: []*configv1.Cluster{{Name: "c", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: strings.TrimPrefix(backend.URL, "http://")}}}},
		Routes: []*configv1.Route{
			{Id: "orders.ok", Team: "t", Path: "/v1/ok", Cluster: "c", Auth: public},
			{Id: "orders.fail", Team: "t", Path: "/v1/fail", Cluster: "c", Auth: public},
			{Id: "other", Team: "t", Path: "/v1/other", Cluster: "c", Auth: public},
		},
		RateLimiting: &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Disabled: true}},
	})
	cp := &prober{
		snap:    &distributionv1.Snapshot{Version: 1, Sha256: sha, Data: data},
		reports: make(chan *distributionv1.Report, 16),
		probes: []*distributionv1.ProbeRoutes{
			{Sha256: sha, All: true, Interval: durationpb.New(10 * time.Millisecond), Duration: durationpb.New(time.Minute)},
			// The prefix selects the routes a service derives alone (none
			// here), never the plain route "other" nor "orders.ok".
			{Sha256: sha, RouteIds: []string{"orders.ok", "orders.fail"}, RoutePrefixes: []string{"orders.", "oth"}, Interval: durationpb.New(100 * time.Millisecond), Duration: durationpb.New(time.Minute)},
		},
	}
	mux := http.NewServeMux()
	mux.Handle(distributionv1connect.NewDistributionServiceHandler(cp))
	srv := httptest.NewUnstartedServer(mux)
	gatewaytest.StartH2C(t, srv)
	client := distribution.New(distribution.Options{
		URL: srv.URL, HTTPClient: gatewaytest.H2CClient(t), NodeID: "n1", Pool: "public",
		Apply: node.Apply, Logger: log, Stats: node.RouteStats, Node: node, ReportInterval: 50 * time.Millisecond,
	})
	runUntilCleanup(t, client)

	deadline := time.After(20 * time.Second)
	for {
		var rep *distributionv1.Report
		select {
		case rep = <-cp.reports:
		case <-deadline:
			t.Fatalf("no report counted two probes of each orders route within 20s:\n%s", logs.String())
		}
		probes := map[string]*distributionv1.RouteCounts{}
		for _, c := range rep.GetProbes() {
			probes[c.GetRouteId()] = c
		}
		ok, fail := probes["orders.ok"], probes["orders.fail"]
		if ok.GetRequests() < 2 || fail.GetRequests() < 2 {
			continue
		}
		if ok.GetErrors() != 0 || fail.GetErrors() != fail.GetRequests() || probes["other"] != nil || len(ok.GetLatencyBuckets()) == 0 {
			t.Errorf("probes reported: %v; want orders.ok passing, orders.fail failing, other not probed", rep.GetProbes())
		}
		for _, c := range rep.GetRoutes() {
			if c.GetRequests() != 0 {
				t.Errorf("route %s reported %d calls: probes counted as calls", c.GetRouteId(), c.GetRequests())
			}
		}
		break
	}
	if out := logs.String(); !strings.Contains(out, `msg="route probes ignored"`) || strings.Contains(out, "refused by the node") {
		t.Errorf("want the ProbeRoutes out of bounds logged as ignored:\n%s", out)
	}
}
