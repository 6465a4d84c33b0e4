package compile_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/portico-gw/portico/control/compile"
	"github.com/portico-gw/portico/gateway/snapshot"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
)

var reviewed = &configv1.RouteAuth{Public: true, Reviewer: "security"}

func cluster(name string) *configv1.Cluster {
	return &configv1.Cluster{Name: name, Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: "127.0.0.1:1"}}}
}

func route(id, host, path, cluster string) *configv1.Route {
	r := &configv1.Route{Id: id, Path: path, Cluster: cluster, Auth: reviewed}
	if host != "" {
		r.Hosts = []string{host}
	}
	return r
}

func demoSet(t *testing.T) []byte {
	t.Helper()
	b, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(demov1.File_portico_demo_v1_orders_proto),
	}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// valid is two teams' config that compiles: orders with hand-written
// routes and the demo orders service from its descriptors, search with
// a route of its own.
func valid(t *testing.T) *adminv1.Config {
	return &adminv1.Config{
		Teams: []*adminv1.Team{
			{Name: "orders", Owns: []*adminv1.Ownership{
				{Host: "api.example.com", PathPrefix: "/v1/orders"},
				{Host: "api.example.com", PathPrefix: "/v1/customers"},
				{Host: "api.example.com", PathPrefix: "/portico.demo.v1.OrdersService"},
			}, Upstreams: []*adminv1.Upstream{{Address: &adminv1.Upstream_Cidr{Cidr: "127.0.0.1/32"}}}},
			{Name: "search", Owns: []*adminv1.Ownership{{Host: "api.example.com", PathPrefix: "/v1/search"}},
				Upstreams: []*adminv1.Upstream{{Address: &adminv1.Upstream_Host{Host: "search.internal"}}}},
		},
		TeamConfigs: []*adminv1.TeamConfig{
			{Team: "search", Clusters: []*configv1.Cluster{{Name: "search", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
				Endpoints: []*configv1.Endpoint{{Address: "search.internal:8080"}}}},
				Routes: []*configv1.Route{route("search.query", "api.example.com", "/v1/search/{q}", "search")}},
			{Team: "orders",
				Clusters: []*configv1.Cluster{cluster("orders-legacy"),
					{Name: "orders", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: "127.0.0.1:2"}}}},
				Routes: []*configv1.Route{
					route("orders.export", "api.example.com", "/v1/orders/export/**", "orders-legacy"),
					route("orders.report", "api.example.com", "/v1/orders:report", "orders-legacy"),
				},
				Services: []*configv1.Service{{Id: "orders", Name: "portico.demo.v1.OrdersService", Cluster: "orders",
					Hosts: []string{"api.example.com"}, Auth: reviewed,
					Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: demoSet(t)}}}},
			},
		},
		Platform: &adminv1.Platform{
			Products: []*configv1.Product{{Name: "orders-api"}},
			Scopes:   []*configv1.Scope{{Name: "orders:read"}},
		},
	}
}

func TestCompile(t *testing.T) {
	t.Parallel()
	res, err := compile.Compile(valid(t), "v7")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range res.Snapshot.GetRoutes() {
		ids = append(ids, r.GetTeam()+"/"+r.GetId())
	}
	if want := []string{"orders/orders.export", "orders/orders.report", "search/search.query"}; !slices.Equal(ids, want) {
		t.Errorf("routes %v, want %v (sorted by team, then id; team filled in)", ids, want)
	}
	if res.Snapshot.GetVersion() != "v7" || res.Snapshot.GetSha256() != res.SHA256 || len(res.SHA256) != 64 {
		t.Errorf("version %q sha256 %q / %q", res.Snapshot.GetVersion(), res.Snapshot.GetSha256(), res.SHA256)
	}
	// The bytes are what a node receives: it compiles them to the same
	// snapshot, sha256 checked.
	var got configv1.Snapshot
	if err := proto.Unmarshal(res.Bytes, &got); err != nil {
		t.Fatal(err)
	}
	node, err := snapshot.Compile(&got)
	if err != nil || node.SHA256 != res.SHA256 {
		t.Fatalf("a node compiling the bytes: %v, sha256 %q, want %q", err, node.SHA256, res.SHA256)
	}
	if len(node.Services) != 1 || got.GetServices()[0].GetTeam() != "orders" {
		t.Errorf("services %v", node.Services)
	}
}

