package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/gateway"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/gen/portico/demo/v1/demov1connect"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// discardWriter is a minimal ResponseWriter, so the benchmark measures the
// proxy and not a recorder.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkForward compares the gateway's request chain with a bare
// httputil.ReverseProxy (tuned Transport), both forwarding the same request
// to the same loopback backend. The ratio of the two is what matters.
func BenchmarkForward(b *testing.B) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true,"items":[1,2,3],"note":"a small JSON answer of about a hundred bytes"}`)
	}))
	b.Cleanup(backend.Close)
	addr := strings.TrimPrefix(backend.URL, "http://")

	// /bench is public; /keyed takes an API key of plan "open", and /limited
	// too, under a per-caller limit of plan "limited" that never refuses:
	// the differences are the costs of auth and of a rate limit take.
	keyOpen, recOpen := gatewaytest.NewKey(b, "key-open", "app-1", "tenant-1", "open")
	keyLimited, recLimited := gatewaytest.NewKey(b, "key-limited", "app-2", "tenant-1", "limited")
	keyed := func(id, path string) *configv1.Route {
		return &configv1.Route{Id: id, Team: "t", Path: path, Cluster: "backend"}
	}
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("backend", addr)},
		Routes:   []*configv1.Route{route("bench", "/bench/{rest=**}", "backend"), keyed("keyed", "/keyed/{rest=**}"), keyed("limited", "/limited/{rest=**}")},
		Plans: []*configv1.Plan{{Name: "open"}, {Name: "limited", RateLimits: []*configv1.RateLimit{{
			Name: "default", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_CALLER, Rate: 1e7, Burst: 1e8,
		}}}},
		Keys: []*configv1.KeyRecord{recOpen, recLimited},
	}
	node, err := gateway.New(gateway.Options{Logger: gatewaytest.Logger(), Listeners: []gateway.Listener{{Pool: "public", Listener: gatewaytest.Listen(b)}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(node.Close)
	if err := node.Apply(gatewaytest.WithoutAnonymousLimit(cfg)); err != nil {
		b.Fatal(err)
	}

	target, _ := url.Parse(backend.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}

	newRequest := func(path, key string) *http.Request {
		r := httptest.NewRequest("GET", path+"/orders/o-1001?verbose=1", nil)
		if key != "" {
			r.Header.Set("X-Api-Key", key)
		}
		r.RemoteAddr = "192.0.2.10:53422"
		r.Header.Set("User-Agent", "bench/1.0")
		r.Header.Set("Accept", "application/json")
		r.Header.Set("X-Api-Version", "2026-01")
		return r
	}
	for _, tc := range []struct {
		name      string
		h         http.Handler
		path, key string
	}{
		{"reverseproxy", rp, "/bench", ""},
		{"gateway", node.Handler("public"), "/bench", ""},
		{"gateway-auth", node.Handler("public"), "/keyed", keyOpen},
		{"gateway-rl", node.Handler("public"), "/limited", keyLimited},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := newRequest(tc.path, tc.key)
				w := &discardWriter{h: http.Header{}}
				for pb.Next() {
					clear(w.h)
					tc.h.ServeHTTP(w, r)
				}
			})
		})
	}
}

// BenchmarkRPC is one unary call (GetOrder) to a connect-go server that
// speaks Connect and gRPC over h2c, made directly and through the gateway,
// which serves the service from its descriptor: the gateway's cost in the
// same run. Through the gateway, Connect, gRPC-Web and REST are
// transcoded to gRPC (and the request validated); gRPC passes through
// (validated too).
func BenchmarkRPC(b *testing.B) {
	addr := connectBackend(b, connectOrders{})

	g := gatewaytest.Start(b, rpcSnapshot(b, addr), nil)
	hc := gatewaytest.H2CClient(b)
	unary := func(base string, opts ...connect.ClientOption) func(b *testing.B) {
		return func(b *testing.B) {
			c := demov1connect.NewOrdersServiceClient(hc, base, opts...)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-1001"})
					if _, err := c.GetOrder(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
	}
	b.Run("connect/direct", unary("http://"+addr))
	b.Run("connect/gateway", unary(g.URL()))
	b.Run("grpc/direct", unary("http://"+addr, connect.WithGRPC()))
	b.Run("grpc/gateway", unary(g.URL(), connect.WithGRPC()))
	b.Run("grpcweb/gateway", unary(g.URL(), connect.WithGRPCWeb()))
	b.Run("rest/gateway", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := hc.Get(g.URL() + "/v1/orders/o-1001")
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	})
}
