// Package gateway is the data plane: a Node accepts client connections on
// one listener per pool, runs every request through the fixed chain of the
// request path (framing checks, request id and trace context, path
// normalisation, route match, size limit, forwarding) against the snapshot
// it currently holds, and swaps snapshots atomically without disturbing
// requests in flight.
//
// Lifecycle:
//
//  1. New(Options) validates the options and binds every listener, so a busy
//     port fails here and Addr reports the bound addresses (port 0 works).
//  2. Apply installs a snapshot; it may be called at any time, from any
//     goroutine, before or during Run. Until the first Apply every request
//     is answered 404 no_route. Options.ConfigFile and Options.Control
//     make Run call it, from a file or a control plane.
//  3. Run runs the node's sources (the config file or the control plane's
//     stream, the signed key snapshot: first what they hold on disk,
//     then their watches and streams), serves until its context is done,
//     then drains: listeners close, busy connections are asked to close
//     after their next answer (HTTP/2: GOAWAY), idle connections close,
//     and in-flight requests get up to Options.DrainTimeout to finish. It
//     returns once every goroutine it started has stopped. Ready is closed
//     once it serves with a snapshot applied.
//  4. Close releases the listeners of a Node that never ran. Run closes
//     everything itself.
//
// Beside the requests it serves, a node probes routes when asked
// (ProbeRoutes, which the control plane's stream calls during a rollout):
// in process, through its own request chain, until the set ends, the next
// replaces it, or the node drains or closes.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-gw/portico/gateway/auth"
	"github.com/portico-gw/portico/gateway/auth/jwt"
	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/fastlane"
	"github.com/portico-gw/portico/gateway/internal/framing"
	"github.com/portico-gw/portico/gateway/proxy"
	"github.com/portico-gw/portico/gateway/ratelimit"
	"github.com/portico-gw/portico/gateway/ratelimit/redissync"
	"github.com/portico-gw/portico/gateway/routestats"
	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Options configure a Node. The zero value serves the "public" pool on
// ":8080" in cleartext (HTTP/1.1 and h2c).
type Options struct {
	// Listeners, one or more per pool. Empty means one public listener on
	// ":8080".
	Listeners []Listener

	// Logger receives the node's logs; nil means slog.Default().
	Logger *slog.Logger

	// MaxHeaderBytes bounds a request's head, exactly: in HTTP/1 the
	// request line, the header lines and the empty line after them; in
	// HTTP/2 the header list as HTTP/2 counts it (each field's name and
	// value plus 32 bytes, pseudo-headers included), which is announced
	// as SETTINGS_MAX_HEADER_LIST_SIZE. A larger head is answered 431.
	// Zero means 64 KiB; at least 1 KiB, at most 1 MiB.
	MaxHeaderBytes int
	// ReadHeaderTimeout is how long a client may take to send its request
	// headers (and TLS handshake); slower clients are cut off so they cannot
	// hold connections open. Zero means 10 s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Zero means
	// 2 minutes.
	IdleTimeout time.Duration
	// DrainTimeout is how long Run waits for in-flight requests when it
	// stops. Zero means 30 s.
	DrainTimeout time.Duration

	// TrustedProxies are peers whose X-Forwarded-For and Forwarded headers
	// are extended rather than replaced. Empty means the gateway is the
	// first hop and trusts no one.
	TrustedProxies []netip.Prefix

	// Upstream configures the upstream connection pools.
	Upstream upstream.Options

	// JWKSClient fetches issuers' jwks_url documents (off the request
	// path); nil means a client with short timeouts.
	JWKSClient *http.Client

	// Now is the node's clock: for credential expiry, rate limits, the
	// usage windows' times and the reports to the control plane whose
	// answers measure its offset; nil means time.Now.
	Now func() time.Time

	// RateLimit configures the rate limit buckets and their Redis sync.
	RateLimit RateLimitOptions

	// ConfigFile, if set, is the node's config: Run applies it before
	// serving (a file that does not load is fatal) and again whenever it
	// changes. Not with Control.
	ConfigFile *ConfigFileOptions
	// Control, if set, makes the node follow a control plane: Run serves
	// the cached snapshot, if any, then holds the stream.
	Control *ControlOptions
	// KeySnapshot, if set, makes Run poll the key service's signed key
	// snapshot into the fast lane.
	KeySnapshot *KeySnapshotOptions
	// Usage, if set, makes the node count its calls for quotas and
	// billing, spool the windows and ship them.
	Usage *UsageOptions
}

