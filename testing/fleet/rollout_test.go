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
	"github.com/portico-gw/portico/control/store"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// stagedFleet is a control plane that stages versions (bake 300 ms) and
// ten nodes in two regions, eu (00-04) and us (05-09), two labelled
// canaries in each (00, 01, 05, 06).
func stagedFleet(t *testing.T) (*controlPlane, []*gatewayNode) {
	t.Helper()
	return stagedFleetBaking(t, 300*time.Millisecond)
}

func stagedFleetBaking(t *testing.T, bake time.Duration) (*controlPlane, []*gatewayNode) {
	t.Helper()
	cp := startControlWith(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"), distribution.RolloutOptions{
		Bake: bake, AckTimeout: 10 * time.Second, MinRequests: 10,
	})
	var nodes []*gatewayNode
	for i := range 10 {
		region := "eu"
		if i >= 5 {
			region = "us"
		}
		var labels map[string]string
		if i%5 < 2 {
			labels = map[string]string{"canary": "true"}
		}
		nodes = append(nodes, startNodeWith(t, cp.url, fmt.Sprintf("node-%02d", i), "", region, labels))
	}
	return cp, nodes
}

// traffic sends GET /v1/orders to every node until the test ends.
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
				time.Sleep(10 * time.Millisecond) // ~100 calls/s a node: enough to judge, light on CI

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
	// Not parallel: one staged fleet (ten nodes with traffic) at a time.
	cp, nodes := stagedFleet(t)
	good := setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(10, v1))
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
	// The revert is a version of its own, equal to the one before, so a
	// control plane that restarts publishes that.
	waitFleet(t, cp, "every node back on the version before", allRun(10, bad+1))
	revert, err := cp.admin.GetVersion(context.Background(), connect.NewRequest(&adminv1.GetVersionRequest{Number: bad + 1}))
	before, _ := cp.admin.GetVersion(context.Background(), connect.NewRequest(&adminv1.GetVersionRequest{Number: v1}))
	if err != nil || revert.Msg.GetVersion().GetCreatedBy() != "system" || revert.Msg.GetVersion().GetRollbackOf() != v1 ||
		revert.Msg.GetVersion().GetSha256() != before.Msg.GetVersion().GetSha256() {
		t.Errorf("revert version = %v, %v; want version %d by system, equal to %d", revert.Msg.GetVersion(), err, bad+1, v1)
	}
	if st.Rollout.Reached > 4 {
		t.Errorf("the bad version reached %d nodes, want only the 4 canaries", st.Rollout.Reached)
	}
	for i, n := range nodes {
		if code, _ := n.get(t, "/v1/orders"); code != 200 {
			t.Errorf("node %d after the revert: %d", i, code)
		}
	}
	// The admin API tells it, and the audit log keeps the evidence.
	ro, err := cp.admin.GetRollout(context.Background(), connect.NewRequest(&adminv1.GetRolloutRequest{}))
	if err != nil || ro.Msg.GetRollout().GetState() != "reverted" || ro.Msg.GetTargetVersion() != bad+1 || len(ro.Msg.GetNodes()) != 10 {
		t.Errorf("GetRollout = %v, %v", ro.Msg, err)
	}
	// orders' token reads the evidence about its own route; another
	// team's only that another team's route regressed.
	for team, want := range map[string]string{"orders": "route orders.list failed", "search": "another team's routes"} {
		ro, err := admintest.Client(cp.url, teamToken(t, cp, team)).GetRollout(context.Background(), connect.NewRequest(&adminv1.GetRolloutRequest{}))
		if err != nil {
			t.Fatalf("GetRollout with %s's token: %v", team, err)
		}
		if ev := ro.Msg.GetRollout().GetEvidence(); !strings.Contains(ev, want) {
			t.Errorf("GetRollout with %s's token: evidence %q, want it to say %q", team, ev, want)
		}
	}
	audit, err := cp.admin.ListAudit(context.Background(), connect.NewRequest(&adminv1.ListAuditRequest{Limit: 5}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range audit.Msg.GetEntries() {
		if e.GetAction() == "rollout.revert" && e.GetObject() == fmt.Sprintf("version %d", bad) && e.GetVersion() == bad+1 && strings.Contains(e.GetDetail(), "orders.list") {
			found = true
		}
	}
	if !found {
		t.Errorf("no rollout.revert entry with the evidence in %v", audit.Msg.GetEntries())
	}
}

// TestRolloutRevertsLatencyRegression: a change that makes the orders
// route slow (300 ms, where it took about a millisecond) is reverted at the
// canaries on its latency: the p99 of its calls, or, when the four
// canaries served fewer than the 10 calls a judgement needs in the 800 ms
// bake (at 300 ms a call they may), the median of their synthetic probes
// against the old version's.
//
// The latency leaves room for a loaded machine, where the old version's
// p99 reaches 64 ms and the new one must be more than twice it: it lands
// in the 512 ms bucket, not the 128 ms one.
func TestRolloutRevertsLatencyRegression(t *testing.T) {
	// Not parallel: one staged fleet at a time.
	cp, nodes := stagedFleetBaking(t, 800*time.Millisecond)
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(10, v1))
	traffic(t, nodes)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		_, _ = io.WriteString(w, "slow")
	}))
	t.Cleanup(slow.Close)
	bad := pointCluster(t, cp, strings.TrimPrefix(slow.URL, "http://"))
	waitFleet(t, cp, "the revert", rolloutIs(distribution.RolloutReverted))
	st := cp.Distribution.Status()
	if ev := st.Rollout.Evidence; st.Rollout.Version != bad || st.Rollout.Stage != "canary" ||
		!strings.Contains(ev, "route orders.list p99 ") && !strings.Contains(ev, "route orders.list synthetic probes took ") {
		t.Errorf("rollout %+v, want version %d reverted at the canaries on orders.list's latency", st.Rollout, bad)
	}
	waitFleet(t, cp, "every node back on the version before", allRun(10, bad+1))
}

