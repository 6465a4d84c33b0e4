package fleet_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control/distribution"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// TestRevertUndoesOneChange is issue 16's reproduction: route x is served
// everywhere; then, while the rollout of the first runs, three changes in
// a row: a new route a, x's cluster pointed at a failing backend, a new
// route b. The canaries regress on x; the revert undoes the cluster
// change alone, and the train goes on with a and b: at the end every node
// serves x (on its old backend), a and b. Before, the revert sent every
// node the whole snapshot the train was staged from, and a and b were
// 404 everywhere.
func TestRevertUndoesOneChange(t *testing.T) {
	// Not parallel: one staged fleet (ten nodes with traffic) at a time.
	start := time.Now()
	cp, nodes := stagedFleet(t)
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(10, v1))
	traffic(t, nodes)

	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	t.Cleanup(failing.Close)
	va := putRoute(t, cp, "orders.a", "/v1/orders/a")
	bad := pointCluster(t, cp, strings.TrimPrefix(failing.URL, "http://"))
	badAt := time.Now()
	vb := putRoute(t, cp, "orders.b", "/v1/orders/b")
	if va != v1+1 || bad != va+1 || vb != bad+1 {
		t.Fatalf("versions %d, %d, %d after %d: want one each", va, bad, vb, v1)
	}

	// The revert: a version of its own that undoes the cluster change.
	// The nodes that ran the bad change are the canaries; how long until
	// they all run the revert is measured from its commit.
	var revertV int64
	var revertAt time.Time
	gatewaytest.WaitFor(t, 30*time.Second, "the revert of version "+fmt.Sprint(bad), func() bool {
		resp, err := cp.admin.GetVersion(context.Background(), connect.NewRequest(&adminv1.GetVersionRequest{Number: vb + 1}))
		if err != nil {
			return false
		}
		revertV, revertAt = resp.Msg.GetVersion().GetNumber(), resp.Msg.GetVersion().GetCreatedAt().AsTime()
		return true
	})
	var canariesAt time.Time
	gatewaytest.WaitFor(t, 30*time.Second, "the canaries on the revert", func() bool {
		st := cp.Distribution.Status()
		for _, n := range st.Nodes {
			if n.Labels["canary"] == "true" && n.Version != revertV && n.Version < revertV {
				return false
			}
		}
		canariesAt = time.Now()
		return true
	})
	rv, err := cp.admin.GetVersion(context.Background(), connect.NewRequest(&adminv1.GetVersionRequest{Number: revertV}))
	if err != nil {
		t.Fatal(err)
	}
	if v := rv.Msg.GetVersion(); v.GetCreatedBy() != "system" || v.GetDiff() != "~ orders cluster orders" ||
		!strings.Contains(v.GetMessage(), fmt.Sprintf("rollout.revert of version %d", bad)) || !strings.Contains(v.GetMessage(), "route orders.list failed") {
		t.Errorf("revert version %+v: want the system's revert of version %d, undoing the orders cluster alone", v, bad)
	}
	reverted := time.Now()

	// The train goes on with the revert, to every node.
	gatewaytest.WaitFor(t, 60*time.Second, "every node on the revert", func() bool {
		st := cp.Distribution.Status()
		return allRun(10, revertV)(st) && st.Rollout != nil && st.Rollout.Version == revertV && st.Rollout.State == distribution.RolloutDone
	})
	for i, n := range nodes {
		for path, want := range map[string]string{"/v1/orders": "orders /v1/orders", "/v1/orders/a": "orders /v1/orders/a", "/v1/orders/b": "orders /v1/orders/b"} {
			if code, body := n.get(t, path); code != 200 || body != want {
				t.Errorf("node %d %s after the revert: %d %q, want 200 %q", i, path, code, body, want)
			}
		}
	}
	// The audit log tells the orders team what happened and why.
	audit, err := cp.admin.ListAudit(context.Background(), connect.NewRequest(&adminv1.ListAuditRequest{Limit: 10}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range audit.Msg.GetEntries() {
		if e.GetAction() == "rollout.revert" && e.GetTeam() == "orders" && e.GetObject() == fmt.Sprintf("version %d", bad) &&
			strings.Contains(e.GetDetail(), "undone: orders cluster orders") {
			found = true
		}
	}
	if !found {
		t.Errorf("no rollout.revert audit entry for orders naming the undone cluster: %v", audit.Msg.GetEntries())
	}
	t.Logf("train of 3 changes, 1 reverted: the revert committed %v after the bad change, on the canaries that ran it %v after its commit, on every node %v later; test %v",
		reverted.Sub(badAt).Round(time.Millisecond), canariesAt.Sub(revertAt).Round(time.Millisecond), time.Since(reverted).Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond))
}