// The defaults of Options, which `portico gateway`'s flags show.
const (
	// DefaultListen is the public pool's cleartext listener when Options
	// has none.
	DefaultListen            = ":8080"
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultDrainTimeout      = 30 * time.Second
)

// Listener is one socket of a pool.
type Listener struct {
	// Pool names the listener pool ("public", "partner"); routes may be
	// restricted to pools. Empty means "public".
	Pool string
	// Addr to bind, e.g. ":8080" or "127.0.0.1:0".
	Addr string
	// Listener, if set, is used instead of binding Addr. The Node owns it.
	Listener net.Listener
	// TLS, if set, serves HTTP/2 and HTTP/1.1 over TLS with ALPN; the Node
	// sets NextProtos. Nil serves cleartext HTTP/1.1 and h2c on one port.
	TLS *tls.Config
}

// Node is one gateway node. It is safe for concurrent use.
type Node struct {
	opts      Options
	log       *slog.Logger
	fwd       *proxy.Forwarder
	upstreams *upstream.Registry
	trusted   []netip.Prefix
	tokens    *jwt.Verifier
	auth      *auth.Authenticator
	lane      *fastlane.Lane
	// creds builds each state's credentials from the snapshot's and the
	// fast lane's; applyMu guards it.
	creds  *auth.Sources
	limits *ratelimit.Table
	// stopSync stops the rate limit sync; nil without Redis.
	stopSync context.CancelFunc
	syncDone chan struct{}
	// ownRedis is the Redis client the node made from
	// RateLimitOptions.RedisAddrs, closed with it.
	ownRedis redis.UniversalClient
	// src are the config and credential sources Run runs.
	src *sources
	// usage counts the node's calls; nil without Options.Usage.
	usage *nodeUsage

	state atomic.Pointer[state]
	// applyMu serialises the changes of state: Apply, and the fast lane's
	// changes of the credentials.
	applyMu sync.Mutex
	// stats counts each route's calls, kept across snapshots by route id.
	stats routestats.Registry
	// onFinish, if set, sees every request's record in finish (tests).
	onFinish atomic.Pointer[func(*exchange.Record)]

	pools     []*pool
	servers   []*http.Server
	listeners []net.Listener
	ran       atomic.Bool
	// ready is closed once Run serves with a snapshot applied (see
	// Ready); serving and applied are the two halves of that.
	ready            chan struct{}
	readyOnce        sync.Once
	serving, applied atomic.Bool
	// draining is set when the drain starts: every answer from then on
	// asks the client to close the connection.
	draining  atomic.Bool
	closeOnce sync.Once
	// probing holds one token while ProbeClusters runs.
	probing chan struct{}
	// probes runs the route probes ProbeRoutes asks for and counts them.
	probes prober
}

// RouteStats calls fn with every route's counters (calls, server-side
// failures, latencies) since the node started: what the node reports to
// the control plane for its rollouts.
func (n *Node) RouteStats(fn func(routeID string, c routestats.Counts)) { n.stats.Each(fn) }

// pool is the per-pool part of the request chain.
type pool struct {
	node  *Node
	name  string
	index int
	tls   bool
	// started and finished count the pool's requests, so that a drain
	// can tell how many it waited for and how many it cut: two atomic
	// adds per request, on a cache line of their own (the fields above
	// are read by every request and should not share it).
	_                 [64]byte
	started, finished atomic.Int64
}