// TestCompileDeterministic: the same config, its lists in another order,
// compiles to the same bytes.
func TestCompileDeterministic(t *testing.T) {
	t.Parallel()
	a, err := compile.Compile(valid(t), "v1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := valid(t)
	slices.Reverse(cfg.TeamConfigs)
	slices.Reverse(cfg.Teams)
	for _, tc := range cfg.TeamConfigs {
		slices.Reverse(tc.Routes)
		slices.Reverse(tc.Clusters)
	}
	b, err := compile.Compile(cfg, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if a.SHA256 != b.SHA256 || string(a.Bytes) != string(b.Bytes) {
		t.Errorf("reordered input: sha256 %s, want %s", b.SHA256, a.SHA256)
	}
	if c, _ := compile.Compile(valid(t), "v2"); c == nil || c.SHA256 == a.SHA256 {
		t.Error("another version name gave the same sha256")
	}
}

// TestCompileRefusals: a config with many problems is refused with every
// one of them, each located in the config teams write.
func TestCompileRefusals(t *testing.T) {
	t.Parallel()
	cfg := valid(t)
	orders, search := cfg.TeamConfigs[1], cfg.TeamConfigs[0]
	orders.Routes = append(orders.Routes,
		route("orders.stray", "api.example.com", "/v1/search/mine", "orders-legacy"),    // search's space
		route("orders.wide", "api.example.com", "/v1/{anything}", "orders-legacy"),      // wider than owned
		route("orders.otherhost", "admin.example.com", "/v1/orders/x", "orders-legacy"), // host not owned
		route("orders.everyhost", "", "/v1/orders/y", "orders-legacy"),                  // every host: not owned
		route("orders.theirs", "api.example.com", "/v1/orders/z", "search"),             // search's cluster
	)
	orders.Routes = append(orders.Routes, &configv1.Route{Id: "orders.mislabelled", Team: "search", Hosts: []string{"api.example.com"}, Path: "/v1/orders/m", Cluster: "orders-legacy", Auth: reviewed})
	search.Clusters = append(search.Clusters, cluster("orders-legacy")) // declared twice
	cfg.TeamConfigs = append(cfg.TeamConfigs, &adminv1.TeamConfig{Team: "ghosts"})
	cfg.Teams = append(cfg.Teams, &adminv1.Team{Name: "squatters", Owns: []*adminv1.Ownership{{Host: "api.example.com", PathPrefix: "/v1/orders/special"}}},
		&adminv1.Team{Name: "everywhere", Owns: []*adminv1.Ownership{{PathPrefix: "/v1/search/all"}}}) // every host: overlaps search's

	_, err := compile.Compile(cfg, "v9")
	var cerr *compile.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Compile: %v, want *compile.Error", err)
	}
	want := []string{
		`teams[squatters].owns[0]: host "api.example.com" path "/v1/orders/special" overlaps team "orders"'s "/v1/orders"`,
		`teams[everywhere].owns[0]: host "" path "/v1/search/all" overlaps team "search"'s "/v1/search"`,
		`team ghosts: no such team`,
		`team search: clusters[orders-legacy]: cluster "orders-legacy" is already declared by team "orders"`,
		`team orders: routes[orders.stray]: path "/v1/search/mine" on host "api.example.com" is outside team "orders"'s`,
		`team orders: routes[orders.wide]: path "/v1/{anything}" on host "api.example.com" is outside`,
		`team orders: routes[orders.otherhost]: path "/v1/orders/x" on host "admin.example.com" is outside`,
		`team orders: routes[orders.everyhost]: path "/v1/orders/y" on every host is outside`,
		`team orders: routes[orders.theirs].cluster: cluster "search" belongs to team "search"`,
		`team orders: routes[orders.mislabelled].team: the route says team "search" in team "orders"'s config`,
	}
	checkViolations(t, cerr, want)
}

// TestCompileNodeChecksTranslated: what the node's own compiler refuses
// comes back located in the team's config, together with what the control
// plane refuses.
func TestCompileNodeChecksTranslated(t *testing.T) {
	t.Parallel()
	cfg := valid(t)
	orders := cfg.TeamConfigs[1]
	nocluster := route("orders.nowhere", "api.example.com", "/v1/orders/nowhere", "nope")
	closed := route("orders.closed", "api.example.com", "/v1/orders/closed", "orders-legacy")
	closed.Auth = &configv1.RouteAuth{Scopes: []string{"orders:nonexistent"}}
	stray := route("orders.stray", "api.example.com", "/v1/search/mine", "orders-legacy")
	orders.Routes = append(orders.Routes, nocluster, closed, stray)
	_, err := compile.Compile(cfg, "v9")
	var cerr *compile.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Compile: %v, want *compile.Error", err)
	}
	// With the control plane's own: all in one answer.
	checkViolations(t, cerr, []string{
		`team orders: routes[orders.nowhere].cluster: `,
		`team orders: routes[orders.closed].auth.scopes[0]: `,
		`team orders: routes[orders.stray]: path "/v1/search/mine" on host "api.example.com" is outside`,
	})
}

