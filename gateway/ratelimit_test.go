package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	"github.com/portico-gw/portico/gateway"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/gen/portico/demo/v1/demov1connect"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/redistest"
	"github.com/portico-gw/portico/testing/testclock"
)

func newClock() *testclock.Clock { return testclock.New(time.Now()) }

func limit(name string, scope configv1.RateLimitScope, rate float64, burst uint32) *configv1.RateLimit {
	return &configv1.RateLimit{Name: name, Scope: scope, Rate: rate, Burst: burst}
}

const (
	perCaller = configv1.RateLimitScope_RATE_LIMIT_SCOPE_CALLER
	perApp    = configv1.RateLimitScope_RATE_LIMIT_SCOPE_APP
	perClass  = configv1.RateLimitScope_RATE_LIMIT_SCOPE_CLASS
)

// rlGet sends GET url with header kv pairs and returns the response, its
// body drained.
func rlGet(t *testing.T, client *http.Client, url string, kv ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	gatewaytest.Drain(resp)
	return resp
}

func wantLimit(t *testing.T, resp *http.Response, status int, rateLimit, policy string) {
	t.Helper()
	if resp.StatusCode != status || resp.Header.Get("RateLimit") != rateLimit || resp.Header.Get("RateLimit-Policy") != policy {
		t.Errorf("got %d, RateLimit %q, RateLimit-Policy %q; want %d, %q, %q", resp.StatusCode,
			resp.Header.Get("RateLimit"), resp.Header.Get("RateLimit-Policy"), status, rateLimit, policy)
	}
}