// New binds the listeners in opts and returns a Node with an empty
// snapshot. On error nothing stays bound.
func New(opts Options) (*Node, error) {
	opts = withDefaults(opts)
	if opts.MaxHeaderBytes > framing.MaxServerHeaderBytes {
		return nil, fmt.Errorf("gateway: MaxHeaderBytes %d is over the %d the framing guard follows", opts.MaxHeaderBytes, framing.MaxServerHeaderBytes)
	}
	if opts.MaxHeaderBytes < minHeaderBytes {
		return nil, fmt.Errorf("gateway: MaxHeaderBytes %d is under the minimum of %d", opts.MaxHeaderBytes, minHeaderBytes)
	}
	n := &Node{
		opts:      opts,
		log:       opts.Logger,
		fwd:       proxy.New(opts.Logger),
		upstreams: upstream.NewRegistry(withLogger(opts.Upstream, opts.Logger)),
		trusted:   opts.TrustedProxies,
		tokens:    jwt.New(jwt.Options{Now: opts.Now, Logger: opts.Logger, HTTPClient: opts.JWKSClient}),
		probing:   make(chan struct{}, 1),
		ready:     make(chan struct{}),
	}
	n.auth = auth.New(n.tokens, opts.Now)
	n.creds = auth.NewSources(n.tokens, opts.Logger)
	n.lane = fastlane.New(fastlane.Options{SetKeys: n.setLaneKeys, SetTokens: n.setLaneTokens, Now: opts.Now, Logger: opts.Logger})
	poolIndex := map[string]int{}
	for _, l := range opts.Listeners {
		name := l.Pool
		if name == "" {
			name = "public"
		}
		idx, ok := poolIndex[name]
		if !ok {
			idx = len(poolIndex)
			poolIndex[name] = idx
		}
		p := &pool{node: n, name: name, index: idx, tls: l.TLS != nil}
		ln := l.Listener
		if ln == nil {
			var err error
			ln, err = net.Listen("tcp", l.Addr)
			if err != nil {
				n.closeListeners()
				return nil, fmt.Errorf("gateway: pool %q: %w", name, err)
			}
		}
		n.pools = append(n.pools, p)
		n.listeners = append(n.listeners, ln)
		n.servers = append(n.servers, n.newServer(p, l))
	}
	empty, err := n.build(&configv1.Snapshot{Version: "empty"}, poolIndex)
	if err != nil {
		n.Close()
		return nil, err
	}
	empty.creds = n.creds.View()
	n.state.Store(empty)
	if opts.Usage != nil {
		id := opts.Usage.NodeID
		if id == "" {
			if id, err = nodeID(opts); err != nil {
				n.Close()
				return nil, err
			}
		}
		var region string
		if opts.Control != nil {
			region = opts.Control.Region
		}
		if n.usage, err = n.openUsage(opts.Usage, id, region); err != nil {
			n.Close()
			return nil, err
		}
	}
	if n.src, err = n.newSources(opts); err != nil {
		n.Close()
		return nil, err
	}
	n.limits = ratelimit.NewTable(ratelimit.Options{MaxBuckets: opts.RateLimit.MaxBuckets, Now: opts.Now})
	rc := opts.RateLimit.Redis
	if rc == nil && len(opts.RateLimit.RedisAddrs) > 0 {
		rc = redisClient(opts.RateLimit)
		n.ownRedis = rc
	}
	if rc != nil {
		ctx, cancel := context.WithCancel(context.Background())
		n.stopSync, n.syncDone = cancel, make(chan struct{})
		r := &redissync.Runner{
			Table: n.limits, Client: rc, Node: opts.RateLimit.NodeID, Logger: n.log,
			Settings: func() (time.Duration, time.Duration) {
				rl := n.state.Load().snap.RateLimiting
				return rl.SyncInterval, rl.RedisTimeout
			},
		}
		go func() {
			defer close(n.syncDone)
			r.Run(ctx)
		}()
	}
	return n, nil
}

