// Package fleet_test runs a control plane and several gateway nodes in one
// process, on loopback, and changes the config through the admin API.
package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control"
	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/gateway"
	gwdist "github.com/portico-gw/portico/gateway/distribution"
	"github.com/portico-gw/portico/gateway/snapshot"
	"github.com/portico-gw/portico/gateway/upstream"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

const (
	platformToken = "ptk_fleet-test-platform-token-0123456789abcdef"
	nodeToken     = "fleet-test-node-token-0123456789abcdef"
)

// controlPlane is a control plane on an h2c test server.
type controlPlane struct {
	*control.Plane
	srv   *httptest.Server
	url   string
	dsn   string
	admin adminv1connect.AdminServiceClient
}

func startControl(t *testing.T, dsn string) *controlPlane {
	t.Helper()
	return startControlWith(t, dsn, distribution.RolloutOptions{})
}

func startControlWith(t *testing.T, dsn string, rollout distribution.RolloutOptions) *controlPlane {
	t.Helper()
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	p, err := control.New(context.Background(), control.Options{Store: st, BootstrapToken: platformToken, NodeToken: nodeToken,
		Logger: gatewaytest.Logger(), Rollout: rollout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	srv := httptest.NewUnstartedServer(p.Handler)
	gatewaytest.StartH2C(t, srv)
	cp := &controlPlane{Plane: p, srv: srv, url: srv.URL, dsn: dsn}
	cp.admin = admintest.Client(srv.URL, platformToken)
	return cp
}

// gatewayNode is a gateway node fed by the control plane.
type gatewayNode struct {
	gw     *gatewaytest.Gateway
	client *gwdist.Client
	// refuse, when set, makes the node refuse snapshots of that version
	// name: a node-side failure the control plane cannot foresee.
	refuse atomic.Value
	// refuseCluster, when set, makes that refusal one of the cluster of
	// this name, as a node that cannot build it says.
	refuseCluster atomic.Value
	// lane records when the node applied fast-lane entries.
	lane *laneRecorder
	// probing is the snapshot the control plane last asked the node to
	// probe routes of, "" after it was told to stop (or never told).
	probing atomic.Value
	// probeIDs are the route ids of that ask.
	probeIDs atomic.Value
	stop     context.CancelFunc
	done     chan struct{}
}

// probeRecorder is the node as its stream client sees it, noting what
// the control plane asks it to probe.
type probeRecorder struct {
	*gateway.Node
	n *gatewayNode
}

func (r probeRecorder) ProbeRoutes(sha256 string, routes snapshot.RouteSelection, interval, duration time.Duration) error {
	r.n.probeIDs.Store(slices.Clone(routes.IDs))
	if routes.Empty() {
		r.n.probing.Store("")
	} else {
		r.n.probing.Store(sha256)
	}
	return r.Node.ProbeRoutes(sha256, routes, interval, duration)
}

func startNode(t *testing.T, url, id, cacheFile string) *gatewayNode {
	t.Helper()
	return startNodeWith(t, url, id, cacheFile, "local", nil)
}

func startNodeWith(t *testing.T, url, id, cacheFile, region string, labels map[string]string) *gatewayNode {
	t.Helper()
	return startNodeToken(t, url, id, cacheFile, region, labels, nodeToken)
}

func startNodeToken(t *testing.T, url, id, cacheFile, region string, labels map[string]string, token string) *gatewayNode {
	t.Helper()
	return startNodeEdit(t, url, id, cacheFile, region, labels, token, nil)
}

// startNodeEdit starts a node whose gateway options edit changes (its
// upstream identities, say).
func startNodeEdit(t *testing.T, url, id, cacheFile, region string, labels map[string]string, token string, edit func(*gateway.Options)) *gatewayNode {
	t.Helper()
	return startNodeReporting(t, url, id, cacheFile, region, labels, token, edit, 20*time.Millisecond)
}

// startNodeReporting starts a node that reports its route counters every
// interval.
func startNodeReporting(t *testing.T, url, id, cacheFile, region string, labels map[string]string, token string, edit func(*gateway.Options),
	interval time.Duration) *gatewayNode {
	t.Helper()
	n := &gatewayNode{}
	n.refuse.Store("")
	n.refuseCluster.Store("")
	n.probing.Store("")
	n.probeIDs.Store([]string(nil))
	n.gw = gatewaytest.Start(t, nil, edit)
	n.lane = &laneRecorder{lane: n.gw.Node.FastLane(), id: id}
	n.client = gwdist.New(gwdist.Options{
		Stats: n.gw.Node.RouteStats, Token: token, Lane: n.lane, Node: probeRecorder{n.gw.Node, n},
		URL: url, HTTPClient: gatewaytest.H2CClient(t), NodeID: id, Pool: "public", Region: region, Labels: labels,
		CacheFile: cacheFile, Logger: gatewaytest.Logger(), MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		ReportInterval: interval,
		Apply: func(cfg *configv1.Snapshot) error {
			if r := n.refuse.Load().(string); r != "" && cfg.GetVersion() == r {
				err := errors.New("refusing " + r + " (test)")
				if c := n.refuseCluster.Load().(string); c != "" {
					return &upstream.ClusterError{Cluster: c, Err: err}
				}
				return err
			}
			return n.gw.Node.Apply(cfg)
		},
	})
	if _, err := n.client.Boot(); err != nil {
		t.Fatal(err)
	}
	n.run()
	t.Cleanup(func() { n.stop(); <-n.done })
	return n
}

// run runs the node's stream client until n.stop.
func (n *gatewayNode) run() {
	ctx, cancel := context.WithCancel(context.Background())
	n.stop, n.done = cancel, make(chan struct{})
	go func() {
		defer close(n.done)
		_ = n.client.Run(ctx)
	}()
}

// disconnect ends the node's stream client; the node serves on, and
// reconnect starts a new one, as a node whose connection broke does.
func (n *gatewayNode) disconnect() {
	n.stop()
	<-n.done
}

func (n *gatewayNode) reconnect() { n.run() }

// get calls path on the node and returns the status and body.
func (n *gatewayNode) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", n.gw.URL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "api.example.com"
	resp, err := gatewaytest.HTTP1Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// backend answers "<name> <path>".
func backend(t *testing.T, name string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, name+" "+r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func waitFleet(t *testing.T, cp *controlPlane, what string, cond func(distribution.Status) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cp.Distribution.Wait(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v; fleet %+v", what, err, cp.Distribution.Status())
	}
}

func allRun(n int, version int64) func(distribution.Status) bool {
	return func(s distribution.Status) bool {
		if len(s.Nodes) != n {
			return false
		}
		for _, node := range s.Nodes {
			if node.Version != version {
				return false
			}
		}
		return true
	}
}

// setUp declares the orders team and its cluster, with the anonymous
// limit off.
func setUp(t *testing.T, cp *controlPlane, backendAddr string) int64 {
	t.Helper()
	ctx := context.Background()
	if _, err := cp.admin.PutPlatform(ctx, connect.NewRequest(&adminv1.PutPlatformRequest{Platform: &adminv1.Platform{
		RateLimiting: &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Disabled: true}}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.admin.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Team: &adminv1.Team{
		Name: "orders", Owns: []*adminv1.Ownership{{Host: "api.example.com", PathPrefix: "/v1/orders"}},
		Upstreams: []*adminv1.Upstream{{Address: &adminv1.Upstream_Cidr{Cidr: "127.0.0.1/32"}}}}})); err != nil {
		t.Fatal(err)
	}
	return pointCluster(t, cp, backendAddr)
}

func putRoute(t *testing.T, cp *controlPlane, id, path string) int64 {
	t.Helper()
	ch, err := cp.admin.PutRoute(context.Background(), connect.NewRequest(&adminv1.PutRouteRequest{Team: "orders", Route: &configv1.Route{
		Id: id, Hosts: []string{"api.example.com"}, Path: path, Cluster: "orders", Auth: &configv1.RouteAuth{Public: true, Reviewer: "security"}}}))
	if err != nil {
		t.Fatal(err)
	}
	return ch.Msg.GetChange().GetVersion().GetNumber()
}

// TestChangeReachesEveryNode: a route put through the admin API is
// running on every connected node, which route to it; a node that
// connects later gets it at once.
func TestChangeReachesEveryNode(t *testing.T) {
	t.Parallel()
	cp := startControl(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	var nodes []*gatewayNode
	for i := range 3 {
		nodes = append(nodes, startNode(t, cp.url, fmt.Sprintf("node-%d", i), ""))
	}
	setUp(t, cp, backend(t, "orders"))
	v := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "every node on the new version", allRun(3, v))
	for i, n := range nodes {
		if st, body := n.get(t, "/v1/orders"); st != 200 || body != "orders /v1/orders" {
			t.Errorf("node %d: %d %q", i, st, body)
		}
	}
	// Each node reports what it counted: here, one call of the route.
	waitFleet(t, cp, "the nodes' reports", func(distribution.Status) bool {
		for i := range nodes {
			counts, _ := cp.Distribution.RouteCounts(fmt.Sprintf("node-%d", i))
			if c := counts["orders.list"]; c.Requests != 1 || c.Errors != 0 {
				return false
			}
		}
		return true
	})
	late := startNode(t, cp.url, "node-late", "")
	waitFleet(t, cp, "the late node", allRun(4, v))
	if st, _ := late.get(t, "/v1/orders"); st != 200 {
		t.Errorf("late node: %d", st)
	}
}

// TestNodesAuthenticate: a node without the node token, or with another,
// is refused its stream: it gets no snapshot and is not counted.
func TestNodesAuthenticate(t *testing.T) {
	t.Parallel()
	cp := startControl(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	setUp(t, cp, backend(t, "orders"))
	good := startNode(t, cp.url, "node-good", "")
	bad := startNodeToken(t, cp.url, "node-stranger", "", "local", nil, "not-the-node-token-0123456789abcdef")
	none := startNodeToken(t, cp.url, "node-anonymous", "", "local", nil, "")
	v := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the good node on the route", allRun(1, v))
	for _, n := range []*gatewayNode{bad, none} {
		if sha, _ := n.client.Running(); sha != "" {
			t.Errorf("a node without the token runs %s", sha)
		}
	}
	if st := cp.Distribution.Status(); len(st.Nodes) != 1 || st.Nodes[0].ID != "node-good" {
		t.Errorf("connected nodes %+v, want only node-good", st.Nodes)
	}
	_ = good
}

// TestNACKHaltsVersion: a node that refuses a version keeps the one it
// had and reports why; the version is halted, so a node that connects
// afterwards is sent the version before it; a newer version lifts the
// halt.
func TestNACKHaltsVersion(t *testing.T) {
	t.Parallel()
	cp := startControl(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	good := startNode(t, cp.url, "node-good", "")
	bad := startNode(t, cp.url, "node-bad", "")
	setUp(t, cp, backend(t, "orders"))
	v1 := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "both nodes on the first route", allRun(2, v1))

	bad.refuse.Store(fmt.Sprintf("v%d", v1+1))
	v2 := putRoute(t, cp, "orders.get", "/v1/orders/{id}")
	waitFleet(t, cp, "the NACK", func(s distribution.Status) bool { return s.Halted != nil })
	st := cp.Distribution.Status()
	if st.Halted.Node != "node-bad" || st.Halted.Version != v2 || !strings.Contains(st.Halted.Error, "refusing") {
		t.Errorf("halted by %+v", st.Halted)
	}
	if sha, v := bad.client.Running(); v != v1 || sha == "" {
		t.Errorf("the refusing node runs version %d, want %d", v, v1)
	}
	if code, _ := bad.get(t, "/v1/orders/42"); code != 404 {
		t.Errorf("the refusing node routes the refused version's route: %d", code)
	}
	if code, _ := bad.get(t, "/v1/orders"); code != 200 {
		t.Errorf("the refusing node stopped serving its version: %d", code)
	}
	// A node that connects now is sent the last version before the
	// halted one.
	late := startNode(t, cp.url, "node-late", "")
	waitFleet(t, cp, "the late node on the version before", func(s distribution.Status) bool {
		for _, n := range s.Nodes {
			if n.ID == "node-late" {
				return n.Version == v1
			}
		}
		return false
	})
	if code, _ := late.get(t, "/v1/orders/42"); code != 404 {
		t.Errorf("the late node routes the halted version's route: %d", code)
	}
	// A newer version lifts the halt.
	bad.refuse.Store("")
	v3 := putRoute(t, cp, "orders.put", "/v1/orders/{id}/items")
	waitFleet(t, cp, "every node on the fix", allRun(3, v3))
	_ = good
}

// TestNodeServesWithoutControlPlane: with the control plane gone, a node
// keeps serving, and a node restarted meanwhile boots from its cached
// snapshot and serves the same version.
func TestNodeServesWithoutControlPlane(t *testing.T) {
	t.Parallel()
	cp := startControl(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	cache := filepath.Join(t.TempDir(), "snapshot.binpb")
	n := startNode(t, cp.url, "node-0", cache)
	setUp(t, cp, backend(t, "orders"))
	v := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "the node on the route", allRun(1, v))

	cp.srv.CloseClientConnections()
	cp.srv.Close()
	if code, _ := n.get(t, "/v1/orders"); code != 200 {
		t.Errorf("with the control plane down: %d", code)
	}
	n.stop()
	<-n.done
	restarted := startNode(t, cp.url, "node-0", cache)
	sha, _ := restarted.client.Running()
	if want, _ := n.client.Running(); sha != want || sha == "" {
		t.Errorf("restarted node runs %q, want %q from its cache", sha, want)
	}
	if code, body := restarted.get(t, "/v1/orders"); code != 200 || body != "orders /v1/orders" {
		t.Errorf("restarted node without control plane: %d %q", code, body)
	}
}