func TestRateLimitPerCaller(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	f.cfg.Plans[0].RateLimits = []*configv1.RateLimit{limit("default", perCaller, 1, 3)}
	clk := newClock()
	g := gatewaytest.Start(t, f.cfg, func(o *gateway.Options) { o.Now = clk.Now })
	client := gatewaytest.HTTP1Client(t)
	url := g.URL() + "/inventory/v1/items"
	const policy = `"default";q=3;w=3`

	wantLimit(t, rlGet(t, client, url, "X-Api-Key", f.keys["good"]), 200, `"default";r=2;t=1`, policy)
	wantLimit(t, rlGet(t, client, url, "X-Api-Key", f.keys["good"]), 200, `"default";r=1;t=2`, policy)
	wantLimit(t, rlGet(t, client, url, "X-Api-Key", f.keys["good"]), 200, `"default";r=0;t=3`, policy)

	// The fourth call in the same instant is refused, with a problem body,
	// Retry-After, and the headers of the bucket that refused.
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Api-Key", f.keys["good"])
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("fourth call: %d, Retry-After %q; want 429, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	wantLimit(t, resp, 429, `"default";r=0;t=3`, policy)
	if p := readProblem(t, resp); p.Error != "rate_limited" {
		t.Errorf("problem error = %q, want rate_limited", p.Error)
	}

	// Another caller on the same plan has a bucket of its own.
	wantLimit(t, rlGet(t, client, url, "X-Api-Key", f.keys["reader"]), 200, `"default";r=2;t=1`, policy)
	// A route without limits (public, the anonymous limit off) sends no
	// RateLimit fields.
	if resp := rlGet(t, client, g.URL()+"/public/x"); resp.Header.Get("RateLimit") != "" || resp.StatusCode == 429 {
		t.Errorf("a call without limits: %d, RateLimit %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}

	// One second later the bucket holds one token again.
	clk.Add(time.Second)
	wantLimit(t, rlGet(t, client, url, "X-Api-Key", f.keys["good"]), 200, `"default";r=0;t=3`, policy)
	wantLimit(t, rlGet(t, client, url, "X-Api-Key", f.keys["good"]), 429, `"default";r=0;t=3`, policy)
}

func TestRateLimitScopes(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	// Two keys of one app share the app bucket; writes have a class bucket
	// of their own; the inventory route tightens further per caller.
	k2, rec2 := gatewaytest.NewKey(t, "key-good-2", "app-good", "tenant-1", "pro", "inventory:read", "inventory:write", "orders:read")
	k3, rec3 := gatewaytest.NewKey(t, "key-3", "app-3", "tenant-1", "pro", "inventory:read", "inventory:write")
	f.cfg.Keys = append(f.cfg.Keys, rec2, rec3)
	f.cfg.Plans[0].RateLimits = []*configv1.RateLimit{
		limit("app", perApp, 1, 4),
		{Name: "writes", Scope: perClass, Class: "write", Rate: 1, Burst: 1},
	}
	f.cfg.Routes = append(f.cfg.Routes, &configv1.Route{
		Id: "inventory-writes", Team: "demo", Methods: []string{"DELETE"}, Path: "/inventory/v1/{rest=**}", Cluster: "inventory",
		RateLimitClass: "write",
		Auth:           &configv1.RouteAuth{Scopes: []string{"inventory:write"}, Product: "inventory-api"},
	})
	f.cfg.Routes[1].Methods = []string{"GET", "POST"}
	f.cfg.Routes[1].RateLimits = []*configv1.RateLimit{limit("route", perCaller, 1, 3)}
	g := gatewaytest.Start(t, f.cfg, func(o *gateway.Options) { o.Now = newClock().Now })
	client := gatewaytest.HTTP1Client(t)
	items := g.URL() + "/inventory/v1/items"

	// good: app 3 left, route 2 left: the route bucket is the tighter.
	wantLimit(t, rlGet(t, client, items, "X-Api-Key", f.keys["good"]), 200, `"route";r=2;t=1`, `"route";q=3;w=3`)
	// good-2, same app: app 2 left, its own route bucket 2 left (a tie:
	// the first limit found is reported).
	wantLimit(t, rlGet(t, client, items, "X-Api-Key", k2), 200, `"app";r=2;t=2`, `"app";q=4;w=4`)
	wantLimit(t, rlGet(t, client, items, "X-Api-Key", k2), 200, `"app";r=1;t=3`, `"app";q=4;w=4`)
	wantLimit(t, rlGet(t, client, items, "X-Api-Key", f.keys["good"]), 200, `"app";r=0;t=4`, `"app";q=4;w=4`)
	// The app is spent, for both of its keys.
	wantLimit(t, rlGet(t, client, items, "X-Api-Key", k2), 429, `"app";r=0;t=4`, `"app";q=4;w=4`)
	wantLimit(t, rlGet(t, client, items, "X-Api-Key", f.keys["good"]), 429, `"app";r=0;t=4`, `"app";q=4;w=4`)

	// The class bucket counts only the write route: a third caller's first
	// delete passes, its second is refused by "writes", and its reads go on.
	del := func() *http.Response {
		req, _ := http.NewRequest("DELETE", items+"/none", nil)
		req.Header.Set("X-Api-Key", k3)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		gatewaytest.Drain(resp)
		return resp
	}
	if resp := del(); resp.StatusCode == 429 || resp.Header.Get("RateLimit") != `"writes";r=0;t=1` {
		t.Errorf("first delete: %d, RateLimit %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	if resp := del(); resp.StatusCode != 429 || resp.Header.Get("RateLimit") != `"writes";r=0;t=1` {
		t.Errorf("second delete: %d, RateLimit %q; want 429 by writes", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	// (Refused calls still spent the app's tokens: 1 left.)
	wantLimit(t, rlGet(t, client, items, "X-Api-Key", k3), 200, `"app";r=1;t=3`, `"app";q=4;w=4`)
}

func TestRateLimitAnonymousPerIP(t *testing.T) {
	t.Parallel()
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("b", namedBackend(t, "b"))},
		Routes:   []*configv1.Route{route("open", "/open", "b")},
	}
	cfg.RateLimiting = &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Rate: 1, Burst: 2}}
	g := gatewaytest.Start(t, cfg, func(o *gateway.Options) {
		o.Now = newClock().Now
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	client := gatewaytest.HTTP1Client(t)
	url := g.URL() + "/open"
	const policy = `"anonymous";q=2;w=2`

	// Behind a trusted proxy (the test client is 127.0.0.1), the client is
	// the nearest untrusted X-Forwarded-For address.
	wantLimit(t, rlGet(t, client, url, "X-Forwarded-For", "203.0.113.7"), 200, `"anonymous";r=1;t=1`, policy)
	wantLimit(t, rlGet(t, client, url, "X-Forwarded-For", "198.51.100.1, 203.0.113.7"), 200, `"anonymous";r=0;t=2`, policy)
	wantLimit(t, rlGet(t, client, url, "X-Forwarded-For", "203.0.113.7"), 429, `"anonymous";r=0;t=2`, policy)
	// Another client address has its own bucket.
	wantLimit(t, rlGet(t, client, url, "X-Forwarded-For", "203.0.113.8"), 200, `"anonymous";r=1;t=1`, policy)
	// Without X-Forwarded-For, the peer itself.
	wantLimit(t, rlGet(t, client, url), 200, `"anonymous";r=1;t=1`, policy)
}

func TestRateLimitGRPC(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	f.cfg.Plans[0].RateLimits = []*configv1.RateLimit{limit("default", perCaller, 1, 1)}
	g := gatewaytest.Start(t, f.cfg, func(o *gateway.Options) { o.Now = newClock().Now })
	c := demov1.NewOrdersServiceClient(g.GRPCConn(t))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", f.keys["good"])
	if _, err := c.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1001"}); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, err := c.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1001"})
	s := status.Convert(err)
	if s.Code() != codes.ResourceExhausted {
		t.Fatalf("second call: %v, want ResourceExhausted", err)
	}
	var ri *errdetails.RetryInfo
	for _, d := range s.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			ri = r
		}
	}
	if ri == nil || ri.GetRetryDelay().AsDuration() <= 0 || ri.GetRetryDelay().AsDuration() > time.Second {
		t.Errorf("RetryInfo = %v, want a delay in (0, 1s]", ri)
	}
}

