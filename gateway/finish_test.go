package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/routestats"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/gen/portico/demo/v1/demov1connect"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// finishFixture is a node with a route for every way a request can end:
// passed to a backend, refused by the gateway before it (path, route,
// method, size, credential, limit, validation), refused by the proxy (no
// backend), answered by an RPC backend in every protocol. Every record
// finish hands over is kept, by request id.
type finishFixture struct {
	g   *gatewaytest.Gateway
	key string

	mu      sync.Mutex
	records map[string][]exchange.Record
}

func newFinishFixture(t *testing.T) *finishFixture {
	t.Helper()
	cfg := rpcSnapshot(t, connectBackend(t, connectOrders{}))
	key, rec := gatewaytest.NewKey(t, "key-finish", "app-finish", "tenant-1", "tight")
	cfg.Keys = append(cfg.Keys, rec)
	cfg.Plans = append(cfg.Plans, &configv1.Plan{Name: "tight", RateLimits: []*configv1.RateLimit{{
		Name: "one", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_CALLER, Rate: 0.001, Burst: 1,
	}}})
	cfg.Clusters = append(cfg.Clusters, cluster("web", namedBackend(t, "web")), cluster("dead", deadAddr(t)), cluster("cut", cutBackend(t)))
	small := route("small", "/small/{rest=**}", "web")
	small.MaxRequestBytes = 10
	cfg.Routes = append(cfg.Routes,
		route("open", "/open/{rest=**}", "web", "GET"),
		small,
		&configv1.Route{Id: "keyed", Team: "t", Path: "/keyed/{rest=**}", Cluster: "web"},
		route("dead", "/dead/{rest=**}", "dead"),
		route("cut", "/cut/{rest=**}", "cut"),
	)
	f := &finishFixture{g: gatewaytest.Start(t, cfg, nil), key: key, records: map[string][]exchange.Record{}}
	gateway.OnFinish(f.g.Node, func(x exchange.Record) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.records[x.RequestID] = append(f.records[x.RequestID], x)
	})
	return f
}

// record waits for the records of request id and returns them: finish runs
// as the handler returns, which may be after the caller has the answer.
func (f *finishFixture) record(t *testing.T, id string) []exchange.Record {
	t.Helper()
	var got []exchange.Record
	gatewaytest.WaitFor(t, 5*time.Second, "the record of "+id, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		got = f.records[id]
		return len(got) > 0
	})
	// One more moment for a second finish of the same request, which
	// must never come.
	time.Sleep(10 * time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.records[id]
}

