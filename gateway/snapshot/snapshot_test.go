package snapshot_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/router"
	"github.com/portico-gw/portico/gateway/snapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

func valid() *configv1.Snapshot {
	return &configv1.Snapshot{
		Version: "7",
		Clusters: []*configv1.Cluster{
			{Name: "orders", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: "10.0.0.1:9000"}}},
			{Name: "legacy", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: "legacy.internal:80"}}},
		},
		Routes: []*configv1.Route{
			{Id: "orders-grpc", Team: "orders", Path: "/acme.orders.v1.Orders/*", Methods: []string{"POST"}, Cluster: "orders"},
			{Id: "orders-get", Team: "orders", Hosts: []string{"api.example.com"}, Path: "/v1/orders/{id}", Methods: []string{"GET"}, Cluster: "orders",
				Timeout: durationpb.New(2_000_000_000), MaxRequestBytes: 4096, Priority: configv1.Priority_PRIORITY_PAID},
			{Id: "legacy-partner", Team: "legacy", Path: "/legacy/**", Cluster: "legacy", Pools: []string{"partner"}},
		},
	}
}

func TestCompile(t *testing.T) {
	t.Parallel()
	cfg := valid()
	s, err := snapshot.Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	digest, _ := snapshot.Digest(cfg)
	if s.SHA256 != digest || len(s.SHA256) != 64 || s.Version != "7" {
		t.Errorf("Version %q SHA256 %q, want 7 and %q", s.Version, s.SHA256, digest)
	}
	r := s.Routes[1]
	if r.Timeout.Seconds() != 2 || r.MaxRequestBytes != 4096 || r.Priority != configv1.Priority_PRIORITY_PAID || r.Index != 1 {
		t.Errorf("route 1 = %+v", r)
	}
	if d := s.Routes[0]; d.Timeout != snapshot.DefaultTimeout || d.MaxRequestBytes != snapshot.DefaultMaxRequestBytes {
		t.Errorf("defaults: timeout %v, max %d", d.Timeout, d.MaxRequestBytes)
	}

	match := func(pool, path string) (string, router.Status) {
		var p router.Params
		r, st := s.Table(pool).Match(router.Request{Host: "api.example.com", Method: "GET", Path: path}, &p)
		if r == nil {
			return "", st
		}
		return r.ID, st
	}
	if id, st := match("partner", "/legacy/x"); id != "legacy-partner" || st != router.Matched {
		t.Errorf("partner pool /legacy/x = %q %v, want legacy-partner", id, st)
	}
	if _, st := match("public", "/legacy/x"); st != router.NotFound {
		t.Errorf("public pool /legacy/x = %v, want NotFound: the route is partner-only", st)
	}
	if id, _ := match("partner", "/v1/orders/1"); id != "orders-get" {
		t.Errorf("partner pool /v1/orders/1 = %q, want orders-get (routes without pools serve every pool)", id)
	}
	if id, _ := match("anything", "/v1/orders/1"); id != "orders-get" {
		t.Errorf("unnamed pool /v1/orders/1 = %q, want orders-get", id)
	}
	if got := s.Pools(); len(got) != 1 || got[0] != "partner" {
		t.Errorf("Pools() = %v, want [partner]", got)
	}
	if got := s.ClusterNames; len(got) != 2 || got[0] != "orders" || got[1] != "legacy" {
		t.Errorf("ClusterNames = %v, want [orders legacy]", got)
	}

	// The source is kept as bytes and decodes to the input, digest included.
	src, err := s.Source()
	if err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(cfg).(*configv1.Snapshot)
	want.Sha256 = s.SHA256
	if !proto.Equal(src, want) {
		t.Errorf("Source() = %v, want %v", src, want)
	}
}

