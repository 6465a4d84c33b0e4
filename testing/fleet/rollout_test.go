package fleet_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control/distribution"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// stagedFleet is a control plane that stages versions (bake 300 ms) and
// ten nodes in two regions, nodes 00 and 01 labelled canaries; traffic
// flows to /v1/orders on every node until the test ends.
func stagedFleet(t *testing.T) (*controlPlane, []*gatewayNode) {
	t.Helper()
	cp := startControlWith(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"), distribution.RolloutOptions{
		Bake: 300 * time.Millisecond, AckTimeout: 10 * time.Second, MinRequests: 10,
	})
	var nodes []*gatewayNode
	for i := range 10 {
		region := "eu"
		if i >= 5 {
			region = "us"
		}
		var labels map[string]string
		if i < 2 {
			labels = map[string]string{"canary": "true"}
		}
		nodes = append(nodes, startNodeWith(t, cp.url, fmt.Sprintf("node-%02d", i), "", region, labels))
	}
	return cp, nodes
}

// traffic sends GET /v1/orders to every node in turn until the test ends.
func traffic(t *testing.T, nodes []*gatewayNode) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	client := &http.Client{Timeout: 5 * time.Second}
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", n.gw.URL()+"/v1/orders", nil)
				req.Host = "api.example.com"
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
}

func pointCluster(t *testing.T, cp *controlPlane, addr string) int64 {
	t.Helper()
	ch, err := cp.admin.PutCluster(context.Background(), connect.NewRequest(&adminv1.PutClusterRequest{Team: "orders", Cluster: &configv1.Cluster{
		Name: "orders", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: addr}}}}))
	if err != nil {
		t.Fatal(err)
	}
	return ch.Msg.GetChange().GetVersion().GetNumber()
}

func rolloutIs(state string) func(distribution.Status) bool {
	return func(s distribution.Status) bool { return s.Rollout != nil && s.Rollout.State == state }
}

// TestRolloutRevertsRegression: a change that makes the orders route fail
// reaches the canaries, is judged on the route it touched, and is
// reverted automatically: it never reaches most nodes, and every node is
// back on the version before.
func TestRolloutRevertsRegression(t *testing.T) {
	t.Parallel()
	cp, nodes := stagedFleet(t)
	good := setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", func(s distribution.Status) bool {
		return s.Rollout != nil && s.Rollout.Version == v1 && s.Rollout.State == distribution.RolloutDone
	})
	_ = good
	traffic(t, nodes)

	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	t.Cleanup(failing.Close)
	bad := pointCluster(t, cp, strings.TrimPrefix(failing.URL, "http://"))
	waitFleet(t, cp, "the revert", rolloutIs(distribution.RolloutReverted))
	st := cp.Distribution.Status()
	if st.Rollout.Version != bad || st.Rollout.Stage != "canary" || !strings.Contains(st.Rollout.Evidence, "route orders.list failed") {
		t.Errorf("rollout %+v, want version %d reverted at the canary stage for orders.list", st.Rollout, bad)
	}
	waitFleet(t, cp, "every node back on the version before", allRun(10, v1))
	if st.Rollout.Reached > 2 {
		t.Errorf("the bad version reached %d nodes, want only the 2 canaries", st.Rollout.Reached)
	}
	for i, n := range nodes {
		if code, _ := n.get(t, "/v1/orders"); code != 200 {
			t.Errorf("node %d after the revert: %d", i, code)
		}
	}
}

// TestRolloutGoodChangeReachesEveryone: a change that keeps the route
// healthy goes through every stage to every node; a rollback to a version
// that ran everywhere goes to every node at once.
func TestRolloutGoodChangeReachesEveryone(t *testing.T) {
	t.Parallel()
	cp, nodes := stagedFleet(t)
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(10, v1))
	waitFleet(t, cp, "its rollout done", rolloutIs(distribution.RolloutDone))
	traffic(t, nodes)

	v2 := pointCluster(t, cp, backend(t, "orders-v2"))
	waitFleet(t, cp, "a staged rollout in progress", func(s distribution.Status) bool {
		return s.Rollout != nil && s.Rollout.Version == v2 && s.Rollout.Reached == 2 && s.Rollout.State == distribution.RolloutRunning
	})
	waitFleet(t, cp, "the rollout done", rolloutIs(distribution.RolloutDone))
	waitFleet(t, cp, "every node on the new version", allRun(10, v2))
	if st := cp.Distribution.Status(); st.Rollout.Reached != 10 {
		t.Errorf("rollout %+v", st.Rollout)
	}
	// Back to v1, which ran everywhere: all at once, no new rollout.
	back, err := cp.admin.Rollback(context.Background(), connect.NewRequest(&adminv1.RollbackRequest{To: v1}))
	if err != nil {
		t.Fatal(err)
	}
	waitFleet(t, cp, "every node back", allRun(10, back.Msg.GetChange().GetVersion().GetNumber()))
	if st := cp.Distribution.Status(); st.Rollout.Version != v2 {
		t.Errorf("the rollback started a rollout: %+v", st.Rollout)
	}
}