// TestEveryRequestFinishesOnce: whatever its exit, a request passes
// through finish exactly once, and its record says who answered and how.
func TestEveryRequestFinishesOnce(t *testing.T) {
	t.Parallel()
	f := newFinishFixture(t)
	hc := gatewaytest.H2CClient(t)
	rpc := func(id string, opts ...connect.ClientOption) demov1connect.OrdersServiceClient {
		return demov1connect.NewOrdersServiceClient(hc, f.g.URL(), append(opts, connect.WithInterceptors(requestID(id)))...)
	}
	type want struct {
		status    int // the HTTP status the caller got; 0: do not check
		by        exchange.Writer
		code      problem.Code
		route     string // "" for none
		forwarded bool
		failed    bool
		proto     problem.Protocol
	}
	for _, tc := range []struct {
		id   string
		do   func(id string)
		want want
	}{
		{"bad-path", func(id string) { f.do(t, hc, id, "GET", "/open/a%2fb", "", nil) },
			want{400, exchange.Gateway, problem.BadRequest, "", false, false, problem.HTTP}},
		{"no-route", func(id string) { f.do(t, hc, id, "GET", "/nowhere", "", nil) },
			want{404, exchange.Gateway, problem.NoRoute, "", false, false, problem.HTTP}},
		{"wrong-method", func(id string) { f.do(t, hc, id, "POST", "/open/x", "", nil) },
			want{405, exchange.Gateway, problem.MethodNotAllowed, "", false, false, problem.HTTP}},
		{"too-large", func(id string) { f.do(t, hc, id, "POST", "/small/x", strings.Repeat("x", 100), nil) },
			want{413, exchange.Gateway, problem.PayloadTooLarge, "small", false, false, problem.HTTP}},
		{"small-body", func(id string) { f.do(t, hc, id, "POST", "/small/x", "12345", nil) },
			want{200, exchange.Upstream, "", "small", true, false, problem.HTTP}},
		{"no-key", func(id string) { f.do(t, hc, id, "GET", "/keyed/x", "", nil) },
			want{401, exchange.Gateway, problem.Unauthenticated, "keyed", false, false, problem.HTTP}},
		{"keyed", func(id string) { f.do(t, hc, id, "GET", "/keyed/x", "", map[string]string{"X-Api-Key": f.key}) },
			want{200, exchange.Upstream, "", "keyed", true, false, problem.HTTP}},
		{"limited", func(id string) { f.do(t, hc, id, "GET", "/keyed/x", "", map[string]string{"X-Api-Key": f.key}) },
			want{429, exchange.Gateway, problem.RateLimited, "keyed", false, false, problem.HTTP}},
		{"open", func(id string) { f.do(t, hc, id, "GET", "/open/x", "", nil) },
			want{200, exchange.Upstream, "", "open", true, false, problem.HTTP}},
		{"dead", func(id string) { f.do(t, hc, id, "GET", "/dead/x", "", nil) },
			want{0, exchange.Gateway, "", "dead", true, true, problem.HTTP}},
		// The proxy aborts the handler (http.ErrAbortHandler) when the
		// upstream breaks off its answer: finish still runs, once.
		{"cut", func(id string) { f.do(t, hc, id, "GET", "/cut/x", "", nil) },
			want{200, exchange.Upstream, "", "cut", true, true, problem.HTTP}},
		{"connect", func(id string) {
			_, _ = rpc(id).GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-1001"}))
		},
			want{200, exchange.Upstream, "", "", true, false, problem.ConnectUnary}},
		{"connect-invalid", func(id string) {
			_, _ = rpc(id).GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "bad id"}))
		},
			want{400, exchange.Gateway, problem.InvalidArgument, "", false, false, problem.ConnectUnary}},
		{"grpc-not-found", func(id string) {
			_, _ = rpc(id, connect.WithGRPC()).GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-9999"}))
		},
			want{200, exchange.Upstream, "", "", true, false, problem.GRPC}},
		{"grpc-invalid", func(id string) {
			_, _ = rpc(id, connect.WithGRPC()).GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "bad id"}))
		},
			want{200, exchange.Gateway, problem.InvalidArgument, "", false, false, problem.GRPC}},
		{"rest", func(id string) { f.do(t, hc, id, "GET", "/v1/orders/o-1001", "", nil) },
			want{200, exchange.Upstream, "", "", true, false, problem.HTTP}},
		{"rest-undecodable", func(id string) { f.do(t, hc, id, "POST", "/v1/orders", `{"nope":1}`, nil) },
			want{400, exchange.Gateway, "", "", false, false, problem.HTTP}},
	} {
		tc.do(tc.id)
		recs := f.record(t, tc.id)
		if len(recs) != 1 {
			t.Errorf("%s: finish ran %d times, want once", tc.id, len(recs))
			continue
		}
		x, w := recs[0], tc.want
		if w.status != 0 && x.Status != w.status {
			t.Errorf("%s: status %d, want %d", tc.id, x.Status, w.status)
		}
		if x.By != w.by || (w.code != "" && x.Code != w.code) {
			t.Errorf("%s: answered by %v (%q), want %v (%q)", tc.id, x.By, x.Code, w.by, w.code)
		}
		if w.route != "" && (x.Route == nil || x.Route.ID != w.route) {
			t.Errorf("%s: route %v, want %s", tc.id, x.Route, w.route)
		}
		if w.code == problem.NoRoute || w.code == problem.MethodNotAllowed || w.code == problem.BadRequest && w.route == "" {
			if x.Route != nil {
				t.Errorf("%s: route %s, want none", tc.id, x.Route.ID)
			}
		}
		if x.Forwarded != w.forwarded || x.UpstreamFailed != w.failed {
			t.Errorf("%s: forwarded %v, failed %v; want %v, %v", tc.id, x.Forwarded, x.UpstreamFailed, w.forwarded, w.failed)
		}
		if x.Forwarded && (x.UpstreamTime() <= 0 || x.UpstreamStart.Before(x.Start)) {
			t.Errorf("%s: upstream attempt from %v to %v, the request from %v", tc.id, x.UpstreamStart, x.UpstreamEnd, x.Start)
		}
		if x.Forwarded && !w.failed && x.Endpoint == "" {
			t.Errorf("%s: no endpoint recorded", tc.id)
		}
		if x.Protocol != w.proto {
			t.Errorf("%s: protocol %v, want %v", tc.id, x.Protocol, w.proto)
		}
		// (A gRPC refusal is trailers-only: no body at all.)
		if x.Status != 0 && x.BytesOut == 0 && !(x.Protocol == problem.GRPC && x.By == exchange.Gateway) {
			t.Errorf("%s: %d with no bytes out", tc.id, x.Status)
		}
		// The body as the caller sent it: read by the proxy, or for a
		// transcoded call by the transcoder.
		if want := map[string]int64{"small-body": 5, "keyed": 0, "connect": int64(proto.Size(&demov1.GetOrderRequest{OrderId: "o-1001"}))}; want[tc.id] != x.BytesIn && (tc.id == "small-body" || tc.id == "keyed" || tc.id == "connect") {
			t.Errorf("%s: %d bytes in, want %d", tc.id, x.BytesIn, want[tc.id])
		}
		if tc.id == "keyed" && (x.Identity.KeyID != "key-finish" || x.Identity.Plan != "tight") {
			t.Errorf("%s: identity %+v, want key-finish of plan tight", tc.id, x.Identity)
		}
	}
}

