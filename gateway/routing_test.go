package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// namedBackend answers every request with its name and the path it got.
func namedBackend(t *testing.T, name string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", name, r.URL.RequestURI())
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func cluster(name, addr string) *configv1.Cluster {
	return &configv1.Cluster{Name: name, Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: addr}}}
}

// public marks a test route that is not about authentication.
var public = &configv1.RouteAuth{Public: true, Reviewer: "tests"}

func route(id, path, cluster string, methods ...string) *configv1.Route {
	return &configv1.Route{Id: id, Team: "t", Path: path, Cluster: cluster, Methods: methods, Auth: public}
}

// TestRoutingPrecedence drives the precedence rules end to end: each route
// has its own backend, so the answer says which route won.
func TestRoutingPrecedence(t *testing.T) {
	t.Parallel()
	names := []string{"literal", "param", "wild", "v2", "verb", "grpc", "host", "wildhost", "versioned", "anymethod", "post"}
	cfg := &configv1.Snapshot{}
	for _, n := range names {
		cfg.Clusters = append(cfg.Clusters, cluster(n, namedBackend(t, n)))
	}
	versioned := route("versioned", "/v1/orders/{id}", "versioned", "GET")
	versioned.Headers = []*configv1.HeaderMatch{{Name: "x-api-version", Match: &configv1.HeaderMatch_Exact{Exact: "2026-01"}}}
	hostRoute := route("host", "/v1/orders/{id}", "host", "GET")
	hostRoute.Hosts = []string{"partner.example.com"}
	wildHost := route("wildhost", "/v1/orders/{id}", "wildhost", "GET")
	wildHost.Hosts = []string{"*.example.com"}
	cfg.Routes = []*configv1.Route{
		route("literal", "/v1/orders/special", "literal", "GET"),
		route("param", "/v1/orders/{id}", "param", "GET"),
		route("wild", "/v1/{rest=**}", "wild", "GET"),
		route("v2", "/v2/orders/{id}", "v2", "GET"),
		route("verb", "/v1/orders/{id}:cancel", "verb", "POST"),
		route("grpc", "/acme.orders.v1.Orders/GetOrder", "grpc", "POST"),
		hostRoute, wildHost, versioned,
		route("anymethod", "/any/{x}", "anymethod"),
		route("post", "/any/{x}", "post", "POST"),
	}
	g := gatewaytest.Start(t, cfg, nil)
	client := gatewaytest.HTTP1Client(t)

	tests := []struct {
		method, host, path string
		header             [2]string
		want               string
	}{
		{"GET", "", "/v1/orders/special", [2]string{}, "literal /v1/orders/special"},
		{"GET", "", "/v1/orders/o-1", [2]string{}, "param /v1/orders/o-1"},
		{"GET", "", "/v1/orders/o-1/items", [2]string{}, "wild /v1/orders/o-1/items"},
		{"GET", "", "/v1/other", [2]string{}, "wild /v1/other"},
		{"GET", "", "/v2/orders/o-1", [2]string{}, "v2 /v2/orders/o-1"},
		{"POST", "", "/v1/orders/o-1:cancel", [2]string{}, "verb /v1/orders/o-1:cancel"},
		{"POST", "", "/acme.orders.v1.Orders/GetOrder", [2]string{}, "grpc /acme.orders.v1.Orders/GetOrder"},
		{"GET", "partner.example.com", "/v1/orders/o-1", [2]string{}, "host /v1/orders/o-1"},
		{"GET", "PARTNER.example.com:443", "/v1/orders/o-1", [2]string{}, "host /v1/orders/o-1"},
		{"GET", "eu.example.com", "/v1/orders/o-1", [2]string{}, "wildhost /v1/orders/o-1"},
		// A host group without a matching route falls through to the any-host routes.
		{"GET", "partner.example.com", "/v2/orders/o-1", [2]string{}, "v2 /v2/orders/o-1"},
		{"GET", "", "/v1/orders/o-1", [2]string{"X-Api-Version", "2026-01"}, "versioned /v1/orders/o-1"},
		{"GET", "", "/v1/orders/o-1", [2]string{"X-Api-Version", "2025-01"}, "param /v1/orders/o-1"},
		{"HEAD", "", "/v1/orders/o-1", [2]string{}, ""},
		{"DELETE", "", "/any/1", [2]string{}, "anymethod /any/1"},
		{"POST", "", "/any/1", [2]string{}, "post /any/1"},
		{"GET", "", "/v1/orders/o-1?x=1&y=%2F", [2]string{}, "param /v1/orders/o-1?x=1&y=%2F"},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(tt.method, g.URL()+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tt.host != "" {
			req.Host = tt.host
		}
		if tt.header[0] != "" {
			req.Header.Set(tt.header[0], tt.header[1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != tt.want {
			t.Errorf("%s %s (host %q, %v) = %d %q, want 200 %q", tt.method, tt.path, tt.host, tt.header, resp.StatusCode, body, tt.want)
		}
	}
}

type problemBody struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Instance  string `json:"instance"`
	Error     string `json:"error"`
	RequestID string `json:"request_id"`
}

func readProblem(t *testing.T, resp *http.Response) problemBody {
	t.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	var p problemBody
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatalf("decoding problem: %v", err)
	}
	if p.RequestID == "" || p.RequestID != resp.Header.Get("X-Request-Id") {
		t.Errorf("problem request_id %q, X-Request-Id %q: want equal and set", p.RequestID, resp.Header.Get("X-Request-Id"))
	}
	if p.Status != resp.StatusCode {
		t.Errorf("problem status %d, response status %d", p.Status, resp.StatusCode)
	}
	if p.Type != "https://portico-gw.github.io/errors/"+p.Error || p.Title == "" {
		t.Errorf("problem type %q title %q for error %q", p.Type, p.Title, p.Error)
	}
	return p
}

func TestNoRouteAndMethodNotAllowed(t *testing.T) {
	t.Parallel()
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("a", namedBackend(t, "a"))},
		Routes: []*configv1.Route{
			route("get", "/v1/items/{id}", "a", "GET"),
			route("put", "/v1/items/{id}", "a", "PUT"),
		},
	}
	g := gatewaytest.Start(t, cfg, nil)
	client := gatewaytest.HTTP1Client(t)

	resp, err := client.Get(g.URL() + "/v1/nothing")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /v1/nothing = %d, want 404", resp.StatusCode)
	}
	if p := readProblem(t, resp); p.Error != "no_route" || p.Instance != "/v1/nothing" {
		t.Errorf("problem = %+v, want error no_route, instance /v1/nothing", p)
	}

	req, _ := http.NewRequest("DELETE", g.URL()+"/v1/items/1", nil)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE = %d, want 405", resp.StatusCode)
	}
	if got := resp.Header.Get("Allow"); got != "GET, HEAD, PUT" {
		t.Errorf("Allow = %q, want %q", got, "GET, HEAD, PUT")
	}
	if p := readProblem(t, resp); p.Error != "method_not_allowed" {
		t.Errorf("problem error = %q, want method_not_allowed", p.Error)
	}
}

// TestEmptySnapshot: a node that has not received config answers 404.
func TestEmptySnapshot(t *testing.T) {
	t.Parallel()
	g := gatewaytest.Start(t, nil, nil)
	resp, err := gatewaytest.HTTP1Client(t).Get(g.URL() + "/")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET / on an empty node = %d, want 404", resp.StatusCode)
	}
	readProblem(t, resp)
}