// TestStreamOfChanges is issue 16's stream of changes, compressed: two
// teams commit 40 changes 50 ms apart while rollouts run (bake 300 ms);
// the eleventh points the orders team's cluster at a failing backend.
// The automatic revert undoes that change alone: at the end every node
// serves every other change, and the orders team reads what happened.
//
// PORTICO_FULL_LENGTH=1 runs it at the length instead: 100
// changes one second apart, stages baking 3 s (about 3 minutes; not in
// the suite).
func TestStreamOfChanges(t *testing.T) {
	// Not parallel: one staged fleet (ten nodes with traffic) at a time.
	start := time.Now()
	changes, pace, bake, wait := 40, 50*time.Millisecond, 300*time.Millisecond, 60*time.Second
	if os.Getenv("PORTICO_FULL_LENGTH") != "" {
		changes, pace, bake, wait = 100, time.Second, 3*time.Second, 5*time.Minute
	}
	cp, nodes := stagedFleetBaking(t, bake)
	ctx := context.Background()
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	if _, err := cp.admin.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Team: &adminv1.Team{
		Name: "search", Owns: []*adminv1.Ownership{{Host: "api.example.com", PathPrefix: "/v1/search"}},
		Upstreams: []*adminv1.Upstream{{Address: &adminv1.Upstream_Cidr{Cidr: "127.0.0.2/32"}}}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.admin.PutCluster(ctx, connect.NewRequest(&adminv1.PutClusterRequest{Team: "search", Cluster: &configv1.Cluster{
		Name: "search", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: backendOn(t, "127.0.0.2:0", "search")}}}})); err != nil {
		t.Fatal(err)
	}
	gatewaytest.WaitFor(t, wait, "the first routes everywhere", func() bool {
		s := cp.Distribution.Status()
		return s.Version > v1 && allRun(10, s.Version)(s) && (s.Rollout == nil || s.Rollout.State == distribution.RolloutDone)
	})
	traffic(t, nodes)

	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	t.Cleanup(failing.Close)
	var paths []string
	var bad int64
	for i := range changes {
		switch {
		case i == 10:
			bad = pointCluster(t, cp, strings.TrimPrefix(failing.URL, "http://"))
		case i%2 == 0:
			id := fmt.Sprintf("orders.r%02d", i)
			putRoute(t, cp, id, "/v1/orders/r"+fmt.Sprint(i))
			paths = append(paths, "/v1/orders/r"+fmt.Sprint(i))
		default:
			p := "/v1/search/r" + fmt.Sprint(i)
			if _, err := cp.admin.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: "search", Route: &configv1.Route{
				Id: fmt.Sprintf("search.r%02d", i), Hosts: []string{"api.example.com"}, Path: p, Cluster: "search",
				Auth: &configv1.RouteAuth{Public: true, Reviewer: "security"}}})); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
		time.Sleep(pace) // the stream's pace
	}
	last, err := cp.admin.ListVersions(ctx, connect.NewRequest(&adminv1.ListVersionsRequest{Limit: 1}))
	if err != nil {
		t.Fatal(err)
	}
	committed := last.Msg.GetVersions()[0].GetNumber()

	// Every node ends on one version that has every change but the bad
	// one, and the train's rollout is done.
	var final int64
	gatewaytest.WaitFor(t, wait, "the train done on every node", func() bool {
		st := cp.Distribution.Status()
		if st.Rollout == nil || st.Rollout.State != distribution.RolloutDone || !allRun(10, st.Rollout.Version)(st) {
			return false
		}
		final = st.Rollout.Version
		return true
	})
	served := 0
	for i, n := range nodes {
		for _, p := range append([]string{"/v1/orders"}, paths...) {
			team := "orders"
			if strings.HasPrefix(p, "/v1/search") {
				team = "search"
			}
			if code, body := n.get(t, p); code != 200 || body != team+" "+p {
				t.Errorf("node %d %s at the end: %d %q, want 200 from %s", i, p, code, body, team)
			} else {
				served++
			}
		}
	}
	// One revert, of the bad change alone.
	vs, err := cp.admin.ListVersions(ctx, connect.NewRequest(&adminv1.ListVersionsRequest{Limit: 100}))
	if err != nil {
		t.Fatal(err)
	}
	reverts := 0
	for _, v := range vs.Msg.GetVersions() {
		if v.GetCreatedBy() == "system" {
			reverts++
			if !strings.Contains(v.GetMessage(), fmt.Sprintf("rollout.revert of version %d:", bad)) || v.GetDiff() != "~ orders cluster orders" {
				t.Errorf("revert %d: %q, diff %q; want the revert of version %d, the orders cluster alone", v.GetNumber(), v.GetMessage(), v.GetDiff(), bad)
			}
		}
	}
	if reverts != 1 {
		t.Errorf("%d reverts, want 1", reverts)
	}
	ro, err := admintest.Client(cp.url, teamToken(t, cp, "orders")).ListAudit(ctx, connect.NewRequest(&adminv1.ListAuditRequest{Limit: 100}))
	if err == nil {
		found := false
		for _, e := range ro.Msg.GetEntries() {
			found = found || (e.GetAction() == "rollout.revert" && e.GetObject() == fmt.Sprintf("version %d", bad))
		}
		if !found {
			t.Error("the orders team's audit log has no rollout.revert of its change")
		}
	}
	// rollout status shows each team the calls of its own changed routes
	// in the last judged stage; the platform, every team's.
	for team, prefix := range map[string]string{"orders": "orders.", "search": "search.", "": ""} {
		c := cp.admin
		if team != "" {
			c = admintest.Client(cp.url, teamToken(t, cp, team))
		}
		resp, err := c.GetRollout(ctx, connect.NewRequest(&adminv1.GetRolloutRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		routes := resp.Msg.GetRollout().GetRoutes()
		for _, e := range routes {
			if !strings.HasPrefix(e.GetRoute(), prefix) {
				t.Errorf("%q's rollout status shows route %s's evidence", team, e.GetRoute())
			}
		}
		if team == "" && len(routes) == 0 {
			t.Error("the platform's rollout status shows no route's evidence")
		}
	}
	t.Logf("%d changes committed (versions up to %d), 1 reverted (version %d); every node on version %d, serving %d routes each (%d calls checked); test %v",
		changes, committed, bad, final, len(paths)+1, served, time.Since(start).Round(time.Millisecond))
}

// TestFirstConfigUnstaged: a fleet's first config, a version after one
// that routes nothing, has nothing to break and no traffic to be judged
// against: it goes to every node at once, even with a one-minute bake.
// (Staged, it would take four bakes and more.) A later change is staged.
func TestFirstConfigUnstaged(t *testing.T) {
	cp, _ := stagedFleetBaking(t, time.Minute)
	setUp(t, cp, backend(t, "orders"))
	committed := time.Now()
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first config on every node", allRun(10, v1))
	t.Logf("first config on all 10 nodes %v after the commit (bake 1 min)", time.Since(committed).Round(time.Millisecond))
	if st := cp.Distribution.Status(); st.Rollout != nil {
		t.Errorf("the first config was staged: %+v", st.Rollout)
	}
	v2 := putRoute(t, cp, "orders.get", "/v1/orders/{id}")
	waitFleet(t, cp, "the second change staged", func(s distribution.Status) bool {
		return s.Rollout != nil && s.Rollout.Version == v2 && s.Rollout.Previous == v1 && s.Rollout.Stage == "canary"
	})
}

// TestCanaryJoinsMidRollout: a canary that connects while a rollout is at
// the canaries gets the rollout's version, not the one it started from;
// an unlabelled node gets the version the rest of the fleet runs.
func TestCanaryJoinsMidRollout(t *testing.T) {
	cp, _ := stagedFleetBaking(t, time.Minute)
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first config on every node", allRun(10, v1))
	v2 := putRoute(t, cp, "orders.get", "/v1/orders/{id}")
	waitFleet(t, cp, "the canaries on the new version", func(s distribution.Status) bool { return allRunOf(s, v2, 4) })
	startNodeWith(t, cp.url, "node-late-canary", "", "eu", map[string]string{"canary": "true"})
	startNodeWith(t, cp.url, "node-late", "", "eu", nil)
	waitFleet(t, cp, "the late nodes served", func(s distribution.Status) bool {
		got := map[string]int64{}
		for _, n := range s.Nodes {
			got[n.ID] = n.Version
		}
		return got["node-late-canary"] == v2 && got["node-late"] == v1
	})
}

// TestAbortUndoesNewestChange: an operator's abort of a train of two
// changes undoes the newest alone; the other goes on to every node.
func TestAbortUndoesNewestChange(t *testing.T) {
	cp, nodes := stagedFleet(t)
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(10, v1))
	va := putRoute(t, cp, "orders.a", "/v1/orders/a")
	if !cp.Distribution.Pause() {
		t.Fatal("could not pause the rollout of the first change")
	}
	vb := putRoute(t, cp, "orders.b", "/v1/orders/b")
	if _, err := cp.admin.AbortRollout(context.Background(), connect.NewRequest(&adminv1.AbortRolloutRequest{})); err != nil {
		t.Fatal(err)
	}
	revertV := trainDone(t, cp, vb)
	rv, err := cp.admin.GetVersion(context.Background(), connect.NewRequest(&adminv1.GetVersionRequest{Number: revertV}))
	if err != nil {
		t.Fatal(err)
	}
	if v := rv.Msg.GetVersion(); v.GetCreatedBy() != "system" || v.GetDiff() != "~ orders route orders.b" ||
		!strings.Contains(v.GetMessage(), fmt.Sprintf("rollout.abort of version %d", vb)) {
		t.Errorf("the abort's version %+v: want the system's abort of version %d, undoing orders.b alone", v, vb)
	}
	for i, n := range nodes {
		if code, _ := n.get(t, "/v1/orders/a"); code != 200 {
			t.Errorf("node %d /v1/orders/a (version %d's) after the abort: %d, want 200", i, va, code)
		}
		if code, _ := n.get(t, "/v1/orders/b"); code != 404 {
			t.Errorf("node %d /v1/orders/b (the aborted change's) after the abort: %d, want 404", i, code)
		}
	}
}

