package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// authFixture is a demo snapshot behind authentication: the inventory needs
// inventory:read for GET and inventory:write otherwise, and belongs to the
// product inventory-api; the orders service needs orders:read.
type authFixture struct {
	cfg    *configv1.Snapshot
	issuer *gatewaytest.Issuer
	// keys by name: good (plan pro, read+write), reader (plan pro, read
	// only), free (plan free: no inventory-api), revoked, expired, rotated
	// (successor set, works until an hour from now).
	keys map[string]string
}

func newAuthFixture(t *testing.T, d interface {
	OrdersAddr() string
	InventoryAddr() string
}) *authFixture {
	t.Helper()
	f := &authFixture{keys: map[string]string{}, issuer: gatewaytest.NewIssuer(t, "login")}
	cfg := &configv1.Snapshot{
		Version: "auth",
		Clusters: []*configv1.Cluster{
			{Name: "orders", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: d.OrdersAddr()}}},
			{Name: "inventory", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: d.InventoryAddr()}}},
		},
		Products: []*configv1.Product{{Name: "inventory-api"}, {Name: "orders-api"}},
		Plans: []*configv1.Plan{
			{Name: "pro", Products: []string{"inventory-api", "orders-api"}},
			{Name: "free", Products: []string{"orders-api"}},
		},
		Scopes:  []*configv1.Scope{{Name: "inventory:read"}, {Name: "inventory:write"}, {Name: "orders:read"}},
		Issuers: []*configv1.Issuer{f.issuer.Config(t)},
		Routes: []*configv1.Route{
			{Id: "orders", Team: "demo", Methods: []string{"POST"}, Path: "/portico.demo.v1.OrdersService/*", Cluster: "orders",
				Auth: &configv1.RouteAuth{Scopes: []string{"orders:read"}, Product: "orders-api"}},
			{Id: "inventory", Team: "demo", Path: "/inventory/v1/{rest=**}", Cluster: "inventory",
				Auth: &configv1.RouteAuth{
					Scopes:       []string{"inventory:write"},
					MethodScopes: []*configv1.MethodScopes{{Method: "GET", Scopes: []string{"inventory:read"}}},
					Product:      "inventory-api",
					QueryKey:     "api_key",
				}},
			{Id: "public", Team: "demo", Path: "/public/{rest=**}", Cluster: "inventory", Auth: gatewaytest.Public},
		},
	}
	add := func(name, plan string, edit func(*configv1.KeyRecord), scopes ...string) {
		key, rec := gatewaytest.NewKey(t, "key-"+name, "app-"+name, "tenant-1", plan, scopes...)
		if edit != nil {
			edit(rec)
		}
		f.keys[name] = key
		cfg.Keys = append(cfg.Keys, rec)
	}
	all := []string{"inventory:read", "inventory:write", "orders:read"}
	add("good", "pro", nil, all...)
	add("reader", "pro", nil, "inventory:read", "orders:read")
	add("free", "free", nil, all...)
	add("revoked", "pro", func(r *configv1.KeyRecord) { r.Status = configv1.KeyStatus_KEY_STATUS_REVOKED }, all...)
	add("expired", "pro", func(r *configv1.KeyRecord) { r.NotAfter = timestamppb.New(time.Now().Add(-time.Minute)) }, all...)
	add("rotated", "pro", func(r *configv1.KeyRecord) {
		r.NotAfter = timestamppb.New(time.Now().Add(time.Hour))
		r.SuccessorKeyId = "key-good"
	}, all...)
	f.cfg = cfg
	return f
}

type authCase struct {
	name   string
	method string
	url    string
	header map[string]string
	status int
	code   string // problem error code when not 2xx
}

