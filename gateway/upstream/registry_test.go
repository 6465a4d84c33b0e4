package upstream_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// connCountingBackend counts the TCP connections it accepts and closes, and
// the health probes (GET /healthz) it answers.
type connCountingBackend struct {
	*httptest.Server
	opened, closed, probes atomic.Int64
}

// A nil handler answers "hello". It speaks HTTP/1.1 and h2c.
func newConnCountingBackend(t *testing.T, handler http.HandlerFunc) *connCountingBackend {
	t.Helper()
	b := &connCountingBackend{}
	if handler == nil {
		handler = func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("hello")) }
	}
	b.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			b.probes.Add(1)
		}
		handler(w, r)
	}))
	b.Config.Protocols = new(http.Protocols)
	b.Config.Protocols.SetHTTP1(true)
	b.Config.Protocols.SetUnencryptedHTTP2(true)
	b.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			b.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			b.closed.Add(1)
		}
	}
	b.Start()
	t.Cleanup(b.Close)
	return b
}

func (b *connCountingBackend) addr() string { return b.Listener.Addr().String() }

func TestRegistryReusesUnchangedCluster(t *testing.T) {
	t.Parallel()
	backend := newConnCountingBackend(t, nil)
	cfg := cluster("web", configv1.Protocol_PROTOCOL_HTTP1, backend.addr())
	r, s1 := build(t, testOptions(t, nil), cfg)
	c1 := s1.Cluster("web")
	if c1 == nil || c1.Name() != "web" || !proto.Equal(c1.Config(), cfg) {
		t.Fatalf("Cluster(web) = %v, want the built cluster", c1)
	}
	if got := s1.Cluster("nope"); got != nil {
		t.Errorf("Cluster(nope) = %v, want nil", got)
	}
	if _, err := get(t, c1, backend.addr()); err != nil {
		t.Fatal(err)
	}

	// Same config, different message: the same cluster and connection.
	s2, err := r.Build([]*configv1.Cluster{proto.CloneOf(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	if c2 := s2.Cluster("web"); c2 != c1 {
		t.Fatalf("Build with an unchanged config gave a new *Cluster")
	}
	if _, err := get(t, s2.Cluster("web"), backend.addr()); err != nil {
		t.Fatal(err)
	}
	if n := backend.opened.Load(); n != 1 {
		t.Errorf("backend accepted %d connections, want 1 reused", n)
	}

	// Changed config: a new cluster; the old one lives while a Set holds it.
	changed := proto.CloneOf(cfg)
	changed.Pool = &configv1.ConnectionPool{IdleTimeout: dur(time.Minute)}
	s3, err := r.Build([]*configv1.Cluster{changed})
	if err != nil {
		t.Fatal(err)
	}
	if s3.Cluster("web") == c1 {
		t.Fatalf("Build with a changed config reused the old *Cluster")
	}
	s1.Release()
	s1.Release() // idempotent: must not drop s2's reference
	if n := backend.closed.Load(); n != 0 {
		t.Fatalf("%d connections closed while s2 still holds the cluster", n)
	}
	if _, err := get(t, s2.Cluster("web"), backend.addr()); err != nil {
		t.Fatal(err)
	}
	if n := backend.opened.Load(); n != 1 {
		t.Errorf("backend accepted %d connections after releasing s1, want still 1", n)
	}
	s2.Release()
	waitFor(t, 5*time.Second, "the old cluster's idle connection closed", func() bool { return backend.closed.Load() == 1 })
	s3.Release()
}

// TestRegistryClosesDroppedCluster is not parallel: it counts goroutines.
func TestRegistryClosesDroppedCluster(t *testing.T) {
	keepBackend, dropBackend := newConnCountingBackend(t, nil), newConnCountingBackend(t, nil)
	keep := cluster("keep", configv1.Protocol_PROTOCOL_HTTP1, keepBackend.addr())
	drop := cluster("drop", configv1.Protocol_PROTOCOL_HTTP1, dropBackend.addr())
	drop.HealthCheck = httpHealthCheck("")
	before := healthGoroutines()

	r, s1 := build(t, testOptions(t, nil), keep, drop)
	if n := healthGoroutines() - before; n != 1 {
		t.Fatalf("%d health-check goroutines for one checked cluster, want 1", n)
	}
	waitFor(t, 5*time.Second, "a probe", func() bool { return dropBackend.probes.Load() > 0 })

	s2, err := r.Build([]*configv1.Cluster{keep})
	if err != nil {
		t.Fatal(err)
	}
	if n := healthGoroutines() - before; n != 1 {
		t.Fatalf("health checks of the dropped cluster stopped while s1 is live (%d running)", n)
	}
	s1.Release()
	// Release waits for the loop to return; the goroutine may take a moment
	// more to disappear from the stacks.
	waitFor(t, 2*time.Second, "the dropped cluster's health checks to stop", func() bool { return healthGoroutines() == before })
	waitFor(t, 5*time.Second, "the dropped cluster's connections closed", func() bool {
		return dropBackend.closed.Load() == dropBackend.opened.Load()
	})
	if _, err := get(t, s2.Cluster("keep"), keepBackend.addr()); err != nil {
		t.Fatalf("kept cluster broken after releasing s1: %v", err)
	}
}

// TestRegistryCloseLeaksNothing is not parallel: it counts goroutines.
func TestRegistryCloseLeaksNothing(t *testing.T) {
	hc, other := newHealthBackend(t), newHealthBackend(t)
	baseline := runtime.NumGoroutine()

	r := upstream.NewRegistry(testOptions(t, nil))
	var cfgs []*configv1.Cluster
	for i, p := range []configv1.Protocol{configv1.Protocol_PROTOCOL_HTTP1, configv1.Protocol_PROTOCOL_H2C} {
		addr := hc.addr()
		if i == 1 {
			addr = other.addr()
		}
		cfg := cluster(strings.ToLower(p.String()), p, addr, "127.0.0.1:1") // the second endpoint refuses
		cfg.HealthCheck = httpHealthCheck("")
		cfgs = append(cfgs, cfg)
	}
	s, err := r.Build(cfgs)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "probes", func() bool { return hc.probes.Load() >= 2 })
	if runtime.NumGoroutine() <= baseline {
		t.Fatalf("no goroutines started (%d, baseline %d): the check below proves nothing", runtime.NumGoroutine(), baseline)
	}
	r.Close()
	s.Release() // after Close: a no-op
	if _, err := r.Build(cfgs); err == nil {
		t.Error("Build after Close succeeded, want an error")
	}
	waitFor(t, 5*time.Second, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= baseline })
	if n := healthGoroutines(); n != 0 {
		t.Errorf("%d health-check goroutines after Close, want 0", n)
	}
}

func TestRegistryBuildErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tlsCluster := func(tc *configv1.UpstreamTLS) *configv1.Cluster {
		c := cluster("secure", configv1.Protocol_PROTOCOL_HTTP1, "127.0.0.1:443")
		c.Tls = tc
		return c
	}
	tests := []struct {
		name string
		cfgs []*configv1.Cluster
		want []string // substrings of the error
	}{
		{"missing ca_file", []*configv1.Cluster{tlsCluster(&configv1.UpstreamTLS{CaFile: dir + "/nope.pem"})},
			[]string{`cluster "secure"`, "tls.ca_file", "nope.pem"}},
		{"ca_pem without a certificate", []*configv1.Cluster{tlsCluster(&configv1.UpstreamTLS{CaPem: "not a pem"})},
			[]string{`cluster "secure"`, "tls.ca_pem"}},
		{"identity the node lacks", []*configv1.Cluster{tlsCluster(&configv1.UpstreamTLS{Identity: "orders-mtls"})},
			[]string{`cluster "secure"`, "tls.identity", `no upstream identity "orders-mtls"`}},
		{"bad endpoint network", []*configv1.Cluster{func() *configv1.Cluster {
			c := cluster("nets", configv1.Protocol_PROTOCOL_HTTP1, "backend.internal:80")
			c.Endpoints[0].Networks = []string{"10.0.0.0/33"}
			return c
		}()}, []string{`cluster "nets"`, "endpoints[0].networks"}},
		{"grpc probe over HTTP/1", []*configv1.Cluster{func() *configv1.Cluster {
			c := cluster("h1", configv1.Protocol_PROTOCOL_HTTP1, "127.0.0.1:1")
			c.HealthCheck = &configv1.HealthCheck{Probe: &configv1.HealthCheck_Grpc{Grpc: &configv1.GRPCProbe{}}}
			return c
		}()}, []string{`cluster "h1"`, "health_check.grpc"}},
		{"duplicate name", []*configv1.Cluster{
			cluster("twice", configv1.Protocol_PROTOCOL_HTTP1, "127.0.0.1:1"),
			cluster("twice", configv1.Protocol_PROTOCOL_HTTP1, "127.0.0.1:2"),
		}, []string{`cluster "twice"`, "twice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := upstream.NewRegistry(testOptions(t, nil))
			defer r.Close()
			s, err := r.Build(tt.cfgs)
			if err == nil {
				t.Fatalf("Build() = %v, nil, want an error", s)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Build() error %q, want it to mention %q", err, w)
				}
			}
			var cerr *upstream.ClusterError
			if !errors.As(err, &cerr) || cerr.Cluster != tt.cfgs[len(tt.cfgs)-1].GetName() {
				t.Errorf("Build() error %#v, want a *upstream.ClusterError naming %q", err, tt.cfgs[len(tt.cfgs)-1].GetName())
			}
		})
	}
}

