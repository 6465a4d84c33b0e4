package auth

import (
	"crypto/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/apikey"
	"github.com/portico-gw/portico/gateway/auth/keytable"
	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/snapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestExtract(t *testing.T) {
	t.Parallel()
	const key = "ak_test_0123456789abcdefghijklmnopqrstuvwxyz"
	tests := []struct {
		name     string
		h        http.Header
		queryKey string
		query    string
		kind     Kind
		value    string
		query2   bool
		why      string
	}{
		{"bearer key", header("Authorization", "Bearer "+key), "", "", APIKey, key, false, ""},
		{"bearer lower-case scheme", header("Authorization", "bearer "+key), "", "", APIKey, key, false, ""},
		{"bearer token", header("Authorization", "Bearer eyJ.x.y"), "", "", Token, "eyJ.x.y", false, ""},
		{"x-api-key", header("X-Api-Key", key), "", "", APIKey, key, false, ""},
		{"query key", header(), "api_key", "a=1&api_key=" + key, APIKey, key, true, ""},
		{"escaped query key name", header(), "api_key", "api%5Fkey=" + key, APIKey, key, true, ""},
		{"query key not allowed on the route", header(), "", "api_key=" + key, Anonymous, "", false, reasonMissing},
		{"nothing", header(), "api_key", "a=1", Anonymous, "", false, reasonMissing},
		{"basic scheme", header("Authorization", "Basic dXNlcjpwYXNz"), "", "", Anonymous, "", false, reasonScheme},
		{"no scheme", header("Authorization", key), "", "", Anonymous, "", false, reasonScheme},
		{"empty bearer", header("Authorization", "Bearer "), "", "", Anonymous, "", false, reasonMissing},
		{"empty x-api-key", header("X-Api-Key", ""), "", "", Anonymous, "", false, reasonMissing},
		{"header and x-api-key", header("Authorization", "Bearer eyJ.x.y", "X-Api-Key", key), "", "", Anonymous, "", false, reasonAmbiguous},
		{"two authorization headers", header("Authorization", "Bearer a", "Authorization", "Bearer b"), "", "", Anonymous, "", false, reasonAmbiguous},
		{"two x-api-key headers", header("X-Api-Key", key, "X-Api-Key", key), "", "", Anonymous, "", false, reasonAmbiguous},
		{"header and query key", header("X-Api-Key", key), "api_key", "api_key=" + key, Anonymous, "", false, reasonAmbiguous},
		{"query key twice", header(), "api_key", "api_key=" + key + "&api_key=" + key, Anonymous, "", false, reasonAmbiguous},
		{"query key twice, other values", header(), "api_key", "api_key=A&a=1&api_key=B", Anonymous, "", false, reasonAmbiguous},
		{"query key twice, one escaped", header(), "api_key", "api_key=" + key + "&api%5Fkey=" + key, Anonymous, "", false, reasonAmbiguous},
		{"query key twice, one empty", header(), "api_key", "api_key=" + key + "&api_key=", Anonymous, "", false, reasonAmbiguous},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &http.Request{Header: tt.h}
			c, why := extract(r, tt.queryKey, tt.query)
			if why != tt.why {
				t.Fatalf("why = %q, want %q", why, tt.why)
			}
			if why != "" {
				return
			}
			if c.kind != tt.kind || c.value != tt.value || c.query != tt.query2 {
				t.Errorf("credential = {%v %q %v}, want {%v %q %v}", c.kind, c.value, c.query, tt.kind, tt.value, tt.query2)
			}
		})
	}
}

