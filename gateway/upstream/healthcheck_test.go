package upstream_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// healthBackend answers /healthz with 200 or 503 as told.
type healthBackend struct {
	*httptest.Server
	healthy atomic.Bool
	probes  atomic.Int64
	host    atomic.Value // Host header of the last probe
}

func newHealthBackend(t *testing.T) *healthBackend {
	t.Helper()
	b := &healthBackend{}
	b.healthy.Store(true)
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		b.probes.Add(1)
		b.host.Store(r.Host)
		if !b.healthy.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *healthBackend) addr() string { return b.Listener.Addr().String() }

func httpHealthCheck(host string) *configv1.HealthCheck {
	return &configv1.HealthCheck{
		Interval:           dur(100 * time.Millisecond),
		Timeout:            dur(5 * time.Second), // generous: -race on a loaded machine
		UnhealthyThreshold: 2,
		HealthyThreshold:   2,
		Probe:              &configv1.HealthCheck_Http{Http: &configv1.HTTPProbe{Path: "/healthz", Host: host}},
	}
}

func healthy(c *upstream.Cluster, addr string) bool {
	for _, s := range c.Endpoints() {
		if s.Address == addr {
			return s.Healthy
		}
	}
	return false
}

func TestHTTPHealthCheckTakesOutAndBringsBack(t *testing.T) {
	t.Parallel()
	a, b := newHealthBackend(t), newHealthBackend(t)
	cfg := cluster("hc", configv1.Protocol_PROTOCOL_HTTP1, a.addr(), b.addr())
	cfg.HealthCheck = httpHealthCheck("health.example")
	_, s := build(t, testOptions(t, nil), cfg)
	c := s.Cluster("hc")

	waitFor(t, 5*time.Second, "probes of both backends", func() bool { return a.probes.Load() >= 2 && b.probes.Load() >= 2 })
	if h := a.host.Load(); h != "health.example" {
		t.Errorf("probe Host = %q, want health.example", h)
	}
	if !healthy(c, a.addr()) || !healthy(c, b.addr()) {
		t.Fatalf("endpoints unhealthy while both backends answer 200: %v", c.Endpoints())
	}

	a.healthy.Store(false)
	waitFor(t, 5*time.Second, "a marked unhealthy", func() bool { return !healthy(c, a.addr()) })
	neverPicked(t, c, a.addr())

	b.healthy.Store(false)
	waitFor(t, 5*time.Second, "b marked unhealthy", func() bool { return !healthy(c, b.addr()) })
	if e, err := c.Pick(); err != upstream.ErrNoEndpoint {
		t.Fatalf("Pick() with every endpoint unhealthy = %v, %v, want ErrNoEndpoint", e, err)
	}

	a.healthy.Store(true)
	waitFor(t, 5*time.Second, "a healthy again", func() bool { return healthy(c, a.addr()) })
	pickAddr(t, c, a.addr()).Done(upstream.Success)
}

func TestHealthCheckEndpointsStartHealthy(t *testing.T) {
	t.Parallel()
	// Nothing listens on dead: probes fail at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	cfg := cluster("fresh", configv1.Protocol_PROTOCOL_HTTP1, dead)
	cfg.HealthCheck = httpHealthCheck("")
	cfg.HealthCheck.UnhealthyThreshold = 3
	_, s := build(t, testOptions(t, nil), cfg)
	c := s.Cluster("fresh")

	// Serving before any probe has run: a new node does not answer 503
	// for healthy_threshold intervals. (Three failed probes take ≥ 200 ms.)
	e, err := c.Pick()
	if err != nil {
		t.Fatalf("Pick() right after Build: %v, want the endpoint", err)
	}
	e.Done(upstream.Canceled)
	waitFor(t, 5*time.Second, "refused endpoint marked unhealthy", func() bool { return !healthy(c, dead) })
}

func TestGRPCHealthCheck(t *testing.T) {
	t.Parallel()
	const service = "portico.demo.v1.Orders"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus(service, healthpb.HealthCheckResponse_SERVING)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	addr := l.Addr().String()

	grpcCluster := func(name, svc string) *configv1.Cluster {
		cfg := cluster(name, configv1.Protocol_PROTOCOL_GRPC, addr)
		cfg.HealthCheck = &configv1.HealthCheck{
			Interval:           dur(100 * time.Millisecond),
			Timeout:            dur(5 * time.Second), // generous: -race on a loaded machine
			UnhealthyThreshold: 2,
			HealthyThreshold:   2,
			Probe:              &configv1.HealthCheck_Grpc{Grpc: &configv1.GRPCProbe{Service: svc}},
		}
		return cfg
	}
	_, s := build(t, testOptions(t, nil), grpcCluster("orders", service), grpcCluster("unknown", "no.such.Service"))
	c := s.Cluster("orders")

	// An unknown service is answered NOT_FOUND (a trailers-only response).
	waitFor(t, 5*time.Second, "unknown service unhealthy", func() bool { return !healthy(s.Cluster("unknown"), addr) })

	hs.SetServingStatus(service, healthpb.HealthCheckResponse_NOT_SERVING)
	waitFor(t, 5*time.Second, "NOT_SERVING endpoint unhealthy", func() bool { return !healthy(c, addr) })
	hs.SetServingStatus(service, healthpb.HealthCheckResponse_SERVING)
	waitFor(t, 5*time.Second, "SERVING endpoint healthy again", func() bool { return healthy(c, addr) })
	// A server going down for maintenance.
	hs.Shutdown()
	waitFor(t, 5*time.Second, "shut-down server unhealthy", func() bool { return !healthy(c, addr) })
}

// TestHealthCheckIgnoresPoolCap: an HTTP/1 cluster whose only connection is
// busy must still be probed, or a busy endpoint would be declared dead.
func TestHealthCheckIgnoresPoolCap(t *testing.T) {
	t.Parallel()
	release, busy := make(chan struct{}), make(chan struct{})
	var probes atomic.Int64
	var healthy503 atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			probes.Add(1)
			if healthy503.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		close(busy)
		<-release
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	addr := srv.Listener.Addr().String()
	cfg := cluster("capped", configv1.Protocol_PROTOCOL_HTTP1, addr)
	cfg.Pool = &configv1.ConnectionPool{MaxConnectionsPerEndpoint: 1}
	cfg.HealthCheck = httpHealthCheck("")
	_, s := build(t, testOptions(t, nil), cfg)
	c := s.Cluster("capped")

	go func() { _, _ = get(t, c, addr) }() // holds the pool's only connection
	<-busy
	before := probes.Load()
	waitFor(t, 5*time.Second, "probes while the pool is full", func() bool { return probes.Load() >= before+3 })
	if !healthy(c, addr) {
		t.Fatal("endpoint unhealthy while its pool was full")
	}
	healthy503.Store(true)
	waitFor(t, 5*time.Second, "failing probes noticed", func() bool { return !healthy(c, addr) })
}

func TestHealthCheckUsesClusterProtocol(t *testing.T) {
	t.Parallel()
	var h2 atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.UserAgent(), "portico-health-check") {
			h2.Add(1)
		}
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	cfg := cluster("h2c", configv1.Protocol_PROTOCOL_H2C, srv.Listener.Addr().String())
	cfg.HealthCheck = httpHealthCheck("")
	build(t, testOptions(t, nil), cfg)
	waitFor(t, 5*time.Second, "an h2c probe", func() bool { return h2.Load() > 0 })
}
