package snapshot_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/apikey"
	"github.com/portico-gw/portico/gateway/snapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// probeConfig is a snapshot of the routes under test, each with an
// "other" route beside it that probes may hit instead.
func probeConfig(routes ...*configv1.Route) *configv1.Snapshot {
	for _, r := range routes {
		r.Team, r.Cluster = "t", "c"
	}
	return &configv1.Snapshot{
		Clusters: []*configv1.Cluster{{Name: "c", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: "10.0.0.1:80"}}}},
		Routes:   routes,
	}
}

// probeKey is a well-formed API key, which no probe may carry.
var probeKey = func() string {
	k, err := apikey.Generate(apikey.Live, rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}()

func exact(name, v string) *configv1.HeaderMatch {
	return &configv1.HeaderMatch{Name: name, Match: &configv1.HeaderMatch_Exact{Exact: v}}
}

// TestDefaultProbes: a route's default probe, derived from its methods,
// hosts, path and header matches; or none, when it would not reach the
// route.
func TestDefaultProbes(t *testing.T) {
	t.Parallel()
	type want struct {
		method, host, target string
		header               map[string][]string
		pool                 string
	}
	tests := []struct {
		name  string
		route *configv1.Route
		other *configv1.Route // beside it, if not nil
		want  *want           // nil: no probe
	}{
		{"literal path, any method", &configv1.Route{Path: "/v1/orders"}, nil,
			&want{"GET", "probe.invalid", "/v1/orders", nil, ""}},
		{"variables", &configv1.Route{Path: "/v1/orders/{id}/items/{item}"}, nil,
			&want{"GET", "probe.invalid", "/v1/orders/probe/items/probe", nil, ""}},
		{"variable with a pattern, verb", &configv1.Route{Path: "/v1/{name=shelves/*}:archive", Methods: []string{"GET"}}, nil,
			&want{"GET", "probe.invalid", "/v1/shelves/probe:archive", nil, ""}},
		{"wildcards", &configv1.Route{Path: "/files/*/{rest=**}"}, nil,
			&want{"GET", "probe.invalid", "/files/probe/probe", nil, ""}},
		{"GET among methods", &configv1.Route{Path: "/a", Methods: []string{"POST", "GET"}}, nil,
			&want{"GET", "probe.invalid", "/a", nil, ""}},
		{"HEAD without GET", &configv1.Route{Path: "/a", Methods: []string{"POST", "HEAD"}}, nil,
			&want{"HEAD", "probe.invalid", "/a", nil, ""}},
		// A probe repeats every interval on every canary node: by
		// default, none may change data.
		{"DELETE only", &configv1.Route{Path: "/a/{id}", Methods: []string{"DELETE"}}, nil, nil},
		{"POST only", &configv1.Route{Path: "/a", Methods: []string{"POST"}}, nil, nil},
		{"neither GET nor HEAD", &configv1.Route{Path: "/a", Methods: []string{"PUT", "PATCH", "OPTIONS"}}, nil, nil},
		{"first host", &configv1.Route{Path: "/a", Hosts: []string{"api.example.com", "eu.example.com"}}, nil,
			&want{"GET", "api.example.com", "/a", nil, ""}},
		{"wildcard host", &configv1.Route{Path: "/a", Hosts: []string{"*.example.com"}}, nil,
			&want{"GET", "probe.example.com", "/a", nil, ""}},
		{"first pool", &configv1.Route{Path: "/a", Pools: []string{"partner", "public"}}, nil,
			&want{"GET", "probe.invalid", "/a", nil, "partner"}},
		{"header matches", &configv1.Route{Path: "/a", Headers: []*configv1.HeaderMatch{
			exact("x-version", "2"),
			{Name: "X-Tenant", Match: &configv1.HeaderMatch_Prefix{Prefix: "acme-"}},
			{Name: "X-Trace", Match: &configv1.HeaderMatch_Present{Present: true}},
			{Name: "X-Beta", Invert: true, Match: &configv1.HeaderMatch_Present{Present: true}},
		}}, nil,
			&want{"GET", "probe.invalid", "/a", map[string][]string{"X-Version": {"2"}, "X-Tenant": {"acme-"}, "X-Trace": {"probe"}}, ""}},
		{"a literal beats the probe's segment", &configv1.Route{Path: "/v1/{id}"}, &configv1.Route{Id: "other", Path: "/v1/probe"}, nil},
		{"a regex match cannot be satisfied", &configv1.Route{Path: "/a", Headers: []*configv1.HeaderMatch{
			{Name: "X-Version", Match: &configv1.HeaderMatch_Regex{Regex: "2\\.[0-9]+"}},
		}}, nil, nil},
		{"an exact host beats the wildcard's probe host", &configv1.Route{Path: "/a", Hosts: []string{"*.example.com"}},
			&configv1.Route{Id: "other", Path: "/a", Hosts: []string{"probe.example.com"}}, nil},
		{"the route accepts HEAD, another GET", &configv1.Route{Path: "/a", Methods: []string{"HEAD", "POST"}},
			&configv1.Route{Id: "other", Path: "/a", Methods: []string{"GET"}},
			&want{"HEAD", "probe.invalid", "/a", nil, ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.route.Id = "r"
			tt.route.Auth = &configv1.RouteAuth{Public: true, Reviewer: "tests"}
			cfg := probeConfig(tt.route)
			if tt.other != nil {
				tt.other.Auth = tt.route.Auth
				cfg = probeConfig(tt.route, tt.other)
			}
			s, err := snapshot.Compile(cfg)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			p := s.Routes[0].Probe
			if tt.want == nil {
				if p != nil {
					t.Fatalf("Probe = %+v, want none", p)
				}
				return
			}
			if p == nil {
				t.Fatal("Probe = nil, want one")
			}
			w := tt.want
			if p.Method != w.method || p.Host != w.host || p.Target() != w.target || p.Pool != w.pool || !maps.EqualFunc(p.Header, w.header, slices.Equal) {
				t.Errorf("Probe = %s %s%s header %v pool %q, want %s %s%s header %v pool %q",
					p.Method, p.Host, p.Target(), p.Header, p.Pool, w.method, w.host, w.target, w.header, w.pool)
			}
			if p.Explicit || p.GRPC || p.Body != nil || p.ContentType != "" || p.Expect != configv1.StatusClass_STATUS_CLASS_UNSPECIFIED {
				t.Errorf("Probe = %+v, want a default REST probe without a body, expecting no 5xx", p)
			}
		})
	}
}

// TestExplicitProbes: a route's own probe, its unset fields given the
// defaults; refused, naming the route, when the route would not answer it.
func TestExplicitProbes(t *testing.T) {
	t.Parallel()
	other := func() *configv1.Route {
		return &configv1.Route{Id: "y", Path: "/v1/y", Methods: []string{"GET"}, Auth: &configv1.RouteAuth{Public: true, Reviewer: "tests"}}
	}
	tests := []struct {
		name    string
		route   *configv1.Route
		check   func(t *testing.T, p *snapshot.Probe)
		refused string // the violation, if refused
		at      string
	}{
		{name: "every field", route: &configv1.Route{Path: "/v1/orders/{id}", Methods: []string{"GET", "POST"}, Hosts: []string{"api.example.com"},
			Probe: &configv1.RouteProbe{Method: "POST", Path: "/v1/orders/o-1?dry_run=1", Host: "API.example.com:443",
				Headers: []*configv1.HeaderValue{{Name: "x-probe", Value: "1"}}, Body: []byte(`{}`), ContentType: "application/json",
				Expect: configv1.StatusClass_STATUS_CLASS_2XX}},
			check: func(t *testing.T, p *snapshot.Probe) {
				if p.Method != "POST" || p.Host != "api.example.com" || p.Path != "/v1/orders/o-1" || p.RawQuery != "dry_run=1" ||
					!slices.Equal(p.Header["X-Probe"], []string{"1"}) || string(p.Body) != "{}" || p.ContentType != "application/json" ||
					p.Expect != configv1.StatusClass_STATUS_CLASS_2XX || !p.Explicit || p.GRPC {
					t.Errorf("Probe = %+v", p)
				}
				if !p.Passes(2) || p.Passes(4) {
					t.Errorf("Passes(2), Passes(4) = %v, %v; want true, false for expect 2XX", p.Passes(2), p.Passes(4))
				}
			}},
		{name: "defaults fill unset fields", route: &configv1.Route{Path: "/v1/orders/{id}", Headers: []*configv1.HeaderMatch{exact("X-Version", "2")},
			Probe: &configv1.RouteProbe{Headers: []*configv1.HeaderValue{{Name: "X-Version", Value: "3"}}, Expect: configv1.StatusClass_STATUS_CLASS_4XX}},
			check: func(t *testing.T, p *snapshot.Probe) {
				if p.Method != "GET" || p.Target() != "/v1/orders/probe" || !slices.Equal(p.Header["X-Version"], []string{"2", "3"}) || !p.Passes(4) || p.Passes(2) {
					t.Errorf("Probe = %+v", p)
				}
			}},
		{name: "another route answers", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Path: "/v1/y"}},
			refused: `route "r": probe GET /v1/y matches route "y", not this one`, at: "routes[0].probe"},
		{name: "no route answers", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Path: "/v2/x"}},
			refused: `route "r": probe GET /v2/x matches no route`, at: "routes[0].probe"},
		{name: "a route without a safe method: its first", route: &configv1.Route{Path: "/v1/{x}", Methods: []string{"PUT", "DELETE"},
			Probe: &configv1.RouteProbe{Expect: configv1.StatusClass_STATUS_CLASS_2XX}},
			check: func(t *testing.T, p *snapshot.Probe) {
				if p.Method != "PUT" || p.Target() != "/v1/probe" {
					t.Errorf("Probe = %+v, want PUT /v1/probe", p)
				}
			}},
		{name: "method not accepted", route: &configv1.Route{Path: "/v1/{x}", Methods: []string{"GET"}, Probe: &configv1.RouteProbe{Method: "DELETE"}},
			refused: `route "r": probe DELETE /v1/probe: method DELETE not accepted (allowed: GET, HEAD)`, at: "routes[0].probe"},
		{name: "an empty probe that its route would not answer", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Host: "other.example.com"},
			Hosts: []string{"api.example.com"}},
			refused: `route "r": probe GET /v1/probe matches no route`, at: "routes[0].probe"},
		{name: "another pool's table", route: &configv1.Route{Path: "/v1/{x}", Pools: []string{"partner"}, Probe: &configv1.RouteProbe{Path: "/v1/y"}},
			refused: `route "r": probe GET /v1/y in pool "partner" matches route "y", not this one`, at: "routes[0].probe"},
		{name: "the path is normalised as requests are", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Path: "/v1/a/../y"}},
			refused: `route "r": probe GET /v1/a/../y matches route "y", not this one`, at: "routes[0].probe"},
		{name: "a path no request has", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Path: "/v1/%2F"}},
			refused: `route "r": probe path "/v1/%2F": invalid request path: encoded slash, backslash or NUL`, at: "routes[0].probe.path"},
		{name: "a header in the host", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Host: "h\r\nX-Evil: 1"}},
			refused: `route "r": probe host "h\r\nX-Evil: 1": the port is not`, at: "routes[0].probe.host"},
		{name: "a line break in the host", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Host: "h\r\nX-Evil"}},
			refused: `route "r": probe host "h\r\nX-Evil": a hostname has letters, digits`, at: "routes[0].probe.host"},
		{name: "a wildcard host", route: &configv1.Route{Path: "/v1/{x}", Hosts: []string{"*.example.com"}, Probe: &configv1.RouteProbe{Host: "*.example.com"}},
			refused: `route "r": probe host "*.example.com": a hostname has letters`, at: "routes[0].probe.host"},
		{name: "a bad port", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Host: "api.example.com:0"}},
			refused: `route "r": probe host "api.example.com:0": the port is not`, at: "routes[0].probe.host"},
		{name: "an empty label", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Host: "api..example.com"}},
			refused: `route "r": probe host "api..example.com": each label`, at: "routes[0].probe.host"},
		{name: "a label's hyphen", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Host: "-api.example.com"}},
			refused: `route "r": probe host "-api.example.com": a label may not`, at: "routes[0].probe.host"},
		{name: "a credential header", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Headers: []*configv1.HeaderValue{{Name: "x-api-key", Value: "k"}}}},
			refused: `route "r": probe header X-Api-Key is the gateway's`, at: "routes[0].probe.headers[0].name"},
		{name: "an identity header", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Headers: []*configv1.HeaderValue{{Name: "x_auth_client_id", Value: "me"}}}},
			refused: `route "r": probe header X_auth_client_id is the gateway's`, at: "routes[0].probe.headers[0].name"},
		{name: "an API key in a header", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Headers: []*configv1.HeaderValue{{Name: "X-Partner", Value: "Bearer " + probeKey}}}},
			refused: `route "r": probe header X-Partner holds an API key`, at: "routes[0].probe.headers[0].value"},
		{name: "an API key in the query", route: &configv1.Route{Path: "/v1/{x}", Probe: &configv1.RouteProbe{Path: "/v1/y?a=1&k=" + probeKey}},
			refused: `route "r": probe query parameter "k" holds an API key`, at: "routes[0].probe.path"},
		{name: "the route's key parameter", route: &configv1.Route{Path: "/v1/{x}", Auth: &configv1.RouteAuth{QueryKey: "api_key"},
			Probe: &configv1.RouteProbe{Path: "/v1/y?api%5Fkey=x"}},
			refused: `route "r": probe query sets api_key, the route's API key parameter`, at: "routes[0].probe.path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.route.Id = "r"
			if tt.route.Auth == nil {
				tt.route.Auth = &configv1.RouteAuth{Public: true, Reviewer: "tests"}
			}
			s, err := snapshot.Compile(probeConfig(tt.route, other()))
			if tt.refused == "" {
				if err != nil {
					t.Fatalf("Compile: %v", err)
				}
				if s.Routes[0].Probe == nil {
					t.Fatal("Probe = nil, want the route's own")
				}
				tt.check(t, s.Routes[0].Probe)
				return
			}
			var se *snapshot.Error
			if !errors.As(err, &se) {
				t.Fatalf("Compile = %v, want a *snapshot.Error", err)
			}
			for _, v := range se.Violations {
				if v.Path == tt.at && strings.HasPrefix(v.Message, tt.refused) {
					return
				}
			}
			t.Errorf("Compile = %v, want %s: %s", err, tt.at, tt.refused)
		})
	}
}

