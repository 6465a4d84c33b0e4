package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/snapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// echoBackend answers with the path and headers it received, and a few
// response headers of its own.
func echoBackend(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "backend/1.2.3")
		w.Header().Set("X-Internal-Trace", "abc")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "query": r.URL.RawQuery, "headers": r.Header})
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

func TestRouteTransforms(t *testing.T) {
	t.Parallel()
	addr := echoBackend(t)
	edits := &configv1.HeaderTransform{
		Remove: []string{"X-Debug"},
		Rename: []*configv1.HeaderRename{{From: "X-Client-Version", To: "X-Version"}},
		Set:    []*configv1.HeaderValue{{Name: "X-Team", Value: "orders"}},
		Add:    []*configv1.HeaderValue{{Name: "X-Via", Value: "portico"}},
	}
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("echo", addr)},
		Routes: []*configv1.Route{
			{Id: "prefix", Team: "t", Path: "/v1/inv/{rest=**}", Cluster: "echo", Auth: public,
				Rewrite:        &configv1.PathRewrite{Rewrite: &configv1.PathRewrite_Prefix{Prefix: &configv1.PrefixRewrite{From: "/v1/inv", To: "/inventory/v1"}}},
				RequestHeaders: edits,
				ResponseHeaders: &configv1.HeaderTransform{
					Remove: []string{"Server", "X-Internal-Trace"},
					Set:    []*configv1.HeaderValue{{Name: "Cache-Control", Value: "no-store"}},
				}},
			{Id: "template", Team: "t", Path: "/v2/shops/{shop}/items/{item}", Cluster: "echo", Auth: public,
				Rewrite: &configv1.PathRewrite{Rewrite: &configv1.PathRewrite_Template{Template: "/internal/items/{item}/of/{shop}"}}},
		},
	}
	g := gatewaytest.Start(t, cfg, nil)
	hc := gatewaytest.HTTP1Client(t)
	get := func(path string, h map[string]string) (*http.Response, map[string]any) {
		t.Helper()
		resp, b := gatewaytest.Do(t, hc, "GET", g.URL()+path, "", h)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return resp, m
	}
	resp, m := get("/v1/inv/items/42?x=1", map[string]string{"X-Debug": "1", "X-Client-Version": "7", "X-Team": "spoofed", "X-Via": "client"})
	if m["path"] != "/inventory/v1/items/42" || m["query"] != "x=1" {
		t.Errorf("prefix rewrite: upstream saw %v?%v", m["path"], m["query"])
	}
	h := m["headers"].(map[string]any)
	want := map[string]string{"X-Version": `["7"]`, "X-Team": `["orders"]`, "X-Via": `["client","portico"]`}
	for k, v := range want {
		if got := jsonString(h[k]); got != v {
			t.Errorf("upstream %s = %s, want %s", k, got, v)
		}
	}
	for _, k := range []string{"X-Debug", "X-Client-Version"} {
		if h[k] != nil {
			t.Errorf("upstream got %s: %v", k, h[k])
		}
	}
	if resp.Header.Get("Server") != "" || resp.Header.Get("X-Internal-Trace") != "" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("response headers %v", resp.Header)
	}
	_, m = get("/v2/shops/s-1/items/i-9", nil)
	if m["path"] != "/internal/items/i-9/of/s-1" {
		t.Errorf("template rewrite: upstream saw %v", m["path"])
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestRouteTransformProblems(t *testing.T) {
	t.Parallel()
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("echo", "127.0.0.1:1")},
		Routes: []*configv1.Route{{Id: "r", Team: "t", Path: "/v1/{id}/x", Cluster: "echo", Auth: public,
			RequestHeaders: &configv1.HeaderTransform{
				Set:    []*configv1.HeaderValue{{Name: "x-auth-subject", Value: "admin"}, {Name: "Authorization", Value: "Basic x"}},
				Remove: []string{"X-Forwarded-For"},
			},
			ResponseHeaders: &configv1.HeaderTransform{Set: []*configv1.HeaderValue{{Name: "Grpc-Status", Value: "0"}}},
			Rewrite:         &configv1.PathRewrite{Rewrite: &configv1.PathRewrite_Template{Template: "/y/{nope}"}},
		}, {Id: "r2", Team: "t", Path: "/v1/{id}/y", Cluster: "echo", Auth: public,
			Rewrite: &configv1.PathRewrite{Rewrite: &configv1.PathRewrite_Prefix{Prefix: &configv1.PrefixRewrite{From: "/v1/x", To: "/"}}},
		}},
	}
	_, err := snapshot.Compile(cfg)
	for _, want := range []string{
		"routes[0].request_headers.set[0].name: header X-Auth-Subject is the gateway's own",
		"routes[0].request_headers.set[1].name: header Authorization is the gateway's own",
		"routes[0].request_headers.remove[0]: header X-Forwarded-For is the gateway's own",
		"routes[0].response_headers.set[0].name: header Grpc-Status is the gateway's own",
		`routes[0].rewrite.template: {nope} is not a variable of the route's path "/v1/{id}/x"`,
		`routes[1].rewrite.prefix.from: "/v1/x" is not a literal prefix`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile error lacks %q: %v", want, err)
		}
	}
}