// TestCompileServiceOutsideOwnership: routes derived from a service's
// descriptors must lie in its team's space too.
func TestCompileServiceOutsideOwnership(t *testing.T) {
	t.Parallel()
	cfg := valid(t)
	cfg.Teams[0].Owns = cfg.Teams[0].Owns[:2] // orders no longer owns the gRPC path
	_, err := compile.Compile(cfg, "v9")
	var cerr *compile.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Compile: %v, want *compile.Error", err)
	}
	checkViolations(t, cerr, []string{
		`team orders: services[orders]: 6 routes of the service are outside the team's space: "/portico.demo.v1.OrdersService/GetOrder" on host "api.example.com" is outside team "orders"'s`,
	})
}

func TestCompileSchema(t *testing.T) {
	t.Parallel()
	cfg := valid(t)
	cfg.Teams[0].Name = "Orders Team"
	cfg.Teams[1].Owns[0].PathPrefix = "v1/search"
	_, err := compile.Compile(cfg, "v9")
	var cerr *compile.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Compile: %v, want *compile.Error", err)
	}
	// With them, what follows from them: no team "orders" exists, and
	// search's route lies outside the prefix it no longer owns.
	checkViolations(t, cerr, []string{"teams[0].name: ", "teams[1].owns[0].path_prefix: ",
		"team orders: no such team", `team search: routes[search.query]: path "/v1/search/{q}" on host "api.example.com" is outside`})
}

