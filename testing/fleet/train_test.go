package fleet_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control/distribution"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
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
	waitFleet(t, cp, "the first route everywhere", func(s distribution.Status) bool {
		return s.Rollout != nil && s.Rollout.Version == v1 && s.Rollout.State == distribution.RolloutDone
	})
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
	var revertV int64
	gatewaytest.WaitFor(t, 30*time.Second, "the revert of version "+fmt.Sprint(bad), func() bool {
		resp, err := cp.admin.GetVersion(context.Background(), connect.NewRequest(&adminv1.GetVersionRequest{Number: vb + 1}))
		if err != nil {
			return false
		}
		revertV = resp.Msg.GetVersion().GetNumber()
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
	t.Logf("train of 3 changes, 1 reverted: the revert committed %v after the bad change, on every node %v later; test %v",
		reverted.Sub(badAt).Round(time.Millisecond), time.Since(reverted).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
