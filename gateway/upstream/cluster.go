package upstream

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Cluster is a group of interchangeable endpoints behind one connection pool.
// It is safe for concurrent use; [Cluster.Pick] and [Endpoint.Done] are the
// request path and never block.
//
// Lifecycle:
//
//  1. [Registry.Build] creates it: the transport is built, TLS files are read,
//     and the health-check goroutine (if any) starts. Every endpoint starts
//     healthy and not ejected.
//  2. Requests Pick an endpoint, send over [Cluster.Transport] and call Done.
//  3. Further Builds with the same config hand out the same *Cluster.
//  4. When no live [Set] holds it, it is closed: the health checks stop and
//     idle connections are closed. A request still running on an old
//     snapshot may keep using it (Pick and the transport still work); the
//     connections it returns are closed as they come back.
type Cluster struct {
	// Read-only after newCluster.
	name      string
	cfg       *configv1.Cluster
	scheme    string
	transport *http.Transport
	endpoints []*Endpoint
	maxInFly  int64 // 0 = no limit
	outlier   outlierPolicy
	now       func() time.Time
	log       *slog.Logger

	// Read by every Pick, written only when availability changes.
	avail   atomic.Pointer[[]*Endpoint] // healthy and not ejected; replaced under mu
	ejected atomic.Int32                // endpoints with ejectedUntil != 0; written under mu
	revive  atomic.Int64                // unix nanos of the earliest ejection expiry; written under mu
	closed  atomic.Bool

	// inFlight counts the cluster's requests when max_in_flight is set, and
	// is written by every Pick and Done then: it has a cache line of its
	// own. It is one counter, not sharded per core, because an exact limit
	// needs one; clusters without a limit never touch it.
	_        [64]byte
	inFlight atomic.Int64
	_        [64]byte

	mu       sync.Mutex // serialises ejections, revivals and rebuilds of avail
	health   *healthChecker
	stopOnce sync.Once
	stop     context.CancelFunc
	stopped  chan struct{} // closed when the health goroutine has returned
}

// Endpoint is one address of a cluster, shared by every request that picks
// it. Its methods are safe for concurrent use.
type Endpoint struct {
	cluster *Cluster
	addr    string

	// inFlight and consecFails are touched by every request: they get cache
	// lines of their own, so that endpoints allocated next to each other
	// do not contend.
	_            [64]byte
	inFlight     atomic.Int64
	consecFails  atomic.Uint32
	ejectedUntil atomic.Int64 // unix nanos; 0 = not ejected
	healthy      atomic.Bool
	_            [64]byte

	// Guarded by cluster.mu.
	ejections      int   // multiplier of the next ejection, before decay
	lastEjectedEnd int64 // unix nanos when the previous ejection ended

	// Owned by the health-check goroutine.
	hcFails, hcOKs uint32

	// guard, if set, refuses connections to addresses outside the
	// endpoint's networks.
	guard *dialGuard
}

// EndpointStatus is a point-in-time view of an endpoint for admin pages,
// metrics and tests.
type EndpointStatus struct {
	Address string
	// Healthy is the verdict of active health checks; true when the
	// cluster has none.
	Healthy bool
	// EjectedUntil is when the current outlier ejection ends; zero when the
	// endpoint is not ejected.
	EjectedUntil time.Time
	// Ejections is the multiplier of the ejection time the endpoint has
	// accumulated (it decays while the endpoint behaves).
	Ejections int
	// InFlight is the number of requests picked and not yet done.
	InFlight int64
	// RefusedDials counts the connections refused because the address
	// the endpoint's name resolved to lay outside its networks.
	RefusedDials uint64
}