// TestRolloutCountsOnlyWhatReachedTheProxy pins what the rollout judge
// reads (routestats Requests, Errors, latencies): the calls that reached
// the proxy, as before finish existed. The gateway's own refusals before
// it (credentials, limits, sizes, validation) are counted apart, as
// Refused, and never skew a stage.
func TestRolloutCountsOnlyWhatReachedTheProxy(t *testing.T) {
	t.Parallel()
	f := newFinishFixture(t)
	hc := gatewaytest.H2CClient(t)
	last := ""
	send := func(id, method, path, body string, h map[string]string) {
		f.do(t, hc, id, method, path, body, h)
		last = id
	}
	keyed := map[string]string{"X-Api-Key": f.key}
	send("k1", "GET", "/keyed/x", "", nil)                        // 401
	send("k2", "GET", "/keyed/x", "", keyed)                      // 200
	send("k3", "GET", "/keyed/x", "", keyed)                      // 429
	send("k4", "GET", "/keyed/x", "", nil)                        // 401
	send("s1", "POST", "/small/x", strings.Repeat("x", 100), nil) // 413
	send("d1", "GET", "/dead/x", "", nil)                         // 503: reached the proxy, failed
	send("d2", "GET", "/dead/x", "", nil)                         // the same
	send("o1", "GET", "/open/x", "", nil)                         // 200
	send("n1", "GET", "/nowhere", "", nil)                        // 404: no route, counted nowhere
	f.record(t, last)

	counts := map[string]routestats.Counts{}
	f.g.Node.RouteStats(func(id string, c routestats.Counts) { counts[id] = c })
	for route, want := range map[string][3]uint64{ // requests, errors, refused
		"keyed": {1, 0, 3},
		"small": {0, 0, 1},
		"dead":  {2, 2, 0},
		"open":  {1, 0, 0},
	} {
		c := counts[route]
		if c.Requests != want[0] || c.Errors != want[1] || c.Refused != want[2] {
			t.Errorf("route %s: %d requests, %d errors, %d refused; want %d, %d, %d", route, c.Requests, c.Errors, c.Refused, want[0], want[1], want[2])
		}
		var sum uint64
		for _, b := range c.Buckets {
			sum += b
		}
		if sum != c.Requests {
			t.Errorf("route %s: %d latencies for %d requests", route, sum, c.Requests)
		}
	}
}

// cutBackend answers with a Content-Length it does not keep: ten bytes of
// a hundred, then it closes the connection.
func cutBackend(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(200)
		_, _ = w.Write([]byte("0123456789"))
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// do sends one request with X-Request-Id id and drains the answer; an
// answer cut off midway (or its reset stream) is no failure of the
// test's.
func (f *finishFixture) do(t *testing.T, c *http.Client, id, method, path, body string, header map[string]string) {
	t.Helper()
	req, err := http.NewRequest(method, f.g.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Request-Id", id)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		// The cut-off answer's stream is reset; what matters is the
		// record.
		t.Logf("%s %s: %v", method, path, err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// requestID is a Connect client interceptor that sends X-Request-Id.
func requestID(id string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("X-Request-Id", id)
			return next(ctx, req)
		}
	}
}