// TestHeaderEditsOnOwnedSpellings: a transform may not edit a name the
// gateway owns spelled with '_' for '-' (backends that fold one into the
// other would read it as the gateway's), in any field, rename's from and
// to included; nor the client address headers the gateway sets or drops.
// Other names with '_' are the team's.
func TestHeaderEditsOnOwnedSpellings(t *testing.T) {
	t.Parallel()
	owned := []string{"x_auth_tenant", "X-Auth_Subject", "X_Api_Key", "x_forwarded_for", "X_Forwarded_Prefix",
		"X_Request_Id", "x-request_id", "X-Real-Ip", "x_real_ip", "True-Client-Ip", "true_client_ip", "Proxy_Authorization"}
	for _, name := range owned {
		edits := func() *configv1.HeaderTransform {
			return &configv1.HeaderTransform{
				Remove: []string{name},
				Rename: []*configv1.HeaderRename{{From: name, To: "X-Mine"}, {From: "X-Mine-Too", To: name}},
				Set:    []*configv1.HeaderValue{{Name: name, Value: "v"}},
				Add:    []*configv1.HeaderValue{{Name: name, Value: "v"}},
			}
		}
		cfg := &configv1.Snapshot{
			Clusters: []*configv1.Cluster{cluster("echo", "127.0.0.1:1")},
			Routes: []*configv1.Route{{Id: "r", Team: "t", Path: "/v1/x", Cluster: "echo", Auth: public,
				RequestHeaders: edits(), ResponseHeaders: edits()}},
		}
		_, err := snapshot.Compile(cfg)
		for _, side := range []string{"request_headers", "response_headers"} {
			for _, field := range []string{"remove[0]", "rename[0].from", "rename[1].to", "set[0].name", "add[0].name"} {
				want := "routes[0]." + side + "." + field + ": header " + textproto.CanonicalMIMEHeaderKey(name) + " is the gateway's own"
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Compile error lacks %q: %v", want, err)
				}
			}
		}
	}

	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("echo", "127.0.0.1:1")},
		Routes: []*configv1.Route{{Id: "r", Team: "t", Path: "/v1/x", Cluster: "echo", Auth: public,
			RequestHeaders: &configv1.HeaderTransform{
				Set:    []*configv1.HeaderValue{{Name: "X_Team_Header", Value: "v"}, {Name: "X_Authx", Value: "v"}},
				Rename: []*configv1.HeaderRename{{From: "X_Old", To: "X_New"}},
			}}},
	}
	if _, err := snapshot.Compile(cfg); err != nil {
		t.Errorf("Compile of edits on the team's own names with '_': %v", err)
	}
}