func newCluster(cfg *configv1.Cluster, opts Options) (*Cluster, error) {
	if cfg.GetHealthCheck().GetGrpc() != nil && cfg.GetProtocol() == configv1.Protocol_PROTOCOL_HTTP1 {
		// The probe could never succeed: every endpoint would go down.
		return nil, &ClusterError{Cluster: cfg.GetName(), Err: fmt.Errorf("health_check.grpc needs an HTTP/2 protocol (GRPC, H2 or H2C), not %v",
			cfg.GetProtocol())}
	}
	log := opts.Logger.With("cluster", cfg.GetName())
	c := &Cluster{
		name:     cfg.GetName(),
		cfg:      cfg,
		scheme:   "http",
		maxInFly: int64(cfg.GetPool().GetMaxInFlight()),
		outlier:  newOutlierPolicy(cfg.GetOutlierDetection(), len(cfg.GetEndpoints())),
		now:      opts.Now,
		log:      log,
		stopped:  make(chan struct{}),
	}
	var tlsConf *tls.Config
	if cfg.GetTls() != nil {
		c.scheme = "https"
		requireH2 := cfg.GetProtocol() == configv1.Protocol_PROTOCOL_H2 || cfg.GetProtocol() == configv1.Protocol_PROTOCOL_GRPC
		var err error
		tlsConf, err = newTLSConfig(cfg.GetTls(), requireH2, opts.Identities)
		if err != nil {
			return nil, &ClusterError{Cluster: c.name, Err: err}
		}
	}
	c.endpoints = make([]*Endpoint, len(cfg.GetEndpoints()))
	for i, ec := range cfg.GetEndpoints() {
		e := &Endpoint{cluster: c, addr: ec.GetAddress()}
		if len(ec.GetNetworks()) > 0 {
			nets, err := parseNetworks(ec.GetNetworks())
			if err != nil {
				return nil, &ClusterError{Cluster: c.name, Err: fmt.Errorf("endpoints[%d].networks: %w", i, err)}
			}
			e.guard = &dialGuard{endpoint: e, networks: nets}
		}
		e.healthy.Store(true)
		c.endpoints[i] = e
	}
	c.transport = newTransport(cfg, tlsConf, newDialer(opts.Dialer, durationOr(cfg.GetConnectTimeout(), defaultConnectTimeout), c.endpoints))
	c.revive.Store(math.MaxInt64)
	c.mu.Lock()
	c.rebuildLocked()
	c.mu.Unlock()

	if hc := cfg.GetHealthCheck(); hc != nil {
		c.health = newHealthChecker(c, hc)
	}
	return c, nil
}

// start starts the health checks, if the cluster has any. A cluster that
// is never started (a probe's) needs no stopping beyond close.
func (c *Cluster) start() {
	if c.health == nil {
		close(c.stopped)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	go c.health.run(ctx, c.stopped)
}

// Name returns the cluster's name from its config.
func (c *Cluster) Name() string { return c.name }

// Config returns the config the cluster was built from. It is shared: the
// caller must not modify it.
func (c *Cluster) Config() *configv1.Cluster { return c.cfg }

// Transport returns the cluster's connection pool, configured for its
// protocol and TLS. Requests must carry URL.Scheme [Cluster.Scheme] and
// URL.Host [Endpoint.Address]. It stays usable after the cluster is closed.
func (c *Cluster) Transport() http.RoundTripper { return c.transport }

// Scheme returns "https" for a cluster with tls and "http" otherwise
// (including h2c and cleartext gRPC).
func (c *Cluster) Scheme() string { return c.scheme }

// Address returns the endpoint's "host:port", for the outgoing URL.
func (e *Endpoint) Address() string { return e.addr }

// Endpoints returns a snapshot of every endpoint's state, in config order.
// It allocates and takes the cluster's lock: not for the request path.
func (c *Cluster) Endpoints() []EndpointStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reviveLocked(c.now().UnixNano())
	out := make([]EndpointStatus, len(c.endpoints))
	for i, e := range c.endpoints {
		s := EndpointStatus{
			Address:   e.addr,
			Healthy:   e.healthy.Load(),
			Ejections: e.ejections,
			InFlight:  e.inFlight.Load(),
		}
		if e.guard != nil {
			s.RefusedDials = e.guard.refused.Load()
		}
		if u := e.ejectedUntil.Load(); u != 0 {
			s.EjectedUntil = time.Unix(0, u)
		}
		out[i] = s
	}
	return out
}

// rebuildLocked publishes the endpoints Pick may choose: healthy by active
// checks and not ejected.
func (c *Cluster) rebuildLocked() {
	avail := make([]*Endpoint, 0, len(c.endpoints))
	for _, e := range c.endpoints {
		if e.healthy.Load() && e.ejectedUntil.Load() == 0 {
			avail = append(avail, e)
		}
	}
	c.avail.Store(&avail)
}

// setHealthy records a verdict of the active health checks.
func (c *Cluster) setHealthy(e *Endpoint, healthy bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.healthy.Store(healthy)
	c.rebuildLocked()
}

// close stops the health checks and closes idle connections. Idempotent.
func (c *Cluster) close() {
	c.stopOnce.Do(func() {
		c.closed.Store(true)
		if c.stop != nil {
			c.stop()
			<-c.stopped
		}
		if c.health != nil && c.health.ownRT {
			c.health.rt.CloseIdleConnections() // a probe's: run never did
		}
		c.transport.CloseIdleConnections()
	})
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.AsDuration()
}
