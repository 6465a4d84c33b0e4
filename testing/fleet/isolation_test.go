package fleet_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/upstream"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/testca"
)

// The tests of this file came from a review of one team's blast radius:
// each would fail with the hole it names open.

// identityFixture is an mTLS backend of the orders team, the identity
// "orders-mtls" that reaches it (on the nodes given withIdentity), and the
// cluster of orders that names it.
type identityFixture struct {
	withIdentity func(*gateway.Options)
	cluster      *configv1.Cluster
}

func newIdentityFixture(t *testing.T) *identityFixture {
	t.Helper()
	ca := testca.New(t, "internal CA")
	secure := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "secure %s", r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "orders backend", false, "127.0.0.1").TLS},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool}
	secure.StartTLS()
	t.Cleanup(secure.Close)
	dir := t.TempDir()
	leaf := ca.Issue(t, "gateway-orders", true)
	certFile, keyFile := filepath.Join(dir, "orders.crt"), filepath.Join(dir, "orders.key")
	if err := os.WriteFile(certFile, leaf.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, leaf.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return &identityFixture{
		withIdentity: func(o *gateway.Options) {
			ids, err := upstream.LoadIdentities([]upstream.IdentityFiles{{Name: "orders-mtls", CertFile: certFile, KeyFile: keyFile}}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			o.Upstream.Identities = ids
		},
		cluster: &configv1.Cluster{Name: "orders-secure", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
			Endpoints: []*configv1.Endpoint{{Address: strings.TrimPrefix(secure.URL, "https://")}},
			Tls:       &configv1.UpstreamTLS{CaPem: string(ca.PEM), Identity: "orders-mtls"}},
	}
}

// twoTeams declares orders (127.0.0.1, with the identity orders-mtls) and
// search (127.0.0.2, with its cluster and a route), and returns search's
// admin client.
func twoTeams(t *testing.T, cp *controlPlane) adminv1connect.AdminServiceClient {
	t.Helper()
	ctx := context.Background()
	setUp(t, cp, backend(t, "orders"))
	if _, err := cp.admin.PutPlatform(ctx, connect.NewRequest(&adminv1.PutPlatformRequest{Platform: &adminv1.Platform{
		RateLimiting:       &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Disabled: true}},
		UpstreamIdentities: []*adminv1.UpstreamIdentity{{Name: "orders-mtls", Teams: []string{"orders"}}}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.admin.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Team: &adminv1.Team{
		Name: "search", Owns: []*adminv1.Ownership{{Host: "api.example.com", PathPrefix: "/v1/search"}},
		Upstreams: []*adminv1.Upstream{{Address: &adminv1.Upstream_Cidr{Cidr: "127.0.0.2/32"}}}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.admin.ApplyTeam(ctx, connect.NewRequest(&adminv1.ApplyTeamRequest{Config: &adminv1.TeamConfig{Team: "search",
		Clusters: []*configv1.Cluster{{Name: "search", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
			Endpoints: []*configv1.Endpoint{{Address: backendOn(t, "127.0.0.2:0", "search")}}}}}})); err != nil {
		t.Fatal(err)
	}
	return admintest.Client(cp.url, teamToken(t, cp, "search"))
}

// searchRoute puts a route of search's through its own token and returns
// the version.
func searchRoute(t *testing.T, search adminv1connect.AdminServiceClient, path string) int64 {
	t.Helper()
	r, err := search.PutRoute(context.Background(), connect.NewRequest(&adminv1.PutRouteRequest{Team: "search", Route: &configv1.Route{
		Id: "search." + strings.ReplaceAll(strings.Trim(path, "/"), "/", "."), Hosts: []string{"api.example.com"}, Path: path, Cluster: "search",
		Auth: &configv1.RouteAuth{Public: true, Reviewer: "security"}}}))
	if err != nil {
		t.Fatal(err)
	}
	return r.Msg.GetChange().GetVersion().GetNumber()
}

// TestLateNodeWithoutIdentityHaltsNothing: a node that lacks an identity
// when it connects (a node added, or restarted without
// -upstream-identity), rather than when the change was made, refuses every
// version that holds the cluster naming it, and its NACK names orders'
// cluster. It did not run the version before, so its refusal is no
// evidence against a change: nothing is halted, and search's next change,
// which has nothing to do with orders, reaches every node that can run it.
// (Running search's change on the late node too, without orders' cluster,
// is the per-change revert of the config-safety issue.)
func TestLateNodeWithoutIdentityHaltsNothing(t *testing.T) {
	t.Parallel()
	cp := startControl(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	fx := newIdentityFixture(t)
	startNodeEdit(t, cp.url, "node-with", "", "local", nil, nodeToken, fx.withIdentity)
	search := twoTeams(t, cp)
	orders := admintest.Client(cp.url, teamToken(t, cp, "orders"))
	if _, err := orders.PutCluster(context.Background(), connect.NewRequest(&adminv1.PutClusterRequest{Team: "orders", Cluster: fx.cluster})); err != nil {
		t.Fatalf("orders' cluster with every connected node holding its identity: %v", err)
	}
	v := searchRoute(t, search, "/v1/search")
	waitFleet(t, cp, "node-with on search's route", allRun(1, v))

	startNode(t, cp.url, "node-late", "")
	waitFleet(t, cp, "node-late's NACK", func(s distribution.Status) bool {
		for _, n := range s.Nodes {
			if n.ID == "node-late" && n.LastNACK != nil {
				return true
			}
		}
		return false
	})
	// search changes its own route: it reaches node-with, and nothing is
	// halted by node-late refusing it too.
	v = searchRoute(t, search, "/v1/search/suggest")
	waitFleet(t, cp, "node-with on search's next change, node-late refusing it", func(s distribution.Status) bool {
		late, with := false, false
		for _, n := range s.Nodes {
			switch n.ID {
			case "node-with":
				with = n.Version == v
			case "node-late":
				late = n.LastNACK != nil && n.LastNACK.Version == v
			}
		}
		return late && with
	})
	st := cp.Distribution.Status()
	if st.Halted != nil {
		t.Errorf("version %d halted by %+v, want no halt: node-late ran nothing before", v, st.Halted)
	}
	for _, n := range st.Nodes {
		if n.ID != "node-late" {
			continue
		}
		objs := n.LastNACK.Objects
		if len(objs) != 1 || objs[0].Team != "orders" || objs[0].Kind != "cluster" || objs[0].Name != "orders-secure" {
			t.Errorf("node-late's NACK names %+v, want orders' cluster orders-secure", objs)
		}
	}
}

// TestSlowProbesAreJudged: a change with 17 clusters whose only endpoint
// never answers its health check is refused: the nodes check them at once
// (3 s each), and the control plane waits as long as the checks may take.
// (It waited 5 s while nodes checked 16 clusters at a time: the 17th was
// answered too late, not judged, and the change stored, so adding
// clusters in bulk bypassed the health check.)
func TestSlowProbesAreJudged(t *testing.T) {
	t.Parallel()
	cp := startControl(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	startNode(t, cp.url, "node-0", "")
	setUp(t, cp, backend(t, "orders"))
	hang := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(stuck.Close)
	t.Cleanup(func() { close(hang) }) // runs first: the handlers return
	tc := &adminv1.TeamConfig{Team: "orders", Clusters: []*configv1.Cluster{{Name: "orders", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
		Endpoints: []*configv1.Endpoint{{Address: backend(t, "orders")}}}}}
	for i := range 17 {
		tc.Clusters = append(tc.Clusters, &configv1.Cluster{Name: fmt.Sprintf("stuck-%02d", i), Protocol: configv1.Protocol_PROTOCOL_HTTP1,
			Endpoints: []*configv1.Endpoint{{Address: strings.TrimPrefix(stuck.URL, "http://")}},
			HealthCheck: &configv1.HealthCheck{Timeout: durationpb.New(10 * time.Second),
				Probe: &configv1.HealthCheck_Http{Http: &configv1.HTTPProbe{Path: "/healthz"}}}})
	}
	start := time.Now()
	_, err := cp.admin.ApplyTeam(context.Background(), connect.NewRequest(&adminv1.ApplyTeamRequest{Config: tc}))
	if err == nil {
		t.Fatalf("ApplyTeam of 17 clusters whose only endpoint never answers its health check was accepted after %v, want it refused (no endpoint healthy)",
			time.Since(start).Round(100*time.Millisecond))
	}
	wantViolation(t, violations(t, err), "team orders: clusters[stuck-00].endpoints: ", "no endpoint is healthy")
}

// TestBigProbeRefused: any team may ask for a probe (a dry run is
// enough), so what one costs is bounded: a change that brings more than
// distribution.MaxProbeClusters clusters while nodes are connected is
// refused, saying to split it, and the nodes' streams stay up. (A probe of
// 1,001 clusters made each probed node answer with more than a message
// may hold, and the control plane dropped its stream.)
func TestBigProbeRefused(t *testing.T) {
	t.Parallel()
	cp := startControl(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	startNode(t, cp.url, "node-0", "")
	addr := backend(t, "orders")
	v := setUp(t, cp, addr)
	waitFleet(t, cp, "node-0 on the first version", allRun(1, v))
	before := cp.Distribution.Status().Nodes[0].ConnectedAt

	tc := &adminv1.TeamConfig{Team: "orders"}
	for i := range 1002 {
		name := "orders"
		if i > 0 {
			name = fmt.Sprintf("bulk-%04d", i)
		}
		tc.Clusters = append(tc.Clusters, &configv1.Cluster{Name: name, Protocol: configv1.Protocol_PROTOCOL_HTTP1,
			Endpoints: []*configv1.Endpoint{{Address: addr}}})
	}
	orders := admintest.Client(cp.url, teamToken(t, cp, "orders"))
	_, err := orders.ApplyTeam(context.Background(), connect.NewRequest(&adminv1.ApplyTeamRequest{Config: tc, DryRun: true}))
	wantViolation(t, violations(t, err), "team orders: clusters: ", "1001 clusters", "at most 256", "split it")
	if n := cp.Distribution.Status().Nodes; len(n) != 1 || !n[0].ConnectedAt.Equal(before) {
		t.Errorf("node-0's stream after a team's big dry run: %+v, want it still the one connected at %v", n, before.Format(time.StampMicro))
	}
}

// TestLateCanaryWithoutIdentityRollsNothingBack: the same in a staged
// fleet. A canary that joins without orders' identity refuses the version
// every other node runs, and then each later version; its refusals are
// no evidence against them (it never ran the version before), so neither
// is halted, the next version (search's) is staged from the one the fleet
// runs, the rollout does not wait for the canary, and the nodes that ran
// every change are not sent an older version. (Rollouts settle between
// the changes here: a version staged while another rolls out is the
// config-safety issue's.)
func TestLateCanaryWithoutIdentityRollsNothingBack(t *testing.T) {
	// Not parallel: a staged fleet, like the rollout tests.
	cp := startControlWith(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"), distribution.RolloutOptions{
		Bake: 300 * time.Millisecond, AckTimeout: 5 * time.Second, MinRequests: 10,
	})
	fx := newIdentityFixture(t)
	for _, id := range []string{"node-a", "node-b"} {
		startNodeEdit(t, cp.url, id, "", "local", nil, nodeToken, fx.withIdentity)
	}
	search := twoTeams(t, cp)
	orders := admintest.Client(cp.url, teamToken(t, cp, "orders"))
	waitFleet(t, cp, "the setup's rollouts done", rolloutSettled)
	ch, err := orders.PutCluster(context.Background(), connect.NewRequest(&adminv1.PutClusterRequest{Team: "orders", Cluster: fx.cluster}))
	if err != nil {
		t.Fatalf("orders' cluster with every connected node holding its identity: %v", err)
	}
	had := ch.Msg.GetChange().GetVersion().GetNumber()
	waitFleet(t, cp, "orders' cluster everywhere", func(s distribution.Status) bool { return allRun(2, had)(s) && rolloutSettled(s) })

	startNodeWith(t, cp.url, "node-canary", "", "local", map[string]string{"canary": "true"})
	waitFleet(t, cp, "node-canary's NACK", func(s distribution.Status) bool {
		for _, n := range s.Nodes {
			if n.ID == "node-canary" && n.LastNACK != nil {
				return true
			}
		}
		return false
	})
	v := searchRoute(t, search, "/v1/search")
	waitFleet(t, cp, "search's change rolled out to node-a and node-b", func(s distribution.Status) bool {
		// The fleet's first route goes everywhere at once; a later one is
		// staged, and done.
		if s.Rollout != nil && s.Rollout.Version == v && s.Rollout.State != distribution.RolloutDone {
			return false
		}
		ran := 0
		for _, n := range s.Nodes {
			if n.ID != "node-canary" && n.Version < had {
				t.Errorf("%s runs version %d: rolled back from version %d", n.ID, n.Version, had)
			}
			if (n.ID == "node-a" || n.ID == "node-b") && n.Version == v {
				ran++
			}
		}
		return ran == 2
	})
	// (Search's route is the fleet's first: with no route before it,
	// it goes everywhere at once; staged, it is staged from had.)
	if st := cp.Distribution.Status(); st.Halted != nil || (st.Rollout != nil && st.Rollout.Version == v && st.Rollout.Previous != had) {
		t.Errorf("rollout %+v halted by %+v, want version %d from %d and not halted", st.Rollout, st.Halted, v, had)
	}
}

// rolloutSettled: no staged rollout is under way.
func rolloutSettled(s distribution.Status) bool {
	return s.Rollout == nil || s.Rollout.State != distribution.RolloutRunning && s.Rollout.State != distribution.RolloutPaused
}