// checkViolations wants each of want to start one violation, and no
// other violations.
func checkViolations(t *testing.T, err *compile.Error, want []string) {
	t.Helper()
	var got []string
	for _, v := range err.Violations {
		got = append(got, v.String())
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			if strings.HasPrefix(g, w) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no violation %q", w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
}

// TestCompileUpstreams: a team's clusters reach only the addresses the
// platform gave the team, and present only identities given to it; names
// the team may use only by network carry those networks to the nodes.
func TestCompileUpstreams(t *testing.T) {
	t.Parallel()
	cfg := valid(t)
	host := func(h string, ports ...string) *adminv1.Upstream {
		return &adminv1.Upstream{Address: &adminv1.Upstream_Host{Host: h}, Ports: ports}
	}
	cidr := func(c string, ports ...string) *adminv1.Upstream {
		return &adminv1.Upstream{Address: &adminv1.Upstream_Cidr{Cidr: c}, Ports: ports}
	}
	cfg.Teams[0].Upstreams = append(cfg.Teams[0].Upstreams,
		cidr("10.1.0.0/16", "443", "8000-8099"),
		host("*.orders.internal"),
		host("legacy.orders.example", "80"),
		host("10.9.9.9"),              // an address given as a host
		cidr("10.7.0.0/16", "90-80"),  // a range backwards
		cidr("10.1.128.0/17", "8443"), // the team's own overlap is fine
	)
	cfg.Teams[1].Upstreams = append(cfg.Teams[1].Upstreams,
		cidr("10.1.2.0/24", "8050"),    // orders' network and ports: two owners
		host("db.orders.internal"),     // under orders' domain
		host("*.search.internal", "1"), // fine
	)
	cfg.Teams[1].Upstreams[0].Ports = []string{"8080"}
	ep := func(addrs ...string) []*configv1.Endpoint {
		var out []*configv1.Endpoint
		for _, a := range addrs {
			out = append(out, &configv1.Endpoint{Address: a})
		}
		return out
	}
	orders := cfg.TeamConfigs[1]
	orders.Clusters = append(orders.Clusters,
		&configv1.Cluster{Name: "fine", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
			Endpoints: ep("10.1.2.3:443", "api.orders.internal:9999", "legacy.orders.example:80", "db.example.net:8080", "[::ffff:10.1.0.1]:8000")},
		&configv1.Cluster{Name: "outside", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
			Endpoints: ep("10.2.0.1:443", "10.1.2.3:22", "[::1]:443")},
		&configv1.Cluster{Name: "sneaky", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Team: "search",
			Endpoints: []*configv1.Endpoint{{Address: "db.example.net:443", Networks: []string{"0.0.0.0/0"}}},
			Tls:       &configv1.UpstreamTLS{CaFile: "/etc/portico/ca.pem", Identity: "gateway"}},
		&configv1.Cluster{Name: "with-id", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: ep("10.1.2.4:443"),
			Tls: &configv1.UpstreamTLS{Identity: "orders-mtls"}},
		&configv1.Cluster{Name: "unknown-id", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: ep("10.1.2.5:443"),
			Tls: &configv1.UpstreamTLS{Identity: "nobody"}},
	)
	// search has names only: a name it was not given is outside, whatever
	// it resolves to.
	cfg.TeamConfigs[0].Clusters = append(cfg.TeamConfigs[0].Clusters, &configv1.Cluster{Name: "stray",
		Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: ep("api.orders.internal:443", "search.internal:9000")})
	cfg.Platform.UpstreamIdentities = []*adminv1.UpstreamIdentity{
		{Name: "gateway", Teams: []string{"search"}},
		{Name: "orders-mtls", Teams: []string{"orders"}},
		{Name: "future", Teams: []string{"not-yet"}},
	}
	_, err := compile.Compile(cfg, "v9")
	var cerr *compile.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Compile: %v, want *compile.Error", err)
	}
	checkViolations(t, cerr, []string{
		`teams[orders].upstreams[4].host: "10.9.9.9" is an IP address: give it as a network`,
		`teams[orders].upstreams[5].ports[0]: the range "90-80" ends before it starts`,
		`teams[search].upstreams[1]: network 10.1.2.0/24 overlaps team "orders"'s network 10.1.0.0/16`,
		`teams[search].upstreams[2]: host "db.orders.internal" overlaps team "orders"'s host "*.orders.internal"`,
		`platform: upstream_identities[future].teams[0]: no such team "not-yet"`,
		`team orders: clusters[outside].endpoints[0].address: 10.2.0.1:443 is outside team "orders"'s upstreams`,
		`team orders: clusters[outside].endpoints[1].address: 10.1.2.3:22 is outside`,
		`team orders: clusters[outside].endpoints[2].address: [::1]:443 is outside`,
		`team search: clusters[stray].endpoints[0].address: api.orders.internal:443 is outside team "search"'s upstreams`,
		`team search: clusters[stray].endpoints[1].address: search.internal:9000 is outside`,
		`team orders: clusters[sneaky].team: the cluster says team "search"`,
		`team orders: clusters[sneaky].endpoints[0].networks: set by the control plane`,
		`team orders: clusters[sneaky].tls.ca_file: a team's cluster pins its CA inline`,
		`team orders: clusters[sneaky].tls.identity: upstream identity "gateway" is not given to team "orders"`,
		`team orders: clusters[unknown-id].tls.identity: no upstream identity "nobody"`,
	})
}

