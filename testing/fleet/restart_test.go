package fleet_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-gw/portico/control"
	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// TestControlPlaneRestartResumesStage: a control plane killed while a
// rollout sits at the canaries is replaced by one on the same database;
// the new one takes the rollout up at the same stage, with the same
// nodes on the new version and the rest on the old, paused as it was,
// and, resumed, takes it to every node. (A restart used to send the
// newest version to every node at once, unjudged.)
func TestControlPlaneRestartResumesStage(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "control.db")
	opts := distribution.RolloutOptions{Bake: 300 * time.Millisecond, AckTimeout: 10 * time.Second, MinRequests: 10}
	// The nodes and the admin client reach whichever control plane is
	// current, at one address.
	var current atomic.Pointer[http.Handler]
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*current.Load()).ServeHTTP(w, r) }))
	gatewaytest.StartH2C(t, front)
	plane := func() *controlPlane {
		st, err := store.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		p, err := control.New(context.Background(), control.Options{Store: st, BootstrapToken: platformToken, NodeToken: nodeToken,
			Logger: gatewaytest.Logger(), Rollout: opts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		current.Store(&p.Handler)
		return &controlPlane{Plane: p, srv: front, url: front.URL, dsn: dsn, admin: admintest.Client(front.URL, platformToken)}
	}
	cp := plane()
	dir := t.TempDir()
	for _, n := range []struct{ id, region, canary string }{
		{"node-canary", "eu", "true"}, {"node-e1", "eu", "false"}, {"node-u1", "us", "false"}, {"node-u2", "us", "false"}, {"node-u3", "us", "false"},
	} {
		startNodeWith(t, front.URL, n.id, filepath.Join(dir, n.id+".binpb"), n.region, map[string]string{"canary": n.canary})
	}
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the first route everywhere", allRun(5, v1))
	v2 := putRoute(t, cp, "orders.get", "/v1/orders/{id}")
	if !cp.Distribution.Pause() {
		t.Fatal("could not pause the new rollout")
	}
	// eu has a labelled canary, us none: its first two by id.
	canaries := []string{"node-canary", "node-u1", "node-u2"}
	onV2 := func(s distribution.Status) []string {
		var ids []string
		for _, n := range s.Nodes {
			if n.Version == v2 {
				ids = append(ids, n.ID)
			}
		}
		slices.Sort(ids)
		return ids
	}
	waitFleet(t, cp, "the canaries on the new version", func(s distribution.Status) bool { return slices.Equal(onV2(s), canaries) && len(s.Nodes) == 5 })

	// The control plane dies; another starts on its database.
	cp.Close()
	cp = plane()
	front.CloseClientConnections()
	waitFleet(t, cp, "every node back, the canaries still on the new version", func(s distribution.Status) bool {
		return len(s.Nodes) == 5 && slices.Equal(onV2(s), canaries) && allRunOf(s, v1, 2)
	})
	st := cp.Distribution.Status()
	if r := st.Rollout; r == nil || r.Version != v2 || r.Previous != v1 || r.Stage != "canary" || r.State != distribution.RolloutPaused || r.Reached != 3 {
		t.Fatalf("the rollout after the restart: %+v, want version %d from %d paused at the canaries with 3 nodes", st.Rollout, v2, v1)
	}
	if !cp.Distribution.Resume() {
		t.Fatal("could not resume the rollout")
	}
	waitFleet(t, cp, "the resumed rollout done", rolloutIs(distribution.RolloutDone))
	waitFleet(t, cp, "every node on the new version", allRun(5, v2))
}

// allRunOf reports whether n nodes of s run version.
func allRunOf(s distribution.Status, version int64, n int) bool {
	got := 0
	for _, nd := range s.Nodes {
		if nd.Version == version {
			got++
		}
	}
	return got == n
}