// TestRolloutPauseResumeAbort: a paused rollout stays at its stage past
// the bake; resumed it goes on; aborted, every node is back on the
// version before.
func TestRolloutPauseResumeAbort(t *testing.T) {
	// Not parallel: one staged fleet (ten nodes with traffic) at a time.
	cp, nodes := stagedFleet(t)
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(10, v1))
	traffic(t, nodes)
	ctx := context.Background()

	v2 := pointCluster(t, cp, backend(t, "orders-v2"))
	if _, err := cp.admin.PauseRollout(ctx, connect.NewRequest(&adminv1.PauseRolloutRequest{})); err != nil {
		t.Fatal(err)
	}
	// Once its bake is over, the paused rollout holds at the canaries.
	waitFleet(t, cp, "the paused rollout holding", func(s distribution.Status) bool { return s.Rollout != nil && s.Rollout.Holding })
	st := cp.Distribution.Status()
	if st.Rollout.Version != v2 || st.Rollout.State != distribution.RolloutPaused || st.Rollout.Reached != 4 {
		t.Fatalf("paused rollout %+v, want version %d paused at the 4 canaries", st.Rollout, v2)
	}
	if _, err := cp.admin.ResumeRollout(ctx, connect.NewRequest(&adminv1.ResumeRolloutRequest{})); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, cp, "the rollout past the canaries", func(s distribution.Status) bool { return s.Rollout.Reached > 4 })
	if _, err := cp.admin.AbortRollout(ctx, connect.NewRequest(&adminv1.AbortRolloutRequest{})); err != nil {
		// It may have finished meanwhile, on a slow machine: then there is
		// nothing to abort.
		if st := cp.Distribution.Status(); st.Rollout.State != distribution.RolloutDone {
			t.Fatal(err)
		}
		return
	}
	waitFleet(t, cp, "every node back on the version before", allRun(10, v2+1))
	if st := cp.Distribution.Status(); st.Rollout.State != distribution.RolloutAborted {
		t.Errorf("rollout %+v, want aborted", st.Rollout)
	}
	if _, err := cp.admin.AbortRollout(ctx, connect.NewRequest(&adminv1.AbortRolloutRequest{})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("aborting again: %v, want failed_precondition", err)
	}
}

