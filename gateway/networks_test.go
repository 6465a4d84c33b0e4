package gateway_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/portico-gw/portico/gateway"
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