// TestNACKUndoesItsChange: a canary refuses the train's newest version,
// naming the cluster that change added; the revert undoes that change
// alone, and the train's other change reaches every node.
func TestNACKUndoesItsChange(t *testing.T) {
	cp, nodes := stagedFleet(t)
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(10, v1))
	// The canary refuses the train's second version, naming its new
	// cluster.
	va := v1 + 1
	nodes[0].refuseCluster.Store("orders-new")
	nodes[0].refuse.Store(fmt.Sprintf("v%d", va+1))
	if got := putRoute(t, cp, "orders.a", "/v1/orders/a"); got != va {
		t.Fatalf("route a is version %d, want %d", got, va)
	}
	ch, err := cp.admin.PutCluster(context.Background(), connect.NewRequest(&adminv1.PutClusterRequest{Team: "orders", Cluster: &configv1.Cluster{
		Name: "orders-new", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: backend(t, "new")}}}}))
	if err != nil {
		t.Fatal(err)
	}
	vc := ch.Msg.GetChange().GetVersion().GetNumber()
	final := trainDone(t, cp, vc)
	rv, err := cp.admin.GetVersion(context.Background(), connect.NewRequest(&adminv1.GetVersionRequest{Number: final}))
	if err != nil {
		t.Fatal(err)
	}
	if v := rv.Msg.GetVersion(); v.GetCreatedBy() != "system" || v.GetDiff() != "~ orders cluster orders-new" ||
		!strings.Contains(v.GetMessage(), fmt.Sprintf("rollout.revert of version %d", vc)) || !strings.Contains(v.GetMessage(), "refused it") {
		t.Errorf("version %+v: want the system's revert of version %d for the canary's refusal, undoing orders-new alone", v, vc)
	}
	for i, n := range nodes {
		if code, _ := n.get(t, "/v1/orders/a"); code != 200 {
			t.Errorf("node %d /v1/orders/a after the revert: %d, want 200", i, code)
		}
	}
}