// TestServiceMethodProbes: a service method's gRPC route is probed as a
// gRPC call with an empty message when the method has a GET binding (or
// says it has no side effects); its REST bindings as REST calls when
// they are GETs. Other methods and bindings have no default probe.
func TestServiceMethodProbes(t *testing.T) {
	t.Parallel()
	svc := demoService(&configv1.Descriptors{Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: demoSet(t)}})
	svc.Auth = &configv1.RouteAuth{Public: true, Reviewer: "tests"}
	s, err := snapshot.Compile(withService(svc))
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	byID := map[string]*snapshot.Route{}
	for i := range s.Routes {
		byID[s.Routes[i].ID] = &s.Routes[i]
	}
	r := byID["demo-orders.GetOrder"]
	if r == nil || r.Probe == nil {
		t.Fatalf("route demo-orders.GetOrder %v: want it with a probe", r)
	}
	p := r.Probe
	if p.Method != "POST" || p.Target() != "/portico.demo.v1.OrdersService/GetOrder" || !p.GRPC || p.ContentType != "application/grpc" ||
		!bytes.Equal(p.Body, []byte{0, 0, 0, 0, 0}) || !slices.Equal(p.Header["Te"], []string{"trailers"}) {
		t.Errorf("GetOrder's probe = %+v, want a gRPC call of an empty message", p)
	}
	// CreateOrder's one binding is a POST, ImportOrders has none: a probe
	// could create or import orders.
	for _, id := range []string{"demo-orders.CreateOrder", "demo-orders.CreateOrder.http0", "demo-orders.ImportOrders",
		"demo-orders.SyncOrders", "demo-orders.ListOrders.http1"} {
		if r := byID[id]; r == nil || r.Probe != nil {
			t.Errorf("route %s = %+v, want it without a default probe", id, r)
		}
	}
	for _, id := range []string{"demo-orders.ListOrders", "demo-orders.WatchOrders", "demo-orders.ListOrders.http0"} {
		if r := byID[id]; r == nil || r.Probe == nil {
			t.Errorf("route %s = %+v, want it with a default probe", id, r)
		}
	}
	var rest *snapshot.Route
	for i := range s.Routes {
		if r := &s.Routes[i]; r.RPC != nil && r.RPC.REST() && r.RPC.Method.Name() == "GetOrder" {
			rest = r
		}
	}
	if rest == nil || rest.Probe == nil || rest.Probe.GRPC || rest.Probe.Method != "GET" || !strings.Contains(rest.Probe.Path, "/probe") {
		t.Errorf("GetOrder's REST binding %v: want a GET probe of its path", rest)
	}
}