// TestRegistryFailedBuildHoldsNothing: a Build that fails part-way releases
// what it had taken, so the clusters of a later good Build are fresh only
// where they must be.
func TestRegistryFailedBuildHoldsNothing(t *testing.T) {
	t.Parallel()
	good := cluster("good", configv1.Protocol_PROTOCOL_HTTP1, "127.0.0.1:1")
	bad := cluster("bad", configv1.Protocol_PROTOCOL_HTTP1, "127.0.0.1:2")
	bad.Tls = &configv1.UpstreamTLS{CaPem: "garbage"}
	r, s1 := build(t, testOptions(t, nil), good)
	c := s1.Cluster("good")
	if _, err := r.Build([]*configv1.Cluster{good, bad}); err == nil {
		t.Fatal("Build with a bad cluster succeeded")
	}
	s2, err := r.Build([]*configv1.Cluster{good})
	if err != nil {
		t.Fatal(err)
	}
	if s2.Cluster("good") != c {
		t.Fatal("cluster not reused after a failed Build")
	}
	s1.Release()
	s2.Release()
	// Nothing holds it now: a new Build makes a new one. Had the failed
	// Build leaked a reference, the old one would come back.
	s3, err := r.Build([]*configv1.Cluster{good})
	if err != nil {
		t.Fatal(err)
	}
	if s3.Cluster("good") == c {
		t.Fatal("released cluster came back: the failed Build leaked a reference")
	}
}

// TestReleasedClusterClosesConnectionsOfDrainingRequests: a request still
// running when its cluster is released returns its HTTP/2 connection to the
// pool afterwards; the connection must be closed then, not after the idle
// timeout.
func TestReleasedClusterClosesConnectionsOfDrainingRequests(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	backend := newConnCountingBackend(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		_, _ = w.Write([]byte("late"))
	})
	_, s := build(t, testOptions(t, nil), cluster("h2c", configv1.Protocol_PROTOCOL_H2C, backend.addr()))
	c := s.Cluster("h2c")

	e, err := c.Pick()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := get(t, c, e.Address())
		done <- err
	}()
	<-arrived
	s.Release()
	if n := backend.closed.Load(); n != 0 {
		t.Fatalf("%d connections closed under a running request", n)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("request on a released cluster failed: %v", err)
	}
	e.Done(upstream.Success)
	waitFor(t, 5*time.Second, "the drained connection closed", func() bool { return backend.closed.Load() == 1 })
}
