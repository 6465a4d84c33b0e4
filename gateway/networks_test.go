package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/logbuf"
)

// TestEndpointNetworksRefuseDial: an endpoint whose name resolves outside
// its networks (as the control plane sets them for a name a team may use
// only by network) is never connected to: the caller gets 503
// upstream_unavailable, the refusal is counted and logged with the team,
// and the backend sees nothing.
func TestEndpointNetworksRefuseDial(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(backend.Close)
	port := strconv.Itoa(backend.Listener.Addr().(*net.TCPAddr).Port)
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{
			{Name: "outside", Team: "search", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
				Endpoints: []*configv1.Endpoint{{Address: "localhost:" + port, Networks: []string{"10.0.0.0/8"}}}},
			{Name: "inside", Team: "search", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
				Endpoints: []*configv1.Endpoint{{Address: "localhost:" + port, Networks: []string{"127.0.0.0/8", "::1/128"}}}},
		},
		Routes: []*configv1.Route{route("out", "/out", "outside"), route("in", "/in", "inside")},
	}
	var logs logbuf.Buffer
	g := gatewaytest.Start(t, cfg, func(o *gateway.Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	h := gatewaytest.HTTP1Client(t)
	get := func(path string) (int, string) {
		resp, err := h.Get(g.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/out"); code != http.StatusServiceUnavailable || !strings.Contains(body, "upstream_unavailable") {
		t.Errorf("GET /out = %d %s, want 503 upstream_unavailable", code, body)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the backend saw %d requests through the refused endpoint", n)
	}
	if code, _ := get("/in"); code != http.StatusOK || hits.Load() != 1 {
		t.Errorf("GET /in = %d (backend hits %d), want 200 through the endpoint inside its networks", code, hits.Load())
	}
	var refused uint64
	for _, c := range g.Node.ClusterStatus() {
		if c.Name == "outside" {
			refused = c.Endpoints[0].RefusedDials
		}
	}
	if refused == 0 {
		t.Error("the refused connection is not counted")
	}
	if l := logs.String(); !strings.Contains(l, "resolved outside its team's networks") || !strings.Contains(l, `"team":"search"`) {
		t.Errorf("the refusal is not logged with its team:\n%s", l)
	}
}

// TestProbeClustersBounded: a probe costs the node a bounded amount, as
// any team may ask for one: at most eight endpoints of a cluster are
// checked, and while one probe runs another gets no answer.
func TestProbeClustersBounded(t *testing.T) {
	t.Parallel()
	g := gatewaytest.Start(t, nil, nil)
	hold := make(chan struct{})
	var held atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held.Add(1)
		<-hold
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(hold) })
	var eps []*configv1.Endpoint
	for range 20 {
		eps = append(eps, &configv1.Endpoint{Address: slow.Listener.Addr().String()})
	}
	wide := &configv1.Cluster{Name: "wide", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: eps,
		HealthCheck: &configv1.HealthCheck{Probe: &configv1.HealthCheck_Http{Http: &configv1.HTTPProbe{Path: "/healthz"}}}}
	done := make(chan []upstream.ProbeResult, 1)
	go func() { done <- g.Node.ProbeClusters(context.Background(), []*configv1.Cluster{wide}, 2*time.Second) }()
	deadline := time.Now().Add(5 * time.Second)
	for held.Load() < 8 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if again := g.Node.ProbeClusters(context.Background(), []*configv1.Cluster{wide}, time.Second); again != nil {
		t.Errorf("a second probe while one runs: %v, want no answer", again)
	}
	hold <- struct{}{} // one health check answers 200
	res := <-done
	if len(res) != 1 || len(res[0].Endpoints) != 8 {
		t.Fatalf("probe of a 20-endpoint cluster: %+v, want 8 endpoints checked", res)
	}
	if n := held.Load(); n != 8 {
		t.Errorf("the backend saw %d health checks, want 8", n)
	}
}
