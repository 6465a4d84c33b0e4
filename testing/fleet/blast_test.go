package fleet_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/upstream"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/testca"
)

// backendOn answers "<name> <path>" on a listener of addr ("127.0.0.2:0").
func backendOn(t *testing.T, addr, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, name+" "+r.URL.Path)
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().String()
}

// violations returns the field violations of a refused admin call.
func violations(t *testing.T, err error) []string {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		t.Fatalf("error %v, want invalid_argument", err)
	}
	var out []string
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if br, ok := v.(*errdetails.BadRequest); ok && derr == nil {
			for _, fv := range br.GetFieldViolations() {
				out = append(out, fv.GetField()+": "+fv.GetDescription())
			}
		}
	}
	return out
}

func wantViolation(t *testing.T, got []string, prefix string, contains ...string) {
	t.Helper()
	for _, g := range got {
		if !strings.HasPrefix(g, prefix) {
			continue
		}
		for _, c := range contains {
			if !strings.Contains(g, c) {
				t.Errorf("violation %q does not say %q", g, c)
			}
		}
		return
	}
	t.Errorf("no violation %q in %q", prefix, got)
}

// TestClusterChecksBeforePush: a team's cluster that a connected node
// could not run (an identity it lacks, no endpoint healthy from the
// nodes) is refused before anything is stored or pushed, saying which
// node and why; another team's next change still reaches every node. With
// the identity on every node the same cluster is accepted and the node
// presents it. A node that joins without it refuses the version, naming
// the team's cluster; the team sees why, another team does not.
func TestClusterChecksBeforePush(t *testing.T) {
	t.Parallel()
	cp := startControl(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	ctx := context.Background()

	// The orders backend requires a client certificate of the internal CA.
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
	withIdentity := func(o *gateway.Options) {
		ids, err := upstream.LoadIdentities([]upstream.IdentityFiles{{Name: "orders-mtls", CertFile: certFile, KeyFile: keyFile}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		o.Upstream.Identities = ids
	}
	with := startNodeEdit(t, cp.url, "node-with", "", "local", nil, nodeToken, withIdentity)
	without := startNode(t, cp.url, "node-without", "")

	// orders (loopback 127.0.0.1) and search (127.0.0.2), each with a
	// route of its own.
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
	v := putRoute(t, cp, "orders.list", "/v1/orders")
	waitFleet(t, cp, "both nodes on the first routes", allRun(2, v))

	ordersToken := teamToken(t, cp, "orders")
	orders := admintest.Client(cp.url, ordersToken)
	searchToken := teamToken(t, cp, "search")
	search := admintest.Client(cp.url, searchToken)
	versions := func() int {
		vs, err := cp.admin.ListVersions(ctx, connect.NewRequest(&adminv1.ListVersionsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return len(vs.Msg.GetVersions())
	}
	before := versions()

	secureCluster := &configv1.Cluster{Name: "orders-secure", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
		Endpoints: []*configv1.Endpoint{{Address: strings.TrimPrefix(secure.URL, "https://")}},
		Tls:       &configv1.UpstreamTLS{CaPem: string(ca.PEM), Identity: "orders-mtls"}}
	_, err := orders.PutCluster(ctx, connect.NewRequest(&adminv1.PutClusterRequest{Team: "orders", Cluster: secureCluster}))
	wantViolation(t, violations(t, err), "team orders: clusters[orders-secure].tls.identity: ",
		`upstream identity "orders-mtls" is not on node node-without`)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	_, err = orders.PutCluster(ctx, connect.NewRequest(&adminv1.PutClusterRequest{Team: "orders", Cluster: &configv1.Cluster{
		Name: "orders-dead", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: dead}}}}))
	wantViolation(t, violations(t, err), "team orders: clusters[orders-dead].endpoints: ",
		"no endpoint is healthy from nodes node-with, node-without", dead, "connection refused")

	if n := versions(); n != before {
		t.Errorf("%d versions after two refused changes, want %d: nothing is stored", n, before)
	}
	for _, n := range cp.Distribution.Status().Nodes {
		if n.Version != v {
			t.Errorf("node %s runs version %d after refused changes, want %d", n.ID, n.Version, v)
		}
	}

	// Another team's next change goes through, to every node.
	r, err := search.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: "search", Route: &configv1.Route{
		Id: "search.query", Hosts: []string{"api.example.com"}, Path: "/v1/search", Cluster: "search",
		Auth: &configv1.RouteAuth{Public: true, Reviewer: "security"}}}))
	if err != nil {
		t.Fatal(err)
	}
	v = r.Msg.GetChange().GetVersion().GetNumber()
	waitFleet(t, cp, "both nodes on search's change", allRun(2, v))
	for _, n := range []*gatewayNode{with, without} {
		if code, body := n.get(t, "/v1/search"); code != 200 || body != "search /v1/search" {
			t.Errorf("search's route: %d %q", code, body)
		}
	}

	// With the identity on every connected node, the cluster is accepted
	// and presented to the backend.
	without.stop()
	<-without.done
	waitFleet(t, cp, "node-without gone", func(s distribution.Status) bool { return len(s.Nodes) == 1 })
	if _, err := orders.PutCluster(ctx, connect.NewRequest(&adminv1.PutClusterRequest{Team: "orders", Cluster: secureCluster})); err != nil {
		t.Fatalf("the cluster with every node holding its identity: %v", err)
	}
	r, err = orders.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: "orders", Route: &configv1.Route{
		Id: "orders.secure", Hosts: []string{"api.example.com"}, Path: "/v1/orders/secure", Cluster: "orders-secure",
		Auth: &configv1.RouteAuth{Public: true, Reviewer: "security"}}}))
	if err != nil {
		t.Fatal(err)
	}
	v = r.Msg.GetChange().GetVersion().GetNumber()
	waitFleet(t, cp, "node-with on the secure route", allRun(1, v))
	if code, body := with.get(t, "/v1/orders/secure"); code != 200 || body != "secure gateway-orders" {
		t.Errorf("through the identity: %d %q, want 200 %q", code, body, "secure gateway-orders")
	}

	// A node that joins without the identity refuses the version, naming
	// orders' cluster.
	late := startNode(t, cp.url, "node-late", "")
	waitFleet(t, cp, "node-late's NACK", func(s distribution.Status) bool {
		for _, n := range s.Nodes {
			if n.ID == "node-late" && n.LastNACK != nil {
				return true
			}
		}
		return false
	})
	_ = late
	nack := func(c interface {
		GetRollout(context.Context, *connect.Request[adminv1.GetRolloutRequest]) (*connect.Response[adminv1.GetRolloutResponse], error)
	}) *adminv1.Nack {
		resp, err := c.GetRollout(ctx, connect.NewRequest(&adminv1.GetRolloutRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range resp.Msg.GetNodes() {
			if n.GetId() == "node-late" {
				return n.GetLastNack()
			}
		}
		t.Fatal("node-late not in the rollout status")
		return nil
	}
	for who, c := range map[string]adminClient{"platform": cp.admin, "orders": orders} {
		n := nack(c)
		if len(n.GetObjects()) != 1 {
			t.Fatalf("%s sees NACK objects %v, want orders' cluster", who, n.GetObjects())
		}
		o := n.GetObjects()[0]
		if o.GetTeam() != "orders" || o.GetKind() != "cluster" || o.GetName() != "orders-secure" || !strings.Contains(o.GetError(), `no upstream identity "orders-mtls"`) {
			t.Errorf("%s sees the refused object %v, want orders' cluster orders-secure and why", who, o)
		}
		if !strings.Contains(n.GetError(), "orders-mtls") {
			t.Errorf("%s sees the NACK error %q, want the node's message", who, n.GetError())
		}
	}
	if n := nack(search); len(n.GetObjects()) != 0 || strings.Contains(n.GetError(), "orders") && !strings.Contains(n.GetError(), "not team search's") {
		t.Errorf("search sees %v, want another team's refusal without its names", n)
	}
}

type adminClient interface {
	GetRollout(context.Context, *connect.Request[adminv1.GetRolloutRequest]) (*connect.Response[adminv1.GetRolloutResponse], error)
}

// teamToken issues a team-admin token.
func teamToken(t *testing.T, cp *controlPlane, team string) string {
	t.Helper()
	resp, err := cp.admin.CreateToken(context.Background(), connect.NewRequest(&adminv1.CreateTokenRequest{Team: team, Role: adminv1.Role_ROLE_TEAM_ADMIN}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetToken()
}