// minHeaderBytes is the smallest MaxHeaderBytes: below it, the HTTP/2
// limit cannot be made exact (see h2HeaderListPadding), and no real client's
// request fits anyway.
const minHeaderBytes = 1 << 10

func withDefaults(o Options) Options {
	if len(o.Listeners) == 0 {
		o.Listeners = []Listener{{Pool: "public", Addr: DefaultListen}}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.RateLimit.NodeID == "" && (o.RateLimit.Redis != nil || len(o.RateLimit.RedisAddrs) > 0) {
		o.RateLimit.NodeID = defaultRateLimitNodeID()
	}
	return o
}

func withLogger(o upstream.Options, log *slog.Logger) upstream.Options {
	if o.Logger == nil {
		o.Logger = log
	}
	return o
}

// Addr returns the bound address of the first listener of pool, or nil.
func (n *Node) Addr(pool string) net.Addr {
	for i, p := range n.pools {
		if p.name == pool {
			return n.listeners[i].Addr()
		}
	}
	return nil
}

// Addrs returns the bound address of every listener, in Options.Listeners
// order.
func (n *Node) Addrs() []net.Addr {
	addrs := make([]net.Addr, len(n.listeners))
	for i, ln := range n.listeners {
		addrs[i] = ln.Addr()
	}
	return addrs
}

// Handler returns the request chain of pool as an http.Handler, for
// embedding the node in another server. Requests through it skip the
// node's own listeners (and their framing checks).
func (n *Node) Handler(name string) http.Handler {
	for _, p := range n.pools {
		if p.name == name {
			return p
		}
	}
	return &pool{node: n, name: name, index: -1}
}

// Run applies what the node's sources hold on disk, serves until ctx is
// done, then stops the sources, shuts down gracefully and returns once
// every goroutine it started has stopped. It returns an error if the
// config file does not load at start, or a listener fails; Run may be
// called once.
func (n *Node) Run(ctx context.Context) error {
	if !n.ran.CompareAndSwap(false, true) {
		return errors.New("gateway: Run called twice")
	}
	if err := n.src.boot(n); err != nil {
		n.Close()
		return err
	}
	if n.usage != nil {
		n.usage.start()
	}
	errc := make(chan error, len(n.servers)+1)
	for i, srv := range n.servers {
		ln := n.listeners[i]
		n.log.Info("listening", "pool", n.pools[i].name, "addr", ln.Addr().String(), "tls", srv.TLSConfig != nil)
		// The guard holds HTTP/1 request heads to the limit exactly.
		fo := framing.Options{MaxHeaderBytes: n.opts.MaxHeaderBytes}
		if srv.TLSConfig != nil {
			ln = newTLSListener(ln, srv.TLSConfig, n.opts.ReadHeaderTimeout, fo, n.log)
		} else {
			fo.H2C = true // cleartext listeners also take h2c
			ln = framing.NewListener(ln, fo)
		}
		go func() {
			// The drain closes the raw listener itself, before Shutdown.
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !n.draining.Load() {
				errc <- err
			}
		}()
	}
	n.serving.Store(true)
	if n.applied.Load() {
		n.readyOnce.Do(func() { close(n.ready) })
	}
	srcCtx, stopSources := context.WithCancel(ctx)
	sourcesDone := n.src.run(srcCtx, errc)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	// The sources stop first: nothing applies a snapshot to a node that
	// is draining.
	stopSources()
	sourcesDone()
	n.shutdown()
	return err
}

// shutdown drains every server and logs when it starts and ends, with the
// requests it waited for and those it cut. In order:
//
//  0. The route probes stop (ProbeRoutes), and no new set starts.
//  1. The listeners close: no connection is accepted any more (after an
//     upgrade, the new process accepts from the same sockets). A TLS
//     handshake in progress still completes and is served.
//  2. Every answer from now on carries Connection: close (HTTP/2: GOAWAY),
//     so a connection a client keeps busy closes after its next answer,
//     cleanly, instead of being closed as idle between two requests, in
//     the instant a client that never retries may be sending the next.
//     This lasts until a tick passes with no new request, at most
//     keepAliveGrace.
//  3. http.Server.Shutdown: GOAWAY, idle connections closed, in-flight
//     requests waited for up to the drain timeout, then force-closed.
func (n *Node) shutdown() {
	// A draining node's probes would judge nothing: they stop first, and
	// the drain's counts are of clients' requests alone.
	n.probes.close()
	start := time.Now()
	started, finished := n.requests()
	n.log.Info("draining", "in_flight", started-finished, "timeout", n.opts.DrainTimeout.String())
	dctx, cancel := context.WithTimeout(context.Background(), n.opts.DrainTimeout)
	defer cancel()
	n.draining.Store(true)
	n.closeListeners()
	n.awaitQuiet(dctx, start)
	var (
		wg  sync.WaitGroup
		cut atomic.Int64
	)
	for i, srv := range n.servers {
		wg.Go(func() {
			_ = srv.Shutdown(dctx)
			if dctx.Err() != nil {
				p := n.pools[i]
				left := p.started.Load() - p.finished.Load()
				cut.Add(left)
				n.log.Warn("drain deadline passed; closing remaining connections", "pool", p.name, "cut", left)
				_ = srv.Close()
			}
		})
	}
	wg.Wait()
	if cut.Load() > 0 {
		n.awaitHandlers(cutGrace)
	}
	_, done := n.requests()
	n.log.Info("drained", "took", time.Since(start).Round(time.Millisecond).String(), "drained", done-finished, "cut", cut.Load())
	n.Close()
}

// cutGrace bounds the wait, after the drain deadline closed the last
// connections, for their handlers to return: Server.Close does not wait
// for them, and a request they finish after the usage recorder is sealed
// would go uncounted.
const cutGrace = 2 * time.Second

// awaitHandlers returns once every request started has finished (its
// record handed to the sinks, usage included), or after d.
func (n *Node) awaitHandlers(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if started, finished := n.requests(); started == finished {
			return
		}
		select {
		case <-t.C:
			started, finished := n.requests()
			n.log.Warn("requests still running after their connections were closed", "running", started-finished)
			return
		case <-tick.C:
		}
	}
}

