package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/gateway/routestats"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/gen/portico/demo/v1/demov1connect"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// TestRouteStats: the node counts each route's calls and its server-side
// failures (5xx, gRPC UNAVAILABLE and kin; not 4xx, not NOT_FOUND), and a
// route keeps its counters across snapshots while its id stays.
func TestRouteStats(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fail":
			w.WriteHeader(500)
		case "/missing":
			w.WriteHeader(404)
		}
		_, _ = io.WriteString(w, "x")
	}))
	t.Cleanup(backend.Close)
	d := gatewaytest.Demo(t)
	cfg := rpcSnapshot(t, d.OrdersAddr())
	cfg.Clusters = append(cfg.Clusters,
		&configv1.Cluster{Name: "web", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: strings.TrimPrefix(backend.URL, "http://")}}},
		&configv1.Cluster{Name: "dead", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: "127.0.0.1:1"}}})
	cfg.Routes = append(cfg.Routes,
		&configv1.Route{Id: "web", Team: "demo", Path: "/{p}", Cluster: "web", Auth: gatewaytest.Public},
		&configv1.Route{Id: "dead", Team: "demo", Path: "/dead/x", Cluster: "dead", Auth: gatewaytest.Public})
	g := gatewaytest.Start(t, cfg, nil)
	hc := gatewaytest.HTTP1Client(t)
	for _, p := range []string{"/ok", "/ok", "/fail", "/missing", "/dead/x"} {
		resp, _ := gatewaytest.Do(t, hc, "GET", g.URL()+p, "", nil)
		_ = resp
	}
	c := demov1connect.NewOrdersServiceClient(gatewaytest.H2CClient(t), g.URL(), connect.WithGRPC())
	if _, err := c.GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-1001"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-9999"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("unknown order: %v", err)
	}
	counts := func() map[string]routestats.Counts {
		m := map[string]routestats.Counts{}
		g.Node.RouteStats(func(id string, c routestats.Counts) { m[id] = c })
		return m
	}
	m := counts()
	for id, want := range map[string][2]uint64{"web": {4, 1}, "dead": {1, 1}, "orders.GetOrder": {2, 0}} {
		if got := m[id]; got.Requests != want[0] || got.Errors != want[1] {
			t.Errorf("route %s: %d calls, %d failed; want %d, %d", id, got.Requests, got.Errors, want[0], want[1])
		}
	}
	// A new snapshot without the dead route: web keeps its counts, dead
	// is gone.
	cfg.Routes = cfg.Routes[:len(cfg.Routes)-1]
	cfg.Clusters = cfg.Clusters[:len(cfg.Clusters)-1]
	if err := g.Node.Apply(gatewaytest.WithoutAnonymousLimit(cfg)); err != nil {
		t.Fatal(err)
	}
	m = counts()
	if _, ok := m["dead"]; ok || m["web"].Requests != 4 {
		t.Errorf("after a swap: dead %v, web %d calls; want dead gone, web 4", ok, m["web"].Requests)
	}
}
