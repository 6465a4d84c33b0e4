package fleet_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/rollout"
	"github.com/portico-gw/portico/gateway/routestats"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// probeFleet is a control plane that stages versions (bake 300 ms) and
// four nodes that nobody calls, node-00 and node-01 labelled canaries;
// the orders team's cluster is a backend that notes every call.
func probeFleet(t *testing.T) (*controlPlane, []*gatewayNode, *callLog) {
	t.Helper()
	cp := startControlWith(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"), distribution.RolloutOptions{
		Bake: 300 * time.Millisecond, AckTimeout: 10 * time.Second, MinRequests: 10,
	})
	var nodes []*gatewayNode
	for i := range 4 {
		var labels map[string]string
		if i < 2 {
			labels = map[string]string{"canary": "true"}
		}
		nodes = append(nodes, startNodeWith(t, cp.url, fmt.Sprintf("node-%02d", i), "", "eu", labels))
	}
	calls := &callLog{}
	srv := httptest.NewServer(calls)
	t.Cleanup(srv.Close)
	setUp(t, cp, strings.TrimPrefix(srv.URL, "http://"))
	return cp, nodes, calls
}

// callLog is a backend that answers 200 and notes each call's path,
// caller (X-Auth-Client-Id) and whether it carried a credential.
type callLog struct {
	mu    sync.Mutex
	calls []loggedCall
}

type loggedCall struct {
	path, client string
	credential   bool
}

func (l *callLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.calls = append(l.calls, loggedCall{path: r.URL.Path, client: r.Header.Get("X-Auth-Client-Id"),
		credential: r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != ""})
	l.mu.Unlock()
	_, _ = w.Write([]byte("ok"))
}

func (l *callLog) snapshot() []loggedCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]loggedCall(nil), l.calls...)
}

// evidenceOf is route's evidence in the rollout's last judged stage.
func evidenceOf(st distribution.Status, route string) (rollout.RouteEvidence, bool) {
	if st.Rollout == nil {
		return rollout.RouteEvidence{}, false
	}
	for _, e := range st.Rollout.Routes {
		if e.Route == route {
			return e, true
		}
	}
	return rollout.RouteEvidence{}, false
}

// TestProbesJudgeQuietRoutes is issue 16's "a stage must not pass on no
// evidence": with nobody calling, a new route is judged on the canaries'
// synthetic probes and goes everywhere, and a change that fails every
// call is reverted at the canaries on them. The probes reach the backend
// as the platform's synthetic caller, without a credential, and are not
// counted as the route's calls.
func TestProbesJudgeQuietRoutes(t *testing.T) {
	t.Parallel()
	start := time.Now()
	cp, nodes, calls := probeFleet(t)
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first config everywhere", allRun(4, v1))

	// A new route nobody calls.
	v2 := putRoute(t, cp, "orders.items", "/v1/orders/{id}/items")
	gatewaytest.WaitFor(t, 30*time.Second, "the new route's rollout done", func() bool {
		st := cp.Distribution.Status()
		return st.Rollout != nil && st.Rollout.Version == v2 && st.Rollout.State != distribution.RolloutRunning
	})
	st := cp.Distribution.Status()
	if st.Rollout.State != distribution.RolloutDone || !allRun(4, v2)(st) {
		t.Fatalf("rollout %+v: want version %d done on every node", st.Rollout, v2)
	}
	e, ok := evidenceOf(st, "orders.items")
	if !ok || e.New.Requests != 0 || e.NewProbes.Requests < distribution.DefaultMinProbes || e.NewProbes.Errors != 0 {
		t.Errorf("orders.items evidence %+v (found %v): want no calls and at least %d passing probes on the new version", e, ok, distribution.DefaultMinProbes)
	}
	probed := 0
	for _, c := range calls.snapshot() {
		if c.credential {
			t.Errorf("the backend got a credential on %s", c.path)
		}
		if c.path == "/v1/orders/probe/items" {
			probed++
			if c.client != "portico-synthetic" {
				t.Errorf("a probe came as X-Auth-Client-Id %q, want portico-synthetic", c.client)
			}
		}
	}
	if probed == 0 {
		t.Errorf("the backend saw no probe of /v1/orders/probe/items; it saw %+v", calls.snapshot())
	}
	for _, n := range nodes {
		n.gw.Node.RouteStats(func(id string, c routestats.Counts) {
			if c.Requests != 0 || c.Refused != 0 {
				t.Errorf("route %s counted %d calls, %d refused: probes counted as calls", id, c.Requests, c.Refused)
			}
		})
	}

	// A change that fails every call, and still nobody calls.
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	t.Cleanup(failing.Close)
	bad := pointCluster(t, cp, strings.TrimPrefix(failing.URL, "http://"))
	gatewaytest.WaitFor(t, 30*time.Second, "the bad change's rollout over", func() bool {
		st := cp.Distribution.Status()
		return st.Rollout != nil && st.Rollout.Version == bad && st.Rollout.State != distribution.RolloutRunning
	})
	st = cp.Distribution.Status()
	if st.Rollout.State != distribution.RolloutReverted || st.Rollout.Stage != "canary" || !strings.Contains(st.Rollout.Evidence, "synthetic probes") {
		t.Fatalf("rollout %+v: want the failing change reverted at the canaries on probes", st.Rollout)
	}
	if e, _ := evidenceOf(st, "orders.list"); e.NewProbes.Errors == 0 || e.OldProbes.Requests == 0 || e.OldProbes.Errors != 0 {
		t.Errorf("orders.list evidence %+v: want failed probes on the new version, passing ones on the old", e)
	}
	waitFleet(t, cp, "the revert everywhere", func(s distribution.Status) bool { return s.Version > bad && allRun(4, s.Version)(s) })
	for _, n := range nodes {
		if code, body := n.get(t, "/v1/orders"); code != 200 || body != "ok" {
			t.Errorf("after the revert, GET /v1/orders = %d %q, want 200 from the good backend", code, body)
		}
	}
	t.Logf("wall time %v", time.Since(start).Round(time.Millisecond))
}