func TestCompileIsDeterministic(t *testing.T) {
	t.Parallel()
	a, _ := snapshot.Compile(valid())
	b, _ := snapshot.Compile(valid())
	if a.SHA256 != b.SHA256 {
		t.Errorf("same input, different digests %s %s", a.SHA256, b.SHA256)
	}
	c := valid()
	c.Routes[0].Id = "orders-grpc-2"
	cs, _ := snapshot.Compile(c)
	if cs.SHA256 == a.SHA256 {
		t.Errorf("different input, same digest")
	}
	// The digest field itself is not part of the content.
	d := valid()
	d.Sha256 = a.SHA256
	ds, err := snapshot.Compile(d)
	if err != nil || ds.SHA256 != a.SHA256 {
		t.Errorf("Compile with its own digest set = %v, %v", ds, err)
	}
}

// TestCompileRejects: each bad config is refused with the field path and
// every problem listed.
func TestCompileRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*configv1.Snapshot)
		want []string // substrings of violations, each "path: message"
	}{
		{"schema", func(c *configv1.Snapshot) {
			c.Routes[0].Id = "Bad Id"
			c.Routes[1].Hosts = []string{"API.example.com"}
			c.Routes[1].Timeout = durationpb.New(31_000_000_000)
			c.Clusters[0].Endpoints[0].Address = "no-port"
		}, []string{"routes[0].id:", "routes[1].hosts[0]:", "routes[1].timeout:", "clusters[0].endpoints[0].address:"}},
		{"unknown cluster", func(c *configv1.Snapshot) { c.Routes[1].Cluster = "payments" }, []string{`routes[1].cluster: route "orders-get" names unknown cluster "payments"`}},
		{"duplicate cluster", func(c *configv1.Snapshot) { c.Clusters[1].Name = "orders" }, []string{`clusters[1].name: duplicate cluster "orders"`}},
		{"duplicate route id", func(c *configv1.Snapshot) { c.Routes[2].Id = "orders-get" }, []string{"orders-get"}},
		{"ambiguous", func(c *configv1.Snapshot) {
			c.Routes = append(c.Routes, &configv1.Route{Id: "orders-get-2", Team: "orders", Hosts: []string{"api.example.com"}, Path: "/v1/orders/{order_id}", Methods: []string{"GET"}, Cluster: "orders"})
		}, []string{"routes[", `"orders-get"`, `"orders-get-2"`}},
		{"bad template", func(c *configv1.Snapshot) { c.Routes[1].Path = "/v1/{id" }, []string{"routes[1]"}},
		{"bad regex", func(c *configv1.Snapshot) {
			c.Routes[1].Headers = []*configv1.HeaderMatch{{Name: "x-v", Match: &configv1.HeaderMatch_Regex{Regex: "a(b"}}}
		}, []string{"routes[1]"}},
		{"h2 without tls", func(c *configv1.Snapshot) { c.Clusters[1].Protocol = configv1.Protocol_PROTOCOL_H2 }, []string{"clusters[1]: protocol H2"}},
		{"grpc probe on http1", func(c *configv1.Snapshot) {
			c.Clusters[1].HealthCheck = &configv1.HealthCheck{Probe: &configv1.HealthCheck_Grpc{Grpc: &configv1.GRPCProbe{}}}
		}, []string{"clusters[1]: a grpc health check needs an HTTP/2 protocol"}},
		{"wrong sha256", func(c *configv1.Snapshot) { c.Sha256 = strings.Repeat("0", 64) }, []string{"sha256: does not match"}},
		{"several at once", func(c *configv1.Snapshot) {
			c.Routes[0].Cluster = "nope"
			c.Routes[1].Cluster = "nope2"
		}, []string{`unknown cluster "nope"`, `unknown cluster "nope2"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.edit(cfg)
			before := proto.Clone(cfg)
			s, err := snapshot.Compile(cfg)
			if err == nil {
				t.Fatalf("Compile = %v, nil; want an error", s)
			}
			var serr *snapshot.Error
			if !errors.As(err, &serr) {
				t.Fatalf("Compile error %T %v, want *snapshot.Error", err, err)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if !proto.Equal(before, cfg) {
				t.Errorf("Compile modified its input")
			}
		})
	}
}

// TestAmbiguityPerPool: routes in disjoint pools may share a shape.
func TestAmbiguityPerPool(t *testing.T) {
	t.Parallel()
	cfg := valid()
	cfg.Routes = append(cfg.Routes, &configv1.Route{Id: "legacy-public", Team: "legacy", Path: "/legacy/**", Cluster: "legacy", Pools: []string{"public"}})
	if _, err := snapshot.Compile(cfg); err != nil {
		t.Errorf("same shape in disjoint pools: %v", err)
	}
	cfg.Routes = append(cfg.Routes, &configv1.Route{Id: "legacy-all", Team: "legacy", Path: "/legacy/{rest=**}", Cluster: "legacy"})
	_, err := snapshot.Compile(cfg)
	if err == nil || !strings.Contains(err.Error(), `"legacy-all"`) {
		t.Errorf("a pool-less route with the same shape as pool routes: %v, want ambiguity naming legacy-all", err)
	}
}

func TestCompileNil(t *testing.T) {
	t.Parallel()
	if _, err := snapshot.Compile(nil); err == nil {
		t.Error("Compile(nil) succeeded")
	}
}

func withAuth() *configv1.Snapshot {
	cfg := valid()
	cfg.Products = []*configv1.Product{{Name: "orders-api"}, {Name: "billing-api"}}
	cfg.Plans = []*configv1.Plan{{Name: "free", Products: []string{"orders-api"}}, {Name: "pro", Products: []string{"orders-api", "billing-api"}}}
	cfg.Scopes = []*configv1.Scope{{Name: "orders:read"}, {Name: "orders:write"}}
	cfg.Issuers = []*configv1.Issuer{{Name: "login", Issuer: "https://login.example.com/", Audiences: []string{"api"}}}
	cfg.Routes[1].Auth = &configv1.RouteAuth{
		Scopes:       []string{"orders:read"},
		MethodScopes: []*configv1.MethodScopes{{Method: "POST", Scopes: []string{"orders:write"}}},
		Product:      "orders-api",
		Issuers:      []string{"login"},
		QueryKey:     "api_key",
	}
	cfg.Routes[2].Auth = &configv1.RouteAuth{Public: true, Reviewer: "sec-team"}
	return cfg
}

func TestCompileAuth(t *testing.T) {
	t.Parallel()
	s, err := snapshot.Compile(withAuth())
	if err != nil {
		t.Fatal(err)
	}
	a := s.Routes[1].Auth
	if got := a.RequiredScopes("GET", "/v1/orders/1"); len(got) != 1 || got[0] != "orders:read" {
		t.Errorf("RequiredScopes(GET) = %v", got)
	}
	if got := a.RequiredScopes("POST", "/v1/orders/1"); len(got) != 1 || got[0] != "orders:write" {
		t.Errorf("RequiredScopes(POST) = %v", got)
	}
	if !a.AcceptsIssuer("login") || a.AcceptsIssuer("other") || a.Product != "orders-api" || a.QueryKey != "api_key" || a.Public {
		t.Errorf("route auth = %+v", a)
	}
	if !s.Routes[2].Auth.Public {
		t.Error("public route not public")
	}
	if s.Routes[0].Auth == nil || s.Routes[0].Auth.Public || !s.Routes[0].Auth.AcceptsIssuer("login") {
		t.Errorf("a route without auth config = %+v, want authenticated with no requirements", s.Routes[0].Auth)
	}
	if !s.PlanIncludes("pro", "billing-api") || s.PlanIncludes("free", "billing-api") || s.PlanIncludes("nope", "orders-api") {
		t.Error("PlanIncludes is wrong")
	}
}

func TestCompileRejectsAuth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*configv1.Snapshot)
		want string
	}{
		{"unknown scope", func(c *configv1.Snapshot) { c.Routes[1].Auth.Scopes = []string{"orders:delete"} }, `routes[1].auth.scopes[0]: route "orders-get" requires unknown scope "orders:delete"`},
		{"unknown method scope", func(c *configv1.Snapshot) { c.Routes[1].Auth.MethodScopes[0].Scopes = []string{"x"} }, `routes[1].auth.method_scopes[0].scopes[0]`},
		{"unknown product", func(c *configv1.Snapshot) { c.Routes[1].Auth.Product = "shipping-api" }, `unknown product "shipping-api"`},
		{"unknown issuer", func(c *configv1.Snapshot) { c.Routes[1].Auth.Issuers = []string{"evil"} }, `unknown issuer "evil"`},
		{"public without reviewer", func(c *configv1.Snapshot) { c.Routes[2].Auth.Reviewer = "" }, "a public route needs a reviewer"},
		{"public with scopes", func(c *configv1.Snapshot) { c.Routes[2].Auth.Scopes = []string{"orders:read"} }, "a public route cannot require"},
		{"plan with unknown product", func(c *configv1.Snapshot) { c.Plans[0].Products = append(c.Plans[0].Products, "nope") }, `plan "free" names unknown product "nope"`},
		{"duplicate plan", func(c *configv1.Snapshot) { c.Plans[1].Name = "free" }, `duplicate plan "free"`},
		{"key with unknown plan", func(c *configv1.Snapshot) {
			c.Keys = []*configv1.KeyRecord{{Sha256: make([]byte, 32), KeyId: "k1", AppId: "a", TenantId: "t", Plan: "gold", Status: configv1.KeyStatus_KEY_STATUS_ACTIVE}}
		}, `key "k1" names unknown plan "gold"`},
		{"deny entry with unknown issuer", func(c *configv1.Snapshot) {
			c.DenyList = []*configv1.DenyEntry{{Issuer: "nope", Match: &configv1.DenyEntry_Jti{Jti: "x"}, Expires: timestamppb.Now()}}
		}, `deny entry names unknown issuer "nope"`},
		{"issuer default plan", func(c *configv1.Snapshot) { c.Issuers[0].DefaultPlan = "gold" }, `issuer "login" names unknown plan "gold"`},
		{"same iss twice", func(c *configv1.Snapshot) {
			c.Issuers = append(c.Issuers, &configv1.Issuer{Name: "login2", Issuer: "https://login.example.com/", Audiences: []string{"api"}})
		}, `configured twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := withAuth()
			tt.edit(cfg)
			_, err := snapshot.Compile(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Compile = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func withLimits() *configv1.Snapshot {
	cfg := withAuth()
	cfg.Plans[0].RateLimits = []*configv1.RateLimit{
		{Name: "default", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_CALLER, Rate: 20, Burst: 40},
		{Name: "app", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_APP, Rate: 2.5},
		{Name: "writes", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_CLASS, Class: "write", Rate: 5,
			OnError: configv1.RateLimitOnError_RATE_LIMIT_ON_ERROR_CLOSED, StaleAfter: durationpb.New(2 * time.Second)},
	}
	cfg.Routes[1].RateLimits = []*configv1.RateLimit{{Name: "route", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_CALLER, Rate: 1}}
	cfg.Routes[1].RateLimitClass = "write"
	cfg.RateLimiting = &configv1.RateLimiting{ExpectedNodes: 3, SyncInterval: durationpb.New(time.Second)}
	return cfg
}

func TestCompileRateLimits(t *testing.T) {
	t.Parallel()
	s, err := snapshot.Compile(withLimits())
	if err != nil {
		t.Fatal(err)
	}
	got := s.PlanLimits("free")
	want := []snapshot.RateLimit{
		{ID: "plan/free/default", Name: "default", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_CALLER, Rate: 20, Burst: 40, StaleAfter: snapshot.DefaultStaleAfter},
		{ID: "plan/free/app", Name: "app", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_APP, Rate: 2.5, Burst: 3, StaleAfter: snapshot.DefaultStaleAfter},
		{ID: "plan/free/writes", Name: "writes", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_CLASS, Class: "write", Rate: 5, Burst: 5, FailClosed: true, StaleAfter: 2 * time.Second},
	}
	if len(got) != len(want) {
		t.Fatalf("PlanLimits(free) = %d limits, want %d", len(got), len(want))
	}
	for i := range want {
		if *got[i] != want[i] {
			t.Errorf("PlanLimits(free)[%d] = %+v, want %+v", i, *got[i], want[i])
		}
	}
	if s.PlanLimits("pro") != nil || s.PlanLimits("nope") != nil {
		t.Error("a plan without limits has limits")
	}
	r := s.Routes[1]
	if len(r.RateLimits) != 1 || r.RateLimits[0].ID != "route/orders-get/route" || r.RateLimits[0].Burst != 1 || r.RateLimitClass != "write" {
		t.Errorf("route limits = %+v, class %q", r.RateLimits, r.RateLimitClass)
	}
	rl := s.RateLimiting
	if rl.ExpectedNodes != 3 || rl.SyncInterval != time.Second || rl.RedisTimeout != snapshot.DefaultRedisTimeout {
		t.Errorf("RateLimiting = %+v", rl)
	}
	if a := rl.Anonymous; a == nil || a.Rate != snapshot.DefaultAnonymousRate || a.Burst != snapshot.DefaultAnonymousBurst || a.ID != "anonymous" {
		t.Errorf("default anonymous limit = %+v", a)
	}

	cfg := withLimits()
	cfg.RateLimiting.Anonymous = &configv1.AnonymousLimit{Disabled: true}
	if s, err := snapshot.Compile(cfg); err != nil || s.RateLimiting.Anonymous != nil {
		t.Errorf("disabled anonymous limit: %v, %+v", err, s.RateLimiting.Anonymous)
	}
	cfg.RateLimiting.Anonymous = &configv1.AnonymousLimit{Rate: 1.5}
	if s, err := snapshot.Compile(cfg); err != nil || s.RateLimiting.Anonymous.Rate != 1.5 || s.RateLimiting.Anonymous.Burst != 2 {
		t.Errorf("anonymous limit 1.5/s: %v, %+v", err, s.RateLimiting.Anonymous)
	}
	if s, err := snapshot.Compile(valid()); err != nil || s.RateLimiting.ExpectedNodes != 1 || s.RateLimiting.SyncInterval != snapshot.DefaultSyncInterval {
		t.Errorf("defaults: %v, %+v", err, s.RateLimiting)
	}
}

func TestCompileRejectsRateLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*configv1.Snapshot)
		want string
	}{
		{"duplicate name", func(c *configv1.Snapshot) { c.Plans[0].RateLimits[1].Name = "default" }, `plans[0].rate_limits[1].name: duplicate rate limit name "default"`},
		{"class without class scope", func(c *configv1.Snapshot) { c.Plans[0].RateLimits[0].Class = "write" }, "class is set exactly when scope is RATE_LIMIT_SCOPE_CLASS"},
		{"class scope without class", func(c *configv1.Snapshot) { c.Plans[0].RateLimits[2].Class = "" }, "class is set exactly when scope is RATE_LIMIT_SCOPE_CLASS"},
		{"no scope", func(c *configv1.Snapshot) { c.Plans[0].RateLimits[0].Scope = 0 }, "plans[0].rate_limits[0].scope"},
		{"zero rate", func(c *configv1.Snapshot) { c.Plans[0].RateLimits[0].Rate = 0 }, "plans[0].rate_limits[0].rate"},
		{"class limit on a route", func(c *configv1.Snapshot) {
			c.Routes[1].RateLimits[0].Scope = configv1.RateLimitScope_RATE_LIMIT_SCOPE_CLASS
			c.Routes[1].RateLimits[0].Class = "write"
		}, `routes[1].rate_limits[0].scope: route "orders-get": a route's own limit is per caller or per app`},
		{"limit on a public route", func(c *configv1.Snapshot) {
			c.Routes[2].RateLimits = []*configv1.RateLimit{{Name: "x", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_CALLER, Rate: 1}}
		}, "it has no caller to limit"},
		{"sync interval too short", func(c *configv1.Snapshot) { c.RateLimiting.SyncInterval = durationpb.New(time.Millisecond) }, "rate_limiting.sync_interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := withLimits()
			tt.edit(cfg)
			_, err := snapshot.Compile(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Compile = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