// keepAliveGrace bounds step 2 of the drain: longer than any busy
// client's pause between two requests on one connection. A connection
// quiet for longer is idle, and closing it is what IdleTimeout does too.
const keepAliveGrace = time.Second

// awaitQuiet returns once a drainTick passes without a new request, or
// keepAliveGrace after start, or when ctx is done.
func (n *Node) awaitQuiet(ctx context.Context, start time.Time) {
	tick := time.NewTicker(drainTick)
	defer tick.Stop()
	last, _ := n.requests()
	for time.Since(start) < keepAliveGrace {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now, _ := n.requests()
		if now == last {
			return
		}
		last = now
	}
}

// drainTick is how often the drain looks for new requests.
const drainTick = 50 * time.Millisecond

// requests sums the pools' counts of requests started and finished.
func (n *Node) requests() (started, finished int64) {
	for _, p := range n.pools {
		// finished first: a request counted as finished is then surely
		// counted as started, and in flight never reads negative.
		finished += p.finished.Load()
		started += p.started.Load()
	}
	return started, finished
}

// Close releases the listeners and upstream connections. Run calls it; call
// it only for a Node whose Run was never called.
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		n.probes.close()
		n.closeListeners()
		n.upstreams.Close()
		n.tokens.Close()
		n.lane.Close()
		if n.stopSync != nil {
			n.stopSync()
			<-n.syncDone
		}
		if n.limits != nil {
			n.limits.Close()
		}
		if n.ownRedis != nil {
			_ = n.ownRedis.Close()
		}
		// Last: every request has finished, and the open window is
		// spooled with all of them.
		if n.usage != nil {
			n.usage.close()
		}
	})
}

func (n *Node) closeListeners() {
	for _, ln := range n.listeners {
		_ = ln.Close()
	}
}