// TestUnprobedQuietRoutePauses: a changed route that cannot be probed
// (its default probe does not match it: a regex header match) and that
// nobody calls leaves the stage without evidence; at the maximum bake the
// rollout pauses, says why, and goes on when resumed, without pausing
// again for that route.
func TestUnprobedQuietRoutePauses(t *testing.T) {
	t.Parallel()
	start := time.Now()
	cp, _, _ := probeFleet(t)
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first config everywhere", allRun(4, v1))
	ch, err := cp.admin.PutRoute(context.Background(), connect.NewRequest(&adminv1.PutRouteRequest{Team: "orders", Route: &configv1.Route{
		Id: "orders.v2", Hosts: []string{"api.example.com"}, Path: "/v1/orders/v2", Cluster: "orders",
		Headers: []*configv1.HeaderMatch{{Name: "X-Version", Match: &configv1.HeaderMatch_Regex{Regex: "2\\.[0-9]+"}}},
		Auth:    &configv1.RouteAuth{Public: true, Reviewer: "security"}}}))
	if err != nil {
		t.Fatal(err)
	}
	v2 := ch.Msg.GetChange().GetVersion().GetNumber()
	gatewaytest.WaitFor(t, 30*time.Second, "the rollout paused", func() bool {
		st := cp.Distribution.Status()
		return st.Rollout != nil && st.Rollout.Version == v2 && st.Rollout.State != distribution.RolloutRunning
	})
	st := cp.Distribution.Status()
	if st.Rollout.State != distribution.RolloutPaused || st.Rollout.Stage != "canary" || !strings.Contains(st.Rollout.Evidence, "no evidence for route orders.v2") {
		t.Fatalf("rollout %+v: want it paused at the canaries for want of evidence on orders.v2", st.Rollout)
	}
	// Resumed, then held by an operator while two more changes join the
	// train: one to another route keeps the waiver, one to orders.v2
	// itself does not.
	if !cp.Distribution.Resume() || !cp.Distribution.Pause() {
		t.Fatal("Resume or Pause refused")
	}
	v3 := putRoute(t, cp, "orders.other", "/v1/orders/other")
	if !cp.Distribution.Resume() {
		t.Fatal("Resume refused")
	}
	gatewaytest.WaitFor(t, 30*time.Second, "the rollout done", func() bool {
		st := cp.Distribution.Status()
		return st.Rollout != nil && st.Rollout.Version == v3 && st.Rollout.State != distribution.RolloutRunning
	})
	st = cp.Distribution.Status()
	if st.Rollout.State != distribution.RolloutDone || !allRun(4, v3)(st) || st.Rollout.Evidence != "" {
		t.Errorf("after the resume: rollout %+v; want version %d done on every node, paused once", st.Rollout, v3)
	}
	t.Logf("wall time %v", time.Since(start).Round(time.Millisecond))
}