// TestRateLimitSharedThroughRedis runs two nodes against one real Redis (a
// single server, and a Redis Cluster of three masters): a limit of 100/s
// per app, node A asked 200/s and node B 10/s. Each node alone would hold
// half the limit (A 50/s, B 10/s: 60/s); synced, A takes the share B does
// not use and the pair admits about the limit.
func TestRateLimitSharedThroughRedis(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t, 3).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testSharedLimit(t, tc.client(t))
		})
	}
}

func testSharedLimit(t *testing.T, rc redis.UniversalClient) {
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	f.cfg.Plans[0].RateLimits = []*configv1.RateLimit{limit("default", perApp, 100, 10)}
	f.cfg.RateLimiting = &configv1.RateLimiting{ExpectedNodes: 2, SyncInterval: durationpb.New(100 * time.Millisecond)}
	// Both nodes run on one test clock, buckets and Redis sync alike, and
	// the test moves it a millisecond at a time, sending each call when
	// it is due. A ticker per node with one call in flight offered less
	// than 200/s once a call took longer than 5 ms, as it does on a
	// loaded machine, and the calls reached the buckets in lumps; on this
	// clock every bucket sees exactly its demand, however slowly the
	// machine runs the loop. Redis keeps real time: it refills the shared
	// bucket by its own clock. So the test clock never runs ahead of real
	// time, and after a delay it catches up by at most the 100 ms in which
	// Redis refills a burst (catching up spends at 100/s what Redis
	// refilled while the loop was held up, at most a burst); beyond that
	// it goes on from where it is.
	clk := newClock()
	nodes := make([]*gatewaytest.Gateway, 2)
	for i := range nodes {
		nodes[i] = gatewaytest.Start(t, f.cfg, func(o *gateway.Options) {
			o.Now = clk.Now
			o.RateLimit = gateway.RateLimitOptions{Redis: rc, NodeID: fmt.Sprint("node-", i)}
		})
	}
	client := gatewaytest.HTTP1Client(t)
	const secs = 4
	every := []time.Duration{5 * time.Millisecond, 100 * time.Millisecond} // 200/s and 10/s
	var admitted [secs]int
	start, wall := clk.Now(), time.Now()
	for el := time.Duration(0); el < secs*time.Second; el += time.Millisecond {
		if late := time.Since(wall) - el; late > 100*time.Millisecond {
			wall = wall.Add(late - 100*time.Millisecond)
		} else if late < 0 {
			time.Sleep(-late)
		}
		clk.Set(start.Add(el))
		for i, e := range every {
			if el%e == 0 && rlGet(t, client, nodes[i].URL()+"/inventory/v1/items", "X-Api-Key", f.keys["good"]).StatusCode == 200 {
				admitted[el/time.Second]++
			}
		}
	}
	total := 0
	for s := 1; s < secs; s++ {
		total += admitted[s]
	}
	t.Logf("admitted per second: %d %d %d %d", admitted[0], admitted[1], admitted[2], admitted[3])
	// Seconds 1–3: about 300 synced, 180 unsynced.
	if total < 250 || total > 345 {
		t.Errorf("seconds 1-3 admitted %d, want about 300 (the limit, shared through Redis)", total)
	}
}

