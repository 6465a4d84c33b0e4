package fleet_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/control/distribution"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// TestReviewRolloutStatusShowsOtherTeams: GetRollout filters the NACKs a
// team admin sees (nackProto), but not the rollout's evidence, which
// quotes the node's whole refusal ("node X refused it: ..."), nor the
// nodes' unhealthy endpoints, which list every team's clusters and
// backend addresses. A team admin of search reads both about orders.
func TestReviewRolloutStatusShowsOtherTeams(t *testing.T) {
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
	waitFleet(t, cp, "the cluster rolled out", rolloutIs(distribution.RolloutDone))

	// A node refuses orders' next change: the rollout halts.
	v := cp.Distribution.Status().Version
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

	resp, err := search.GetRollout(ctx, connect.NewRequest(&adminv1.GetRolloutRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if ev := resp.Msg.GetRollout().GetEvidence(); strings.Contains(ev, "refusing") {
		t.Errorf("search's token reads the rollout evidence %q: the node's refusal of orders' change, which its NACK view hides (%q)",
			ev, resp.Msg.GetHalted().GetError())
	}
	for _, n := range resp.Msg.GetNodes() {
		for _, e := range n.GetUnhealthyEndpoints() {
			if strings.HasPrefix(e, "orders") {
				t.Errorf("search's token reads node %s's unhealthy endpoint %q, another team's backend", n.GetId(), e)
			}
		}
	}
}