// TestRolloutGoodChangeReachesEveryone: a change that keeps the route
// healthy goes through every stage to every node; a rollback to a version
// that ran everywhere goes to every node at once.
func TestRolloutGoodChangeReachesEveryone(t *testing.T) {
	// Not parallel: one staged fleet (ten nodes with traffic) at a time.
	cp, nodes := stagedFleet(t)
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(10, v1))
	traffic(t, nodes)

	v2 := pointCluster(t, cp, backend(t, "orders-v2"))
	waitFleet(t, cp, "a staged rollout in progress", func(s distribution.Status) bool {
		return s.Rollout != nil && s.Rollout.Version == v2 && s.Rollout.Reached == 4 && s.Rollout.State == distribution.RolloutRunning
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

// TestRolloutNACKStops: a version a canary refuses halts the rollout at
// the canaries; no other node is sent it.
func TestRolloutNACKStops(t *testing.T) {
	// Not parallel: one staged fleet (ten nodes with traffic) at a time.
	cp, nodes := stagedFleet(t)
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(10, v1))
	nodes[0].refuse.Store(fmt.Sprintf("v%d", v1+1))
	v2 := putRoute(t, cp, "orders.get", "/v1/orders/{id}")
	waitFleet(t, cp, "the rollout halted", rolloutIs(distribution.RolloutHalted))
	st := cp.Distribution.Status()
	if st.Rollout.Version != v2 || st.Rollout.Stage != "canary" || !strings.Contains(st.Rollout.Evidence, "node-00 refused it") {
		t.Errorf("rollout %+v", st.Rollout)
	}
	// A control plane that starts on the same store publishes the version
	// the fleet kept, not the halted one. It reads the halt from the
	// store, which one writer fills a moment after Status shows it (off
	// the streams' lock; Close flushes it): the first one still runs.
	waitStoredRollout(t, cp.dsn, v2, distribution.RolloutHalted)
	cp2 := startControlWith(t, cp.dsn, distribution.RolloutOptions{Bake: 300 * time.Millisecond})
	if got := cp2.Distribution.Status().Version; got != v1 {
		t.Errorf("a restarted control plane publishes version %d, want %d (the halted %d stays unsent)", got, v1, v2)
	}
	for _, n := range st.Nodes {
		canary := n.Labels["canary"] == "true"
		if !canary && n.Version != v1 {
			t.Errorf("%s, not a canary, runs version %d, want %d", n.ID, n.Version, v1)
		}
		if n.ID == "node-00" && (n.Version != v1 || n.LastNACK == nil) {
			t.Errorf("node-00 runs %d with NACK %v, want %d and its NACK", n.Version, n.LastNACK, v1)
		}
	}
}

// TestControlPlaneDiesMidRollout: with a rollout paused at the
// canaries, the control plane goes away; every node keeps serving, and a
// canary restarted from its cache serves the new version, a node beyond
// the canaries the old one.
func TestControlPlaneDiesMidRollout(t *testing.T) {
	t.Parallel()
	cp := startControlWith(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"), distribution.RolloutOptions{
		Bake: 300 * time.Millisecond, AckTimeout: 10 * time.Second, MinRequests: 10,
	})
	dir := t.TempDir()
	cache := func(id string) string { return filepath.Join(dir, id+".binpb") }
	canary := startNodeWith(t, cp.url, "node-canary", cache("node-canary"), "eu", map[string]string{"canary": "true"})
	others := []*gatewayNode{}
	for i := range 3 {
		id := fmt.Sprintf("node-%d", i)
		others = append(others, startNodeWith(t, cp.url, id, cache(id), "us", map[string]string{"canary": "false"}))
	}
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(4, v1))
	v2 := putRoute(t, cp, "orders.get", "/v1/orders/{id}")
	if !cp.Distribution.Pause() {
		t.Fatal("could not pause the new rollout")
	}
	waitFleet(t, cp, "the canary on the new version", func(s distribution.Status) bool {
		for _, n := range s.Nodes {
			if n.ID == "node-canary" {
				return n.Version == v2
			}
		}
		return false
	})
	cp.srv.CloseClientConnections()
	cp.srv.Close()

	// The canary and a node beyond it restart with no control plane.
	canary.stop()
	<-canary.done
	restarted := startNodeWith(t, cp.url, "node-canary", cache("node-canary"), "eu", nil)
	if code, _ := restarted.get(t, "/v1/orders/42"); code != 200 {
		t.Errorf("the restarted canary serves the new version's route: %d, want 200", code)
	}
	// (us has no labelled canaries: its first two nodes by id are its
	// canaries; node-2 is beyond them.)
	others[2].stop()
	<-others[2].done
	other := startNodeWith(t, cp.url, "node-2", cache("node-2"), "us", nil)
	if code, _ := other.get(t, "/v1/orders/42"); code != 404 {
		t.Errorf("a restarted node beyond the canaries: %d, want 404 (the old version)", code)
	}
	if code, _ := other.get(t, "/v1/orders"); code != 200 {
		t.Errorf("a restarted node beyond the canaries: /v1/orders %d, want 200", code)
	}
	_ = v1
}

// TestPublishDuringRollout: a version committed while another is still at
// the canaries joins its train: staged from the version the rest of the
// fleet runs, at the stage the rollout reached, paused if it was. The
// unjudged ones never reach the other nodes.
func TestPublishDuringRollout(t *testing.T) {
	// Not parallel: one staged fleet at a time.
	cp, _ := stagedFleet(t)
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(10, v1))
	putRoute(t, cp, "orders.get", "/v1/orders/{id}")
	if !cp.Distribution.Pause() {
		t.Fatal("could not pause the rollout")
	}
	v3 := putRoute(t, cp, "orders.put", "/v1/orders/{id}/items")
	if st := cp.Distribution.Status(); st.Rollout.State != distribution.RolloutPaused {
		t.Fatalf("rollout %+v after a change joined it paused, want it still paused", st.Rollout)
	}
	waitFleet(t, cp, "the canaries on the newest version", func(s distribution.Status) bool {
		n := 0
		for _, node := range s.Nodes {
			if node.Version == v3 {
				n++
			}
		}
		return n == 4
	})
	for _, n := range cp.Distribution.Status().Nodes {
		if n.Labels["canary"] != "true" && n.Version != v1 {
			t.Errorf("%s runs version %d, want %d: only canaries may run an unjudged version", n.ID, n.Version, v1)
		}
	}
	if st := cp.Distribution.Status(); st.Rollout.Version != v3 || st.Rollout.Previous != v1 {
		t.Errorf("rollout %+v, want %d staged from %d", st.Rollout, v3, v1)
	}
}

// waitStoredRollout waits until the store at dsn records the rollout of
// version in state.
func waitStoredRollout(t *testing.T, dsn string, version int64, state string) {
	t.Helper()
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var got store.Rollout
	gatewaytest.WaitFor(t, 10*time.Second, fmt.Sprintf("the store to record version %d %s", version, state), func() bool {
		got, _ = st.GetRollout(context.Background(), version)
		return got.State == state
	})
}