// connectOrders is a Connect backend for the Connect rate limit test.
type connectOrders struct {
	demov1connect.UnimplementedOrdersServiceHandler
}

func (connectOrders) GetOrder(_ context.Context, r *connect.Request[demov1.GetOrderRequest]) (*connect.Response[demov1.GetOrderResponse], error) {
	return connect.NewResponse(&demov1.GetOrderResponse{Order: &demov1.Order{OrderId: r.Msg.GetOrderId()}}), nil
}

func (connectOrders) WatchOrders(_ context.Context, _ *connect.Request[demov1.WatchOrdersRequest], s *connect.ServerStream[demov1.WatchOrdersResponse]) error {
	return s.Send(&demov1.WatchOrdersResponse{})
}

// TestRateLimitConnect calls a rate limited route in front of a Connect
// backend with connect-go's client: unary over JSON and proto, and a
// server stream, each refused with ResourceExhausted and a RetryInfo
// detail; and a gRPC-Web caller, refused in a trailers-only response.
func TestRateLimitConnect(t *testing.T) {
	t.Parallel()
	path, h := demov1connect.NewOrdersServiceHandler(connectOrders{})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	backend := httptest.NewServer(mux)
	t.Cleanup(backend.Close)

	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	f.cfg.Clusters[0] = &configv1.Cluster{Name: "orders", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
		Endpoints: []*configv1.Endpoint{{Address: backend.Listener.Addr().String()}}}
	f.cfg.Plans[0].RateLimits = []*configv1.RateLimit{limit("default", perCaller, 1, 1)}
	g := gatewaytest.Start(t, f.cfg, func(o *gateway.Options) { o.Now = newClock().Now })
	hc := gatewaytest.HTTP1Client(t)

	wantExhausted := func(t *testing.T, err error) {
		t.Helper()
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
			t.Fatalf("err = %v, want resource_exhausted", err)
		}
		var ri *errdetails.RetryInfo
		for _, d := range ce.Details() {
			if v, err := d.Value(); err == nil {
				if r, ok := v.(*errdetails.RetryInfo); ok {
					ri = r
				}
			}
		}
		if ri == nil || ri.GetRetryDelay().AsDuration() <= 0 || ri.GetRetryDelay().AsDuration() > time.Second {
			t.Errorf("RetryInfo = %v, want a delay in (0, 1s]", ri)
		}
	}
	// Each caller key has its own bucket of one: the first call passes,
	// the next is refused.
	for i, opts := range [][]connect.ClientOption{{connect.WithProtoJSON()}, nil} {
		key := f.keys["good"]
		if i == 1 {
			key = f.keys["reader"]
		}
		c := demov1connect.NewOrdersServiceClient(hc, g.URL(), opts...)
		call := func() (*connect.Response[demov1.GetOrderResponse], error) {
			req := connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-1"})
			req.Header().Set("X-Api-Key", key)
			return c.GetOrder(context.Background(), req)
		}
		resp, err := call()
		if err != nil || resp.Msg.GetOrder().GetOrderId() != "o-1" {
			t.Fatalf("codec %d: first call: %v, %v", i, resp, err)
		}
		_, err = call()
		wantExhausted(t, err)
	}

	c := demov1connect.NewOrdersServiceClient(hc, g.URL())
	req := connect.NewRequest(&demov1.WatchOrdersRequest{})
	req.Header().Set("X-Api-Key", f.keys["good"]) // its bucket is empty
	stream, err := c.WatchOrders(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if stream.Receive() {
		t.Fatalf("stream got a message past the limit: %v", stream.Msg())
	}
	wantExhausted(t, stream.Err())
	_ = stream.Close()

	web, err := http.NewRequest("POST", g.URL()+"/portico.demo.v1.OrdersService/GetOrder", strings.NewReader("\x00\x00\x00\x00\x00"))
	if err != nil {
		t.Fatal(err)
	}
	web.Header.Set("Content-Type", "application/grpc-web+proto")
	web.Header.Set("X-Api-Key", f.keys["good"])
	resp, err := hc.Do(web)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "8" || resp.Header.Get("Grpc-Status-Details-Bin") == "" || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("gRPC-Web: %d %v, want a trailers-only ResourceExhausted with details", resp.StatusCode, resp.Header)
	}
}