func TestWithoutQueryKey(t *testing.T) {
	tests := []struct{ in, name, want string }{
		{"api_key=k", "api_key", ""},
		{"a=1&api_key=k&b=2", "api_key", "a=1&b=2"},
		{"api_key=k&api_key=j", "api_key", ""},
		{"api%5Fkey=k&b=2", "api_key", "b=2"},
		{"api_key&b=2", "api_key", "b=2"},
		{"my_api_key=k&b=2", "api_key", "my_api_key=k&b=2"},
		{"a=api_key", "api_key", "a=api_key"},
		{"a=1", "", "a=1"},
		{"", "api_key", ""},
	}
	for _, tt := range tests {
		if got := WithoutQueryKey(tt.in, tt.name); got != tt.want {
			t.Errorf("WithoutQueryKey(%q, %q) = %q, want %q", tt.in, tt.name, got, tt.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = WithoutQueryKey("a=1&b=2", "api_key") }); n != 0 {
		t.Errorf("WithoutQueryKey without the key allocates %v times", n)
	}
}

func TestHasScope(t *testing.T) {
	t.Parallel()
	id := Identity{Scopes: "orders:read orders:write inventory:read"}
	for _, s := range []string{"orders:read", "orders:write", "inventory:read"} {
		if !id.HasScope(s) {
			t.Errorf("HasScope(%q) = false", s)
		}
	}
	for _, s := range []string{"orders", "read", "orders:rea", "inventory:read ", "", "orders:read orders:write"} {
		if id.HasScope(s) {
			t.Errorf("HasScope(%q) = true", s)
		}
	}
	if (&Identity{}).HasScope("") {
		t.Error("an identity without scopes has the empty scope")
	}
}

func TestEachHeader(t *testing.T) {
	t.Parallel()
	id := Identity{Kind: APIKey, ClientID: "app", KeyID: "k1", Plan: "gold", Scopes: "a b"}
	var got []string
	id.EachHeader(func(n, v string) { got = append(got, n+"="+v) })
	want := "X-Auth-Client-Id=app X-Auth-Key-Id=k1 X-Auth-Plan=gold X-Auth-Scopes=a b"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("headers = %q, want %q", s, want)
	}
	got = nil
	synthetic := SyntheticCaller([]string{"a"})
	synthetic.EachHeader(func(n, v string) { got = append(got, n+"="+v) })
	want = "X-Auth-Client-Id=portico-synthetic X-Auth-Tenant=platform X-Auth-Scopes=a X-Auth-Synthetic=true"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("synthetic headers = %q, want %q", s, want)
	}
	(*Identity)(nil).EachHeader(func(n, v string) { t.Errorf("nil identity sets %s", n) })
}

