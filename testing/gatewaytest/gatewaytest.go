// Package gatewaytest starts real gateway nodes and demo backends on
// loopback for tests and benchmarks, and stops them with t.Cleanup.
package gatewaytest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/cmd/portico/demo"
	"github.com/portico-gw/portico/gateway"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Gateway is a running node with a cleartext and a TLS listener on the
// "public" pool.
type Gateway struct {
	Node *gateway.Node
	// Addr is the cleartext listener (HTTP/1.1 and h2c); TLSAddr the TLS one.
	Addr    string
	TLSAddr string
	// CA verifies the TLS listener's certificate (issued for 127.0.0.1).
	CA *x509.CertPool

	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
	stopErr  error
}

// URL is the base URL of the cleartext listener.
func (g *Gateway) URL() string { return "http://" + g.Addr }

// TLSURL is the base URL of the TLS listener.
func (g *Gateway) TLSURL() string { return "https://" + g.TLSAddr }

// Stop drains the node (as on SIGTERM) and waits up to 30 s for Run to
// return. Later calls return the first result.
func (g *Gateway) Stop() error {
	g.stopOnce.Do(func() {
		g.cancel()
		select {
		case g.stopErr = <-g.done:
		case <-time.After(30 * time.Second):
			g.stopErr = errors.New("gateway did not stop within 30s")
		}
	})
	return g.stopErr
}

// Logger returns a logger for tests: silent unless PORTICO_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("PORTICO_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Start runs a node serving cfg (nil for an empty snapshot). edit, if not
// nil, may adjust the options before the node is built.
//
// A cfg without rate_limiting settings is served with the anonymous
// per-IP limit off (cfg itself is not changed): tests send public routes
// more than its default allows, and are not about it. Tests of rate limits
// set rate_limiting.
func Start(t testing.TB, cfg *configv1.Snapshot, edit func(*gateway.Options)) *Gateway {
	t.Helper()
	cert, pool := Certificate(t, "127.0.0.1")
	opts := gateway.Options{
		Logger: Logger(),
		Listeners: []gateway.Listener{
			{Pool: "public", Listener: Listen(t)},
			{Pool: "public", Listener: Listen(t), TLS: &tls.Config{Certificates: []tls.Certificate{cert}}},
		},
		DrainTimeout: 5 * time.Second,
	}
	if edit != nil {
		edit(&opts)
	}
	node, err := gateway.New(opts)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	if cfg != nil {
		cfg = WithoutAnonymousLimit(cfg)
		if err := node.Apply(cfg); err != nil {
			node.Close()
			t.Fatalf("Apply: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gateway{Node: node, CA: pool, cancel: cancel, done: make(chan error, 1)}
	addrs := node.Addrs()
	g.Addr = addrs[0].String()
	if len(addrs) > 1 {
		g.TLSAddr = addrs[1].String()
	}
	go func() { g.done <- node.Run(ctx) }()
	t.Cleanup(func() {
		if err := g.Stop(); err != nil {
			t.Errorf("gateway Run: %v", err)
		}
	})
	return g
}

// WithoutAnonymousLimit returns cfg, or a copy with the anonymous per-IP
// limit turned off when cfg has no rate_limiting settings.
func WithoutAnonymousLimit(cfg *configv1.Snapshot) *configv1.Snapshot {
	if cfg.RateLimiting != nil {
		return cfg
	}
	cfg = proto.Clone(cfg).(*configv1.Snapshot)
	cfg.RateLimiting = &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Disabled: true}}
	return cfg
}

// Listen binds 127.0.0.1:0.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// Demo starts the demo backends for the test.
func Demo(t testing.TB) *demo.Servers {
	t.Helper()
	s, err := demo.Start(context.Background(), demo.Options{WatchInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("demo.Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Public is the auth of test routes that are not about authentication.
var Public = &configv1.RouteAuth{Public: true, Reviewer: "tests"}

// DemoSnapshot routes the demo backends: every gRPC method of the orders
// service (plus health) to the "orders" cluster, /inventory/** to the
// "inventory" cluster, all public (auth tests add their own routes).
func DemoSnapshot(d *demo.Servers) *configv1.Snapshot {
	return &configv1.Snapshot{
		Version: "demo",
		Clusters: []*configv1.Cluster{
			{Name: "orders", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: d.OrdersAddr()}}},
			{Name: "inventory", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: d.InventoryAddr()}}},
		},
		Routes: []*configv1.Route{
			{Id: "orders", Team: "demo", Methods: []string{"POST"}, Path: "/portico.demo.v1.OrdersService/*", Cluster: "orders", Timeout: durationpb.New(30 * time.Second), Auth: Public},
			{Id: "health", Team: "demo", Methods: []string{"POST"}, Path: "/grpc.health.v1.Health/*", Cluster: "orders", Auth: Public},
			{Id: "inventory", Team: "demo", Path: "/inventory/v1/{rest=**}", Cluster: "inventory", Auth: Public},
		},
	}
}

// HTTP1Client speaks HTTP/1.1 with keep-alive.
func HTTP1Client(t testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// StartH2C starts srv (unstarted, as httptest.NewUnstartedServer makes it)
// serving HTTP/1.1 and h2c, as the control plane and the key service do,
// and closes it when the test ends.
func StartH2C(t testing.TB, srv *httptest.Server) {
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
}

// H2CClient speaks cleartext HTTP/2 with prior knowledge.
func H2CClient(t testing.TB) *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// TLSClient speaks HTTP/2 (or HTTP/1.1 when h1 is set) over TLS to g.
func (g *Gateway) TLSClient(t testing.TB, h1 bool) *http.Client {
	p := new(http.Protocols)
	if h1 {
		p.SetHTTP1(true)
	} else {
		p.SetHTTP2(true)
	}
	tr := &http.Transport{Protocols: p, DisableCompression: true, TLSClientConfig: &tls.Config{RootCAs: g.CA}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// GRPCConn dials the gateway's cleartext listener with grpc-go.
func (g *Gateway) GRPCConn(t testing.TB) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(g.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Do sends one request (a JSON body when body is not empty, and header)
// and returns the response with its whole body read and closed.
func Do(t testing.TB, c *http.Client, method, url, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp, b
}

// Drain reads and discards r's body, then closes it.
func Drain(r *http.Response) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
}

// WaitFor polls cond every few milliseconds until it holds or d passes.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