func TestRouteSelection(t *testing.T) {
	t.Parallel()
	sel := snapshot.RouteSelection{IDs: []string{"orders.list", "search"}, Prefixes: []string{"billing.", "orders."}}
	selector := sel.Selector()
	for id, want := range map[string]bool{
		"orders.list": true, "orders.get": false, "search": true, "search.v2": false,
		// A prefix selects the routes a service derives alone:
		// "<service id>.<Method>" and its bindings' ".httpN".
		"billing.Pay": true, "billing.Pay.http0": true, "billing": false, "billing.": false,
		"billing.refunds": false, "billing.2fa": false, "orders.GetOrder": true, "orders.create": false,
	} {
		if got := sel.Selects(id); got != want {
			t.Errorf("Selects(%q) = %v, want %v", id, got, want)
		}
		if got := selector.Selects(id); got != want {
			t.Errorf("Selector().Selects(%q) = %v, want %v", id, got, want)
		}
	}
	// The selector keeps its own copy.
	sel.IDs[0] = "changed"
	if !selector.Selects("orders.list") {
		t.Error("Selector().Selects follows a change to the selection it was made of")
	}
	if sel.Empty() || !(snapshot.RouteSelection{}).Empty() || (snapshot.RouteSelection{All: true}).Empty() {
		t.Error("Empty is wrong")
	}
	if !(snapshot.RouteSelection{All: true}).Selects("anything") || !(snapshot.RouteSelection{All: true}).Selector().Selects("anything") {
		t.Error("All does not select every route")
	}
}