// TestShortBakeWaitsForReports: nodes report their counters every 1.5 s
// and stages bake 300 ms. A change that fails every call is still judged
// at the canaries, on counters reported after the bake, and reverted:
// before, each stage was judged on counters from before its bake, the
// failing route had no calls to judge, and the change reached every node.
func TestShortBakeWaitsForReports(t *testing.T) {
	cp := startControlWith(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"), distribution.RolloutOptions{
		Bake: 300 * time.Millisecond, AckTimeout: 10 * time.Second, MinRequests: 10,
	})
	var nodes []*gatewayNode
	for i := range 6 {
		var labels map[string]string
		if i < 2 {
			labels = map[string]string{"canary": "true"}
		}
		nodes = append(nodes, startNodeReporting(t, cp.url, fmt.Sprintf("node-%02d", i), "", "eu", labels, nodeToken, nil, 1500*time.Millisecond))
	}
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(6, v1))
	traffic(t, nodes)
	// A fleet in its steady state: every node has reported before.
	gatewaytest.WaitFor(t, 10*time.Second, "every node's first report", func() bool {
		for _, n := range cp.Distribution.Status().Nodes {
			if n.ReportedAt.IsZero() {
				return false
			}
		}
		return true
	})
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	t.Cleanup(failing.Close)
	bad := pointCluster(t, cp, strings.TrimPrefix(failing.URL, "http://"))
	gatewaytest.WaitFor(t, 30*time.Second, "the bad change's rollout over", func() bool {
		st := cp.Distribution.Status()
		return st.Rollout != nil && st.Rollout.Version == bad && st.Rollout.State != distribution.RolloutRunning
	})
	st := cp.Distribution.Status()
	if st.Rollout.State != distribution.RolloutReverted || st.Rollout.Stage != "canary" {
		t.Errorf("rollout %+v: want the failing change reverted at the canaries", st.Rollout)
	}
}

// trainDone waits until every one of the 10 nodes runs one version newer
// than after, with no rollout under way, and returns it.
func trainDone(t *testing.T, cp *controlPlane, after int64) int64 {
	t.Helper()
	var v int64
	gatewaytest.WaitFor(t, 30*time.Second, "the train done on every node", func() bool {
		st := cp.Distribution.Status()
		if st.Version <= after || !allRun(10, st.Version)(st) || (st.Rollout != nil && st.Rollout.State != distribution.RolloutDone) {
			return false
		}
		v = st.Version
		return true
	})
	return v
}