// TestCompileEndpointNetworks: what the snapshot says of the clusters that
// compile: their team, and the networks of endpoints used by network.
func TestCompileEndpointNetworks(t *testing.T) {
	t.Parallel()
	cfg := valid(t)
	cfg.Teams[0].Upstreams = []*adminv1.Upstream{
		{Address: &adminv1.Upstream_Cidr{Cidr: "127.0.0.1/32"}},
		{Address: &adminv1.Upstream_Cidr{Cidr: "10.1.0.0/16"}, Ports: []string{"443"}},
		{Address: &adminv1.Upstream_Cidr{Cidr: "fd00:1::/64"}, Ports: []string{"8000-8099"}},
		{Address: &adminv1.Upstream_Host{Host: "*.orders.internal"}},
	}
	cfg.TeamConfigs[1].Clusters = append(cfg.TeamConfigs[1].Clusters, &configv1.Cluster{Name: "mixed", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
		Endpoints: []*configv1.Endpoint{{Address: "API.Orders.Internal:443"}, {Address: "db.example.net:443"}, {Address: "db.example.net:8080"}, {Address: "10.1.9.9:443"}}})
	res, err := compile.Compile(cfg, "v1")
	if err != nil {
		t.Fatal(err)
	}
	var mixed *configv1.Cluster
	for _, c := range res.Snapshot.GetClusters() {
		if want := map[string]string{"search": "search"}[c.GetName()]; want == "" && c.GetTeam() != "orders" || want != "" && c.GetTeam() != want {
			t.Errorf("cluster %q has team %q", c.GetName(), c.GetTeam())
		}
		if c.GetName() == "mixed" {
			mixed = c
		}
	}
	got := map[string][]string{}
	for _, e := range mixed.GetEndpoints() {
		got[e.GetAddress()] = e.GetNetworks()
	}
	want := map[string][]string{
		"API.Orders.Internal:443": nil,                             // by name
		"db.example.net:443":      {"127.0.0.1/32", "10.1.0.0/16"}, // by network: the networks that allow 443
		"db.example.net:8080":     {"127.0.0.1/32", "fd00:1::/64"}, // and 8080
		"10.1.9.9:443":            nil,                             // an address in a network
	}
	for a, w := range want {
		if !slices.Equal(got[a], w) {
			t.Errorf("endpoint %s: networks %q, want %q", a, got[a], w)
		}
	}
}

// TestCompileDotSegments: a route template with a dot segment, plain or
// encoded, never matches a normalised request: refused, with its path.
func TestCompileDotSegments(t *testing.T) {
	t.Parallel()
	cfg := valid(t)
	cfg.TeamConfigs[1].Routes = append(cfg.TeamConfigs[1].Routes,
		route("orders.up", "api.example.com", "/v1/orders/../admin", "orders-legacy"),
		route("orders.encoded", "api.example.com", "/v1/orders/%2e%2E/admin", "orders-legacy"),
		route("orders.here", "api.example.com", "/v1/orders/./x", "orders-legacy"))
	_, err := compile.Compile(cfg, "v1")
	var cerr *compile.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Compile: %v, want *compile.Error", err)
	}
	checkViolations(t, cerr, []string{
		`team orders: routes[orders.up].path: invalid path template "/v1/orders/../admin" at offset 11: the segment ".." is a dot segment`,
		`team orders: routes[orders.encoded].path: invalid path template "/v1/orders/%2e%2E/admin" at offset 11: the segment "%2e%2E" is a dot segment`,
		`team orders: routes[orders.here].path: invalid path template "/v1/orders/./x" at offset 11: the segment "." is a dot segment`,
	})
}