// TestWaiverEndsWithTheRouteChanged: an operator's resume waives a
// quiet route for the rest of the train, until a change of the train
// changes that route again.
func TestWaiverEndsWithTheRouteChanged(t *testing.T) {
	t.Parallel()
	cp, _, _ := probeFleet(t)
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first config everywhere", allRun(4, v1))
	put := func(regex string) int64 {
		ch, err := cp.admin.PutRoute(context.Background(), connect.NewRequest(&adminv1.PutRouteRequest{Team: "orders", Route: &configv1.Route{
			Id: "orders.v2", Hosts: []string{"api.example.com"}, Path: "/v1/orders/v2", Cluster: "orders",
			Headers: []*configv1.HeaderMatch{{Name: "X-Version", Match: &configv1.HeaderMatch_Regex{Regex: regex}}},
			Auth:    &configv1.RouteAuth{Public: true, Reviewer: "security"}}}))
		if err != nil {
			t.Fatal(err)
		}
		return ch.Msg.GetChange().GetVersion().GetNumber()
	}
	paused := func(v int64) {
		t.Helper()
		gatewaytest.WaitFor(t, 30*time.Second, fmt.Sprintf("version %d paused for want of evidence", v), func() bool {
			st := cp.Distribution.Status()
			return st.Rollout != nil && st.Rollout.Version == v && st.Rollout.State == distribution.RolloutPaused &&
				strings.Contains(st.Rollout.Evidence, "no evidence for route orders.v2")
		})
	}
	v2 := put("2\\.[0-9]+")
	paused(v2)
	if !cp.Distribution.Resume() || !cp.Distribution.Pause() {
		t.Fatal("Resume or Pause refused")
	}
	v3 := put("3\\.[0-9]+")
	if !cp.Distribution.Resume() {
		t.Fatal("Resume refused")
	}
	paused(v3)
}

// TestProbersToldToStop: the canaries probe while a rollout runs and are
// told to stop when it ends; a canary whose stream broke meanwhile (it
// probes on, the set outlives the stream) is told when it reconnects.
func TestProbersToldToStop(t *testing.T) {
	t.Parallel()
	cp, nodes, _ := probeFleet(t)
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first config everywhere", allRun(4, v1))
	probing := func(n *gatewayNode) string { return n.probing.Load().(string) }

	// A rollout held at the canaries: both probe its version, the
	// baseline nodes the version before.
	putRoute(t, cp, "orders.items", "/v1/orders/{id}/items")
	if !cp.Distribution.Pause() {
		t.Fatal("Pause refused")
	}
	st := cp.Distribution.Status()
	prev := ""
	for _, n := range st.Nodes {
		if n.Version == v1 {
			prev = n.SHA256
		}
	}
	gatewaytest.WaitFor(t, 10*time.Second, "canaries probing the new version, the others the old", func() bool {
		st := cp.Distribution.Status()
		return probing(nodes[0]) == st.SHA256 && probing(nodes[1]) == st.SHA256 && probing(nodes[2]) == prev && probing(nodes[3]) == prev
	})

	// node-00's stream breaks; the rollout ends while it is away.
	nodes[0].disconnect()
	if !cp.Distribution.Abort() {
		t.Fatal("Abort refused")
	}
	gatewaytest.WaitFor(t, 10*time.Second, "the connected probers told to stop", func() bool {
		return probing(nodes[1]) == "" && probing(nodes[2]) == "" && probing(nodes[3]) == ""
	})
	if probing(nodes[0]) == "" {
		t.Fatal("node-00 was told to stop while disconnected")
	}
	nodes[0].reconnect()
	gatewaytest.WaitFor(t, 10*time.Second, "node-00 told to stop once back", func() bool { return probing(nodes[0]) == "" })
}

// TestManyChangedRoutesShared: a change touching more routes than a node
// probes (500) shares them out among the canaries, each route to one.
func TestManyChangedRoutesShared(t *testing.T) {
	t.Parallel()
	cp, nodes, _ := probeFleet(t)
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first config everywhere", allRun(4, v1))
	ctx := context.Background()
	cluster, err := cp.admin.GetCluster(ctx, connect.NewRequest(&adminv1.GetClusterRequest{Team: "orders", Id: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	tc := &adminv1.TeamConfig{Team: "orders", Clusters: []*configv1.Cluster{cluster.Msg.GetCluster()}}
	for i := range 900 {
		tc.Routes = append(tc.Routes, &configv1.Route{Id: fmt.Sprintf("orders.r%03d", i), Hosts: []string{"api.example.com"},
			Path: fmt.Sprintf("/v1/orders/r%03d", i), Cluster: "orders", Auth: &configv1.RouteAuth{Public: true, Reviewer: "security"}})
	}
	if _, err := cp.admin.ApplyTeam(ctx, connect.NewRequest(&adminv1.ApplyTeamRequest{Config: tc})); err != nil {
		t.Fatal(err)
	}
	ids := func(n *gatewayNode) []string { return n.probeIDs.Load().([]string) }
	gatewaytest.WaitFor(t, 10*time.Second, "both canaries told their share", func() bool {
		return len(ids(nodes[0])) > 0 && len(ids(nodes[1])) > 0 && nodes[0].probing.Load() == cp.Distribution.Status().SHA256
	})
	a, b := ids(nodes[0]), ids(nodes[1])
	seen := map[string]int{}
	for _, id := range append(slices.Clone(a), b...) {
		seen[id]++
	}
	if len(a) > 500 || len(b) > 500 || len(seen) != 900 {
		t.Errorf("canaries probe %d and %d routes, %d different; want at most 500 each, all 900 new routes between them", len(a), len(b), len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("route %s given to %d canaries", id, n)
		}
	}
}