// catalog is a snapshot with plan "basic" including product "orders".
func catalog(t *testing.T) *snapshot.Snapshot {
	t.Helper()
	snap, err := snapshot.Compile(&configv1.Snapshot{
		Products: []*configv1.Product{{Name: "orders"}, {Name: "billing"}},
		Plans:    []*configv1.Plan{{Name: "basic", Products: []string{"orders"}}},
		Scopes:   []*configv1.Scope{{Name: "orders:read"}, {Name: "orders:write"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestCheck(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	gen := func() string {
		k, err := apikey.Generate(apikey.Test, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	good, revoked, expired, unknown := gen(), gen(), gen(), gen()
	rec := func(key, id string, mod func(*configv1.KeyRecord)) *configv1.KeyRecord {
		h := apikey.Hash(key)
		r := &configv1.KeyRecord{
			KeyId: id, AppId: "app-" + id, TenantId: "acme", Plan: "basic",
			Scopes: []string{"orders:read"}, Sha256: h[:], Status: configv1.KeyStatus_KEY_STATUS_ACTIVE,
		}
		if mod != nil {
			mod(r)
		}
		return r
	}
	tbl, err := keytable.Build([]*configv1.KeyRecord{
		rec(good, "k-good", nil),
		rec(revoked, "k-revoked", func(r *configv1.KeyRecord) { r.Status = configv1.KeyStatus_KEY_STATUS_REVOKED }),
		rec(expired, "k-expired", func(r *configv1.KeyRecord) { r.NotAfter = timestampAt(now.Add(-time.Second)) }),
	})
	if err != nil {
		t.Fatal(err)
	}
	a := New(nil, func() time.Time { return now })
	view := &View{keys: tbl}
	snap := catalog(t)

	read := &snapshot.RouteAuth{Scopes: []string{"orders:read"}, Product: "orders"}
	write := &snapshot.RouteAuth{Scopes: []string{"orders:read"}, MethodScopes: map[string][]string{"POST": {"orders:write"}}, Product: "orders"}
	billing := &snapshot.RouteAuth{Product: "billing"}
	tests := []struct {
		name      string
		ra        *snapshot.RouteAuth
		method    string
		h         http.Header
		code      problem.Code // "" for success
		challenge string
	}{
		{"public", &snapshot.RouteAuth{Public: true}, "GET", header(), "", ""},
		{"good key", read, "GET", header("X-Api-Key", good), "", ""},
		{"missing", read, "GET", header(), problem.Unauthenticated, `Bearer realm="portico"`},
		{"revoked", read, "GET", header("X-Api-Key", revoked), problem.Unauthenticated, `Bearer realm="portico", error="invalid_token"`},
		{"expired", read, "GET", header("X-Api-Key", expired), problem.Unauthenticated, `Bearer realm="portico", error="invalid_token"`},
		{"unknown", read, "GET", header("X-Api-Key", unknown), problem.Unauthenticated, `Bearer realm="portico", error="invalid_token"`},
		{"token without a verifier", read, "GET", header("Authorization", "Bearer eyJ.x.y"), problem.Unauthenticated, `Bearer realm="portico", error="invalid_token"`},
		{"method scope missing", write, "POST", header("X-Api-Key", good), problem.InsufficientScope, `Bearer realm="portico", error="insufficient_scope", scope="orders:write"`},
		{"method scope not needed for GET", write, "GET", header("X-Api-Key", good), "", ""},
		{"product not in plan", billing, "GET", header("X-Api-Key", good), problem.ProductNotInPlan, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &http.Request{Method: tt.method, Header: tt.h}
			id, f := a.Check(r, &snapshot.Route{Auth: tt.ra}, view, snap, "/orders", "")
			if tt.code == "" {
				if f != nil {
					t.Fatalf("refused: %+v", f)
				}
				if !tt.ra.Public && (id.KeyID != "k-good" || id.ClientID != "app-k-good" || id.Tenant != "acme" || id.Plan != "basic" || id.Scopes != "orders:read") {
					t.Errorf("identity = %+v", id)
				}
				return
			}
			if f == nil {
				t.Fatalf("passed with identity %+v, want %s", id, tt.code)
			}
			if f.Code != tt.code || f.Challenge != tt.challenge {
				t.Errorf("failure = {%s %q}, want {%s %q}", f.Code, f.Challenge, tt.code, tt.challenge)
			}
			// A good credential refused a route (403) still names its
			// caller, whom usage counts the refusal to; a bad one (401)
			// names no one.
			if authenticated := tt.code != problem.Unauthenticated; authenticated != (id.KeyID == "k-good") || !authenticated && id != (Identity{}) {
				t.Errorf("refused %s with identity %+v", tt.code, id)
			}
			for _, k := range []string{good, revoked, expired, unknown} {
				if strings.Contains(f.Detail, k) || strings.Contains(f.Detail, k[8:20]) {
					t.Errorf("detail %q holds the key", f.Detail)
				}
			}
		})
	}

	// Without a key table every key is refused: auth fails closed.
	empty := New(nil, nil)
	if _, f := empty.Check(&http.Request{Method: "GET", Header: header("X-Api-Key", good)}, &snapshot.Route{Auth: read}, NewSources(nil, nil).View(), snap, "/orders", ""); f == nil || f.Code != problem.Unauthenticated {
		t.Errorf("no key table: failure = %+v, want unauthenticated", f)
	}
}

func timestampAt(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
