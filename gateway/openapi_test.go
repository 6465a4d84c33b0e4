package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/gateway/snapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

const inventoryOpenAPI = `openapi: 3.0.3
info: {title: Inventory, version: "1"}
servers: [{url: "https://api.example.com/inventory/v1"}]
paths:
  /items:
    get:
      parameters:
        - {name: limit, in: query, schema: {type: integer, minimum: 1, maximum: 100}}
        - {name: X-Tenant, in: header, required: true, schema: {type: string, pattern: "^t-[0-9]+$"}}
      responses: {"200": {description: ok}}
    post:
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              required: [sku, quantity]
              additionalProperties: false
              properties:
                sku: {type: string, pattern: "^[A-Z0-9-]{3,32}$"}
                quantity: {type: integer, minimum: 1}
      responses: {"201": {description: created}}
  /items/{id}:
    get:
      parameters: [{name: id, in: path, required: true, schema: {type: string, minLength: 3}}]
      responses: {"200": {description: ok}}
`

func TestOpenAPIValidation(t *testing.T) {
	t.Parallel()
	addr := echoBackend(t)
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("echo", addr)},
		Routes: []*configv1.Route{
			{Id: "inv", Team: "t", Path: "/inventory/v1/{rest=**}", Cluster: "echo", Auth: public,
				Openapi: &configv1.OpenAPIValidation{Document: inventoryOpenAPI, MaxBodyBytes: 256}},
			{Id: "inv-stream", Team: "t", Path: "/bulk/inventory/v1/{rest=**}", Cluster: "echo", Auth: public,
				Rewrite: &configv1.PathRewrite{Rewrite: &configv1.PathRewrite_Prefix{Prefix: &configv1.PrefixRewrite{From: "/bulk", To: "/"}}}},
		},
	}
	g := gatewaytest.Start(t, cfg, nil)
	hc := gatewaytest.HTTP1Client(t)
	do := func(method, path, body string, h map[string]string) (int, map[string]any) {
		t.Helper()
		resp, b := gatewaytest.Do(t, hc, method, g.URL()+path, body, h)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return resp.StatusCode, m
	}
	tenant := map[string]string{"X-Tenant": "t-1"}
	if st, m := do("GET", "/inventory/v1/items?limit=10", "", tenant); st != 200 || m["path"] != "/inventory/v1/items" {
		t.Errorf("valid GET: %d %v", st, m)
	}
	// The body reaches the upstream whole after being checked.
	if st, m := do("POST", "/inventory/v1/items", `{"sku":"ABC-1","quantity":2}`, nil); st != 200 || m["path"] != "/inventory/v1/items" {
		t.Errorf("valid POST: %d %v", st, m)
	}
	for _, tc := range []struct {
		name, method, path, body string
		h                        map[string]string
		status                   int
		fields                   []string
	}{
		{"query out of range", "GET", "/inventory/v1/items?limit=1000", "", tenant, 400, []string{"query.limit"}},
		{"missing header", "GET", "/inventory/v1/items", "", nil, 400, []string{"header.X-Tenant"}},
		{"both", "GET", "/inventory/v1/items?limit=0", "", nil, 400, []string{"header.X-Tenant", "query.limit"}},
		{"bad body", "POST", "/inventory/v1/items", `{"sku":"a","quantity":0,"x":1}`, nil, 400, []string{"body.sku", "body.quantity"}},
		{"path parameter", "GET", "/inventory/v1/items/ab", "", nil, 400, []string{"path.id"}},
		{"no such operation", "DELETE", "/inventory/v1/items", "", nil, 400, nil},
		{"not in the document", "GET", "/inventory/v1/nope", "", nil, 400, nil},
		{"body over the limit", "POST", "/inventory/v1/items", `{"sku":"` + strings.Repeat("A", 300) + `","quantity":1}`, nil, 413, nil},
	} {
		st, m := do(tc.method, tc.path, tc.body, tc.h)
		if st != tc.status {
			t.Errorf("%s: %d %v, want %d", tc.name, st, m, tc.status)
			continue
		}
		vs, _ := m["violations"].([]any)
		for _, f := range tc.fields {
			found := false
			for _, v := range vs {
				if strings.HasPrefix(v.(map[string]any)["field"].(string), f) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: violations %v lack %s", tc.name, vs, f)
			}
		}
	}
	// A route without a document streams anything.
	if st, _ := do("POST", "/bulk/inventory/v1/items", strings.Repeat("x", 1000), nil); st != 200 {
		t.Errorf("route without a document: %d", st)
	}
}

func TestOpenAPIDocumentProblems(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"not yaml":     "openapi: [",
		"not openapi":  "openapi: 3.0.3\ninfo: {title: x}\n",
		"external ref": "openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths:\n  /a:\n    get:\n      responses: {'200': {$ref: 'https://example.com/r.yaml'}}\n",
	} {
		_, err := snapshot.Compile(&configv1.Snapshot{
			Clusters: []*configv1.Cluster{cluster("echo", "127.0.0.1:1")},
			Routes: []*configv1.Route{{Id: "r", Team: "t", Path: "/a", Cluster: "echo", Auth: public,
				Openapi: &configv1.OpenAPIValidation{Document: doc}}},
		})
		if err == nil || !strings.Contains(err.Error(), "routes[0].openapi.document: ") {
			t.Errorf("%s: %v, want a problem at routes[0].openapi.document", name, err)
		}
	}
}

// TestOpenAPIBodyDeadline: the body of an OpenAPI route is read before the
// upstream is called, within the route's timeout: a caller that sends part
// of it and stops gets 504 deadline_exceeded, not a wait without end.
func TestOpenAPIBodyDeadline(t *testing.T) {
	t.Parallel()
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("echo", echoBackend(t))},
		Routes: []*configv1.Route{{Id: "inv", Team: "t", Path: "/inventory/v1/{rest=**}", Cluster: "echo", Auth: public,
			Timeout: durationpb.New(300 * time.Millisecond),
			Openapi: &configv1.OpenAPIValidation{Document: inventoryOpenAPI, MaxBodyBytes: 256}}},
	}
	g := gatewaytest.Start(t, cfg, nil)
	resp, body, br, _ := rawRequest(t, g.Addr, "POST /inventory/v1/items HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: 40\r\n\r\n{\"sku\":")
	if resp.StatusCode != 504 || !strings.Contains(body, `"deadline_exceeded"`) {
		t.Errorf("partial body: %d %s, want 504 deadline_exceeded", resp.StatusCode, body)
	}
	if !connClosed(br) {
		t.Errorf("connection still open after a body cut short")
	}
}