// send sends tc's request to the gateway at base and checks its status. It
// returns the response when tc expects a problem; otherwise it drains the
// body and returns nil.
func (tc authCase) send(t *testing.T, client *http.Client, base string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(tc.method, base+tc.url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	for h, v := range tc.header {
		req.Header.Set(h, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != tc.status {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("status %d %s, want %d", resp.StatusCode, b, tc.status)
	}
	if tc.code == "" {
		gatewaytest.Drain(resp)
		return nil
	}
	return resp
}

func TestAPIKeyAuthentication(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	g := gatewaytest.Start(t, f.cfg, nil)
	client := gatewaytest.HTTP1Client(t)
	k := f.keys
	// The same key with its last checksum character changed.
	last := "A"
	if strings.HasSuffix(k["good"], "A") {
		last = "B"
	}
	badChecksum := k["good"][:len(k["good"])-1] + last

	for _, tc := range []authCase{
		{"no credential", "GET", "/inventory/v1/items", nil, 401, "unauthenticated"},
		{"x-api-key", "GET", "/inventory/v1/items", map[string]string{"X-Api-Key": k["good"]}, 200, ""},
		{"bearer key", "GET", "/inventory/v1/items", map[string]string{"Authorization": "Bearer " + k["good"]}, 200, ""},
		{"query key", "GET", "/inventory/v1/items?api_key=" + k["good"], nil, 200, ""},
		{"escaped query key name", "GET", "/inventory/v1/items?api%5Fkey=" + k["good"], nil, 200, ""},
		{"query key twice", "GET", "/inventory/v1/items?api_key=" + k["good"] + "&api_key=" + k["reader"], nil, 401, "unauthenticated"},
		{"query key twice, the same", "GET", "/inventory/v1/items?api_key=" + k["good"] + "&api_key=" + k["good"], nil, 401, "unauthenticated"},
		{"two credentials", "GET", "/inventory/v1/items", map[string]string{"X-Api-Key": k["good"], "Authorization": "Bearer " + k["good"]}, 401, "unauthenticated"},
		{"basic scheme", "GET", "/inventory/v1/items", map[string]string{"Authorization": "Basic Zm9vOmJhcg=="}, 401, "unauthenticated"},
		{"revoked", "GET", "/inventory/v1/items", map[string]string{"X-Api-Key": k["revoked"]}, 401, "unauthenticated"},
		{"expired", "GET", "/inventory/v1/items", map[string]string{"X-Api-Key": k["expired"]}, 401, "unauthenticated"},
		{"rotated within overlap", "GET", "/inventory/v1/items", map[string]string{"X-Api-Key": k["rotated"]}, 200, ""},
		{"wrong checksum", "GET", "/inventory/v1/items", map[string]string{"X-Api-Key": badChecksum}, 401, "unauthenticated"},
		{"wrong prefix", "GET", "/inventory/v1/items", map[string]string{"X-Api-Key": "ak_prod_" + k["good"][8:]}, 401, "unauthenticated"},
		{"unknown key", "GET", "/inventory/v1/items", map[string]string{"X-Api-Key": gatewaytestKey(t)}, 401, "unauthenticated"},
		{"missing scope", "POST", "/inventory/v1/items", map[string]string{"X-Api-Key": k["reader"]}, 403, "insufficient_scope"},
		{"product not in plan", "GET", "/inventory/v1/items", map[string]string{"X-Api-Key": k["free"]}, 403, "product_not_in_plan"},
		{"public route", "GET", "/public/healthz", nil, 404, ""}, // reaches the backend, which has no /public
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.send(t, client, g.URL())
			if resp == nil {
				return
			}
			challenge := resp.Header.Get("Www-Authenticate")
			p := readProblem(t, resp)
			if p.Error != tc.code {
				t.Errorf("error = %q, want %q", p.Error, tc.code)
			}
			switch tc.code {
			case "unauthenticated":
				if !strings.HasPrefix(challenge, `Bearer realm="portico"`) {
					t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", challenge)
				}
			case "insufficient_scope":
				if challenge != `Bearer realm="portico", error="insufficient_scope", scope="inventory:write"` {
					t.Errorf("WWW-Authenticate = %q", challenge)
				}
			}
		})
	}
}

func gatewaytestKey(t *testing.T) string {
	k, _ := gatewaytest.NewKey(t, "unknown", "app", "tenant", "pro")
	return k
}

// TestIdentityReachesBackend: the backend gets the verified identity and
// never the credential, the query key or a client-forged x-auth-* header.
func TestIdentityReachesBackend(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	g := gatewaytest.Start(t, f.cfg, nil)
	client := gatewaytest.HTTP1Client(t)

	forged := map[string]string{"X-Auth-Subject": "admin", "X-Auth-Tenant": "other", "x-auth-scopes": "everything", "X-Auth-Key-Id": "key-root"}
	for _, tc := range []struct {
		name   string
		url    string
		header map[string]string
		want   map[string]string
	}{
		{"api key", "/inventory/v1/headers?a=1&api_key=" + f.keys["good"] + "&b=2", nil, map[string]string{
			"X-Auth-Key-Id": "key-good", "X-Auth-Client-Id": "app-good", "X-Auth-Tenant": "tenant-1", "X-Auth-Plan": "pro",
			"X-Auth-Scopes": "inventory:read inventory:write orders:read", "X-Auth-Subject": "",
		}},
		{"token", "/inventory/v1/headers?a=1&b=2", map[string]string{"Authorization": "Bearer " + f.issuer.Mint(t, map[string]any{
			"sub": "user-7", "client_id": "app-web", "scope": "inventory:read", "plan": "pro", "tenant": "tenant-9",
		})}, map[string]string{
			"X-Auth-Subject": "user-7", "X-Auth-Client-Id": "app-web", "X-Auth-Tenant": "tenant-9", "X-Auth-Plan": "pro",
			"X-Auth-Scopes": "inventory:read", "X-Auth-Key-Id": "",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", g.URL()+tc.url, nil)
			for h, v := range forged {
				req.Header[h] = []string{v}
			}
			for h, v := range tc.header {
				req.Header.Set(h, v)
			}
			e, _ := getEcho(t, client, req)
			for h, want := range tc.want {
				if got := strings.Join(e.Header[h], ","); got != want {
					t.Errorf("backend %s = %q, want %q", h, got, want)
				}
			}
			for _, h := range []string{"Authorization", "X-Api-Key", "x-auth-scopes"} {
				if v, ok := e.Header[h]; ok {
					t.Errorf("backend received %s: %q", h, v)
				}
			}
			if e.RawQuery != "a=1&b=2" {
				t.Errorf("backend query = %q, want a=1&b=2 (the key removed)", e.RawQuery)
			}
		})
	}
}

func TestTokenAuthentication(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	other := gatewaytest.NewIssuer(t, "other")
	f.cfg.Issuers = append(f.cfg.Issuers, other.Config(t))
	f.cfg.Routes[1].Auth.Issuers = []string{"login"}
	denied := f.issuer.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro", "jti": "stolen-1"})
	f.cfg.DenyList = []*configv1.DenyEntry{
		{Issuer: "login", Match: &configv1.DenyEntry_Jti{Jti: "stolen-1"}, Expires: timestamppb.New(time.Now().Add(time.Hour))},
		{Match: &configv1.DenyEntry_Subject{Subject: "fired-user"}, IssuedBefore: timestamppb.New(time.Now().Add(time.Minute)), Expires: timestamppb.New(time.Now().Add(time.Hour))},
	}
	g := gatewaytest.Start(t, f.cfg, nil)
	client := gatewaytest.HTTP1Client(t)
	is := f.issuer
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

	for _, tc := range []authCase{
		{"valid", "GET", "/inventory/v1/items", bearer(is.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro"})), 200, ""},
		{"scp array", "GET", "/inventory/v1/items", bearer(is.Mint(t, map[string]any{"scp": []string{"inventory:read"}, "plan": "pro"})), 200, ""},
		{"expired", "GET", "/inventory/v1/items", bearer(is.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro", "exp": time.Now().Add(-time.Hour).Unix()})), 401, "unauthenticated"},
		{"wrong audience", "GET", "/inventory/v1/items", bearer(is.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro", "aud": "someone-else"})), 401, "unauthenticated"},
		{"denied by jti", "GET", "/inventory/v1/items", bearer(denied), 401, "unauthenticated"},
		{"denied by subject", "GET", "/inventory/v1/items", bearer(is.Mint(t, map[string]any{"sub": "fired-user", "scope": "inventory:read", "plan": "pro"})), 401, "unauthenticated"},
		{"missing scope", "POST", "/inventory/v1/items", bearer(is.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro"})), 403, "insufficient_scope"},
		{"no plan", "GET", "/inventory/v1/items", bearer(is.Mint(t, map[string]any{"scope": "inventory:read"})), 403, "product_not_in_plan"},
		{"issuer not accepted by route", "GET", "/inventory/v1/items", bearer(other.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro"})), 401, "unauthenticated"},
		{"garbage", "GET", "/inventory/v1/items", bearer("not.a.token"), 401, "unauthenticated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.send(t, client, g.URL())
			if resp == nil {
				return
			}
			if p := readProblem(t, resp); p.Error != tc.code {
				t.Errorf("error = %q, want %q", p.Error, tc.code)
			}
		})
	}
}

// TestTokenLifetime: a token that lives longer than its issuer allows (15
// minutes plus leeway by default) is a 401 invalid_token that says why
// without echoing the token, with or without iat; an issuer may allow
// longer.
func TestTokenLifetime(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	long := gatewaytest.NewIssuer(t, "long")
	cfg := long.Config(t)
	cfg.MaxTokenLifetime = durationpb.New(time.Hour)
	f.cfg.Issuers = append(f.cfg.Issuers, cfg)
	g := gatewaytest.Start(t, f.cfg, nil)
	client := gatewaytest.HTTP1Client(t)
	hour := time.Now().Add(time.Hour).Unix()
	for _, tc := range []struct {
		name   string
		token  string
		status int
	}{
		{"an hour", f.issuer.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro", "exp": hour}), 401},
		{"an hour without iat", f.issuer.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro", "exp": hour, "iat": nil}), 401},
		{"an hour of an issuer that allows it", long.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro", "exp": hour}), 200},
		{"15 minutes", f.issuer.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro"}), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code := ""
			if tc.status != 200 {
				code = "unauthenticated"
			}
			resp := authCase{tc.name, "GET", "/inventory/v1/items", map[string]string{"Authorization": "Bearer " + tc.token}, tc.status, code}.send(t, client, g.URL())
			if resp == nil {
				return
			}
			challenge := resp.Header.Get("WWW-Authenticate")
			p := readProblem(t, resp)
			if p.Error != "unauthenticated" || p.Detail != "the access token is not valid: lifetime too long" || !strings.Contains(challenge, `error="invalid_token"`) {
				t.Errorf("problem %q %q, WWW-Authenticate %q; want unauthenticated, the lifetime, invalid_token", p.Error, p.Detail, challenge)
			}
			for _, seg := range strings.Split(tc.token, ".") {
				if strings.Contains(p.Detail+p.Instance+challenge, seg[len(seg)-16:]) {
					t.Errorf("the answer echoes the token: %q %q %q", p.Detail, p.Instance, challenge)
				}
			}
		})
	}
}

// TestKeyExpiresAtOverlapEnd: a rotated key stops at the end of its overlap
// without anything else happening.
func TestKeyExpiresAtOverlapEnd(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	var offset atomic.Int64
	g := gatewaytest.Start(t, f.cfg, func(o *gateway.Options) {
		o.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	})
	client := gatewaytest.HTTP1Client(t)
	get := func() int {
		req, _ := http.NewRequest("GET", g.URL()+"/inventory/v1/items", nil)
		req.Header.Set("X-Api-Key", f.keys["rotated"])
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		gatewaytest.Drain(resp)
		return resp.StatusCode
	}
	if s := get(); s != 200 {
		t.Fatalf("rotated key during its overlap = %d, want 200", s)
	}
	offset.Store(int64(2 * time.Hour))
	if s := get(); s != 401 {
		t.Errorf("rotated key after its overlap = %d, want 401", s)
	}
}

func TestGRPCAuthentication(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	g := gatewaytest.Start(t, f.cfg, nil)
	client := demov1.NewOrdersServiceClient(g.GRPCConn(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	_, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1001"})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("no credential: %v, want Unauthenticated", err)
	}
	_, err = client.GetOrder(metadata.AppendToOutgoingContext(ctx, "x-api-key", f.keys["revoked"]), &demov1.GetOrderRequest{OrderId: "o-1001"})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("revoked key: %v, want Unauthenticated", err)
	}

	var header metadata.MD
	md := metadata.AppendToOutgoingContext(ctx, "x-api-key", f.keys["good"], "x-auth-tenant", "forged",
		"x-demo-echo-md", "x-auth-key-id,x-auth-tenant,x-auth-scopes,x-api-key,authorization")
	if _, err := client.GetOrder(md, &demov1.GetOrderRequest{OrderId: "o-1001"}, grpc.Header(&header)); err != nil {
		t.Fatalf("GetOrder with a key: %v", err)
	}
	want := map[string]string{"x-demo-echo-x-auth-key-id": "key-good", "x-demo-echo-x-auth-tenant": "tenant-1", "x-demo-echo-x-auth-scopes": "inventory:read inventory:write orders:read"}
	for k, v := range want {
		if got := header.Get(k); len(got) != 1 || got[0] != v {
			t.Errorf("backend metadata %s = %v, want [%s]", k, got, v)
		}
	}
	for _, k := range []string{"x-demo-echo-x-api-key", "x-demo-echo-authorization"} {
		if got := header.Get(k); len(got) != 0 {
			t.Errorf("backend received the credential as %s", k)
		}
	}

	// A token without orders:read: PermissionDenied.
	tok := f.issuer.Mint(t, map[string]any{"scope": "inventory:read", "plan": "pro"})
	_, err = client.GetOrder(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok), &demov1.GetOrderRequest{OrderId: "o-1001"})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "insufficient_scope") {
		t.Errorf("token without the scope: %v, want PermissionDenied insufficient_scope", err)
	}
}
