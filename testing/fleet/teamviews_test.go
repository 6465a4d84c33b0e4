package fleet_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/control/distribution"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/admintest"
)

// TestRolloutStatusShowsATeamItsOwn: GetRollout tells a team admin
// about its own team only. The rollout's evidence quotes a node's whole
// refusal, which names other teams' objects and errors, and nodes report
// every team's unhealthy backends: a team admin of search reads neither
// about orders (the evidence becomes a sentence saying another team's
// objects stopped the rollout), while orders reads both about its own
// objects, and a platform admin everything.
func TestRolloutStatusShowsATeamItsOwn(t *testing.T) {
	// Not parallel: a staged fleet, like the rollout tests.
	cp := startControlWith(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"), distribution.RolloutOptions{
		Bake: 300 * time.Millisecond, AckTimeout: 10 * time.Second, MinRequests: 10,
	})
	nodes := []*gatewayNode{startNode(t, cp.url, "node-0", ""), startNode(t, cp.url, "node-1", "")}
	search := twoTeams(t, cp)
	ctx := context.Background()

	// An orders cluster that is healthy now and fails its checks later.
	var failing atomic.Bool
	hc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(hc.Close)
	if _, err := cp.admin.PutCluster(ctx, connect.NewRequest(&adminv1.PutClusterRequest{Team: "orders", Cluster: &configv1.Cluster{
		Name: "orders-hc", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
		Endpoints: []*configv1.Endpoint{{Address: strings.TrimPrefix(hc.URL, "http://")}},
		HealthCheck: &configv1.HealthCheck{Interval: durationpb.New(100 * time.Millisecond), UnhealthyThreshold: 1,
			Probe: &configv1.HealthCheck_Http{Http: &configv1.HTTPProbe{Path: "/"}}}}})); err != nil {
		t.Fatal(err)
	}
	// (The fleet serves no route yet: the change goes everywhere at
	// once, unstaged.)
	waitFleet(t, cp, "the cluster rolled out", func(s distribution.Status) bool {
		return s.Version > 0 && rolloutSettled(s) && allRunOf(s, s.Version, len(s.Nodes))
	})

	// The fleet's first route goes everywhere at once; the changes after
	// it are staged.
	first := searchRoute(t, search, "/v1/search")
	waitFleet(t, cp, "the fleet's first route everywhere", func(s distribution.Status) bool {
		return rolloutSettled(s) && allRunOf(s, first, len(s.Nodes))
	})

	// A node refuses orders' next change, naming orders' cluster, which
	// the change did not touch: there is no change of the train to undo,
	// and the rollout halts.
	v := cp.Distribution.Status().Version
	nodes[0].refuseCluster.Store("orders-hc")
	nodes[0].refuse.Store(fmt.Sprintf("v%d", v+1))
	putRoute(t, cp, "orders.get", "/v1/orders/{id}")
	waitFleet(t, cp, "the rollout halted", rolloutIs(distribution.RolloutHalted))
	failing.Store(true)
	waitFleet(t, cp, "orders-hc reported unhealthy", func(s distribution.Status) bool {
		for _, n := range s.Nodes {
			for _, c := range n.Clusters {
				for _, e := range c.GetEndpoints() {
					if c.GetName() == "orders-hc" && !e.GetHealthy() {
						return true
					}
				}
			}
		}
		return false
	})

	rollout := func(c adminv1connect.AdminServiceClient) (evidence string, unhealthy []string) {
		t.Helper()
		resp, err := c.GetRollout(ctx, connect.NewRequest(&adminv1.GetRolloutRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range resp.Msg.GetNodes() {
			unhealthy = append(unhealthy, n.GetUnhealthyEndpoints()...)
		}
		return resp.Msg.GetRollout().GetEvidence(), unhealthy
	}
	hasOrders := func(endpoints []string) bool {
		return slices.ContainsFunc(endpoints, func(e string) bool { return strings.HasPrefix(e, "orders-hc/") })
	}

	ev, unhealthy := rollout(search)
	if strings.Contains(ev, "refusing") || !strings.Contains(ev, "another team") {
		t.Errorf("search's token reads the rollout evidence %q, want a sentence that another team's objects stopped it, not the node's refusal of orders' change", ev)
	}
	if hasOrders(unhealthy) {
		t.Errorf("search's token reads the unhealthy endpoints %q, orders' backends among them", unhealthy)
	}
	orders := admintest.Client(cp.url, teamToken(t, cp, "orders"))
	for who, c := range map[string]adminv1connect.AdminServiceClient{"orders' token": orders, "the platform's token": cp.admin} {
		ev, unhealthy := rollout(c)
		if !strings.Contains(ev, "refusing v") {
			t.Errorf("%s reads the rollout evidence %q, want the node's refusal of orders' change", who, ev)
		}
		if !hasOrders(unhealthy) {
			t.Errorf("%s reads the unhealthy endpoints %q, want orders-hc's", who, unhealthy)
		}
	}
}
