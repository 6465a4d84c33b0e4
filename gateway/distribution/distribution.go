// Package distribution is a gateway node's side of
// portico.distribution.v1: it holds a stream to the control plane, runs
// the snapshots it is sent, answers each with an ACK or a NACK, and keeps
// the last one it ran on local disk, so that a node restarted while the
// control plane is unreachable serves the same version again.
//
// Traffic never waits for the control plane: the node serves whatever it
// runs while the stream is down, and reconnects with jittered exponential
// backoff.
package distribution

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/routestats"
	"github.com/portico-gw/portico/gateway/snapshot"
	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/internal/backoff"
	"github.com/portico-gw/portico/internal/svcauth"
)

// Options configures a Client.
type Options struct {
	// URL is the control plane's base URL ("http://control:7000").
	URL string
	// HTTPClient must speak HTTP/2 (h2c for an http URL): the stream is
	// bidirectional. Nil means a client of its own that does.
	HTTPClient connect.HTTPClient
	// Token, if set, is sent as the node's credential
	// (Authorization: Bearer).
	Token string
	// NodeID names the node, stably across restarts; Pool, Region and
	// Labels describe it to the control plane's rollouts.
	NodeID, Pool, Region string
	Labels               map[string]string
	// CacheFile keeps the last snapshot the node ran; empty: none.
	CacheFile string
	// Apply runs a snapshot (gateway.Node.Apply). It returns an error, and
	// changes nothing, for a snapshot the node refuses. It logs what it
	// runs, with the snapshot's sha256 (the client does not log it again).
	Apply func(*configv1.Snapshot) error
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Stats, if set, reports the node's route counters
	// (gateway.Node.RouteStats) to the control plane every ReportInterval
	// (default 5 s), for its rollouts.
	Stats          func(fn func(routeID string, c routestats.Counts))
	ReportInterval time.Duration
	// Lane, if set, is fed by the fast-lane stream, held beside the
	// snapshot stream (gateway.Node.FastLane).
	Lane Lane
	// MinBackoff and MaxBackoff bound the wait between reconnects
	// (defaults 200 ms and 15 s); each wait is a random fraction of the
	// current bound, which doubles per failure.
	MinBackoff, MaxBackoff time.Duration
	// Node, if set, describes the node to the control plane (its upstream
	// identities and its endpoints' health, in the hello and every report),
	// runs the probes the control plane asks for before it commits a
	// change, and the synthetic probes of routes it asks for while one
	// rolls out, which every report counts (gateway.Node). Without it the
	// node reports none, answers cluster probes that it cannot run them,
	// and ignores route probes.
	Node Node
	// Usage, if set, is the node's usage counting (see Usage): the hello
	// and every report say where its spool stands, the control plane's
	// answers to reports set its clock offset, and the re-sends the
	// reconciler asks for reach it. Nil: the node counts no usage.
	Usage Usage
	// Now is the node's clock for the reports' sent_at and the clock
	// offset; nil: time.Now.
	Now func() time.Time
}

// Usage is the node's usage counting as the snapshot stream sees it (the
// node wires it to gateway/usage's recorder and shipper). The stream's
// goroutines call it: none of its methods may block for long.
type Usage interface {
	// UsageSpool says where the spool stands (nil: no spool yet); it is
	// sent in the hello and in every report.
	UsageSpool() *distributionv1.UsageSpool
	// SetClockOffset is called after each report the control plane
	// answered, with the offset of its clock from the node's
	// (control plane minus node), measured as NTP does: the node stamps
	// its usage windows with its clock plus the offset.
	SetClockOffset(time.Duration)
	// ResendUsage asks for windows of the spool to be shipped again; the
	// message is valid (protovalidate) and may name a spool that is not
	// the node's (the callee checks, and logs what it skips).
	ResendUsage(*distributionv1.ResendUsage)
}

// Node is what the client tells the control plane of the node, and how
// it probes clusters and routes (*gateway.Node).
type Node interface {
	UpstreamIdentities() []upstream.IdentityInfo
	ClusterStatus() []upstream.ClusterStatus
	ProbeClusters(ctx context.Context, clusters []*configv1.Cluster, timeout time.Duration) []upstream.ProbeResult
	// ProbeRoutes replaces the routes the node probes (an empty selection
	// stops it); ProbeStats reports the probes it sent, per route, since
	// it started.
	ProbeRoutes(sha256 string, routes snapshot.RouteSelection, interval, duration time.Duration) error
	ProbeStats(fn func(routeID string, c routestats.Counts))
}

// Lane is what the fast-lane stream feeds (*fastlane.Lane). Apply merges
// an update's entries; a *fastlane.EntryError means it applied all but
// the entries it names.
type Lane interface {
	Apply(entries []*configv1.FastLaneEntry) error
}

// Client is a node's distribution client.
type Client struct {
	opts Options
	log  *slog.Logger
	addr string // the control plane's host[:port], for the log

	mu      sync.Mutex
	running string // sha256 of the snapshot the node runs
	version int64  // its control plane version number, 0 if unknown
	// laneEpoch and laneVersion are the fast-lane version the node holds.
	laneEpoch   string
	laneVersion uint64
}

// New returns a client; Boot and Run use it.
func New(opts Options) *Client {
	if opts.HTTPClient == nil {
		opts.HTTPClient = streamClient(opts.URL)
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 200 * time.Millisecond
	}
	if opts.ReportInterval <= 0 {
		opts.ReportInterval = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(15*time.Second, opts.MinBackoff)
	}
	c := &Client{opts: opts, log: opts.Logger, addr: opts.URL}
	if u, err := url.Parse(opts.URL); err == nil && u.Host != "" {
		c.addr = u.Host
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c
}

// Running returns the sha256 and version number of the snapshot the node
// runs, as far as this client knows.
func (c *Client) Running() (sha256 string, version int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running, c.version
}

// Boot runs the cached snapshot, if there is one: before the node serves,
// so that it serves the last version it ran even with no control plane.
// It reports whether there was one.
func (c *Client) Boot() (bool, error) {
	if c.opts.CacheFile == "" {
		return false, nil
	}
	b, err := os.ReadFile(c.opts.CacheFile)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("distribution: reading the cached snapshot: %w", err)
	}
	cfg, err := decode(b)
	if err != nil {
		return false, fmt.Errorf("distribution: the cached snapshot %s: %w", c.opts.CacheFile, err)
	}
	if err := c.opts.Apply(cfg); err != nil {
		return false, fmt.Errorf("distribution: the cached snapshot %s: %w", c.opts.CacheFile, err)
	}
	c.mu.Lock()
	c.running = cfg.GetSha256()
	c.mu.Unlock()
	return true, nil
}

// Run holds the snapshot stream, and the fast-lane stream if the client
// has a Lane, until ctx ends, reconnecting each after every failure. It
// returns nil when ctx ends.
func (c *Client) Run(ctx context.Context) error {
	var copts []connect.ClientOption
	if c.opts.Token != "" {
		copts = append(copts, connect.WithInterceptors(svcauth.Interceptor(c.opts.Token)))
	}
	client := distributionv1connect.NewDistributionServiceClient(c.opts.HTTPClient, c.opts.URL, copts...)
	var wg sync.WaitGroup
	if c.opts.Lane != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(ctx, "fast lane", func(ctx context.Context, up func()) error { return c.laneSession(ctx, client, up) })
		}()
	}
	c.loop(ctx, "snapshot", func(ctx context.Context, up func()) error { return c.session(ctx, client, up) })
	wg.Wait()
	return nil
}

// loop runs session until ctx ends, waiting a jittered, growing backoff
// between two. A session calls up when the control plane has sent it a
// message. A dial that fails, or a stream that fails before any message
// and within MaxBackoff, is logged as the control plane unreachable; a
// stream that was up as ended.
func (c *Client) loop(ctx context.Context, name string, session func(ctx context.Context, up func()) error) {
	retry := backoff.Backoff{Min: c.opts.MinBackoff, Max: c.opts.MaxBackoff}
	for {
		start := time.Now()
		wasUp := false
		err := session(ctx, func() { wasUp = true })
		if ctx.Err() != nil {
			return
		}
		long := time.Since(start) > c.opts.MaxBackoff
		if long {
			retry.Reset() // it had been up a while: start again small
		}
		wait := retry.Next()
		if unreachable(err, !wasUp && !long) {
			c.log.Warn("control plane unreachable; retrying", "stream", name, "addr", c.addr, "err", err, "in", wait.Round(time.Millisecond))
		} else {
			c.log.Warn("control plane stream ended; reconnecting", "stream", name, "err", err, "in", wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// unreachable reports whether err, a session's error, says the control
// plane could not be reached: the dial failed (refused, no such host,
// timed out), or, early in a stream that never came up, the connection
// was reset or closed. connect-go reports these as unavailable and keeps
// the *net.OpError in the chain. An error the control plane sent, even
// unavailable, says it was reached.
func unreachable(err error, early bool) bool {
	if connect.IsWireError(err) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return early && (op != nil || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || connect.CodeOf(err) == connect.CodeUnavailable)
}

// sendError is the error of a failed Send on a stream. connect-go's Send
// returns an error wrapping io.EOF ("write envelope: EOF") when the
// stream is already gone, a refused dial among others, and Receive
// returns the reason, after the messages the control plane sent before
// it ended the stream (up is called for each).
func sendError[Res any](err error, receive func() (*Res, error), up func()) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	for {
		if _, err := receive(); err != nil {
			return err
		}
		up()
	}
}

// session is one stream: hello, then snapshots and their answers. It
// calls up on each message the control plane sends.
func (c *Client) session(ctx context.Context, client distributionv1connect.DistributionServiceClient, up func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := client.Stream(ctx)
	stopped := closeOnDone(ctx, stream)
	defer close(stopped)
	defer func() { _ = stream.CloseResponse() }()
	// Sends come from here (hello, ACKs) and from the reporter: one at a
	// time.
	var sendMu sync.Mutex
	send := func(m *distributionv1.StreamRequest) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	running, _ := c.Running()
	hello := &distributionv1.Hello{
		NodeId: c.opts.NodeID, Pool: c.opts.Pool, Region: c.opts.Region, Labels: c.opts.Labels, Sha256: running,
	}
	if c.opts.Node != nil {
		hello.Resources = resourcesOf(c.opts.Node.UpstreamIdentities())
		hello.Clusters = healthOf(c.opts.Node.ClusterStatus())
	}
	if c.opts.Usage != nil {
		hello.Usage = c.opts.Usage.UsageSpool()
	}
	if err := send(&distributionv1.StreamRequest{Message: &distributionv1.StreamRequest_Hello{Hello: hello}}); err != nil {
		return sendError(err, stream.Receive, up)
	}
	if c.opts.Stats != nil || c.opts.Node != nil || c.opts.Usage != nil {
		go c.report(ctx, stopped, send)
	}
	for {
		resp, err := stream.Receive()
		if err != nil {
			return err
		}
		up()
		if p := resp.GetProbe(); p != nil {
			// A probe takes up to its timeout: snapshots and ACKs do not
			// wait for it.
			go c.probe(ctx, p, send)
			continue
		}
		if pr := resp.GetProbeRoutes(); pr != nil {
			c.probeRoutes(pr)
			continue
		}
		if clk := resp.GetClock(); clk != nil {
			c.clock(clk)
			continue
		}
		if r := resp.GetResendUsage(); r != nil {
			c.resendUsage(r)
			continue
		}
		snap := resp.GetSnapshot()
		if snap == nil {
			continue
		}
		ack := &distributionv1.Ack{Sha256: snap.GetSha256()}
		// One line per version names its sha256, the control plane's:
		// Apply logs the snapshots it applies (their digest is the sha256
		// they were sent as, or run refuses them), so only a version sent
		// by name, which the node already runs, and a refusal are logged
		// here.
		if applied, err := c.run(snap); err != nil {
			ack.Error = truncate(err.Error(), maxAckError)
			ack.Objects = refusedObjects(err)
			c.log.Warn("snapshot refused", "version", snap.GetVersion(), "sha256", snap.GetSha256(), "err", err)
		} else if !applied {
			c.log.Info("snapshot running", "version", snap.GetVersion(), "sha256", snap.GetSha256())
		}
		if err := send(&distributionv1.StreamRequest{Message: &distributionv1.StreamRequest_Ack{Ack: ack}}); err != nil {
			return err
		}
	}
}

// closeOnDone ends the request side of stream when ctx ends or the
// returned channel is closed. Ending the request side is what ends a
// stream blocked in Receive: the HTTP/2 transport does not abort a
// response body read on the context while the request body is still open.
func closeOnDone(ctx context.Context, stream interface{ CloseRequest() error }) chan struct{} {
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		_ = stream.CloseRequest()
	}()
	return stopped
}

// report sends the route counters, and the route probes', every
// ReportInterval until the session ends.
func (c *Client) report(ctx context.Context, stopped <-chan struct{}, send func(*distributionv1.StreamRequest) error) {
	t := time.NewTicker(c.opts.ReportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stopped:
			return
		case <-t.C:
		}
		rep := &distributionv1.Report{SentAt: timestamppb.New(c.opts.Now())}
		if c.opts.Usage != nil {
			rep.Usage = c.opts.Usage.UsageSpool()
		}
		if c.opts.Stats != nil {
			c.opts.Stats(func(id string, n routestats.Counts) {
				rep.Routes = append(rep.Routes, &distributionv1.RouteCounts{
					RouteId: id, Requests: n.Requests, Errors: n.Errors, LatencyBuckets: n.Buckets[:],
				})
			})
		}
		if c.opts.Node != nil {
			rep.Clusters = healthOf(c.opts.Node.ClusterStatus())
			c.opts.Node.ProbeStats(func(id string, n routestats.Counts) {
				rep.Probes = append(rep.Probes, &distributionv1.RouteCounts{
					RouteId: id, Requests: n.Requests, Errors: n.Errors, LatencyBuckets: n.Buckets[:],
				})
			})
		}
		if err := send(&distributionv1.StreamRequest{Message: &distributionv1.StreamRequest_Report{Report: rep}}); err != nil {
			return // the session is ending; it reports why
		}
	}
}

// run makes the node run snap, and caches it. applied says whether it
// called Apply: not for a snapshot sent by name only, which the node
// runs already.
func (c *Client) run(snap *distributionv1.Snapshot) (applied bool, err error) {
	running, _ := c.Running()
	if len(snap.GetData()) == 0 {
		if snap.GetSha256() != running {
			return false, fmt.Errorf("sent no data for snapshot %s, which the node does not run", snap.GetSha256())
		}
		c.mu.Lock()
		c.version = snap.GetVersion()
		c.mu.Unlock()
		return false, nil
	}
	cfg, err := decode(snap.GetData())
	if err != nil {
		return false, err
	}
	if cfg.GetSha256() != snap.GetSha256() {
		return false, fmt.Errorf("the snapshot's bytes hash to %s, not to the %s it was sent as", cfg.GetSha256(), snap.GetSha256())
	}
	if err := c.opts.Apply(cfg); err != nil {
		return false, &applyError{cfg: cfg, err: err}
	}
	c.mu.Lock()
	c.running, c.version = snap.GetSha256(), snap.GetVersion()
	c.mu.Unlock()
	if c.opts.CacheFile != "" {
		if err := writeFile(c.opts.CacheFile, snap.GetData()); err != nil {
			// The node runs the snapshot; only a restart without a
			// control plane would miss it.
			c.log.Error("caching the snapshot failed", "file", c.opts.CacheFile, "err", err)
		}
	}
	return true, nil
}

// decode decodes a snapshot as the control plane sends it: its bytes
// without its sha256 field, which is their SHA-256. The field is set, so
// that compiling the snapshot checks it against the content again.
func decode(data []byte) (*configv1.Snapshot, error) {
	cfg := &configv1.Snapshot{}
	if err := proto.Unmarshal(data, cfg); err != nil {
		return nil, fmt.Errorf("the snapshot does not decode: %w", err)
	}
	if cfg.GetSha256() != "" {
		return nil, errors.New("the snapshot's bytes carry a sha256 field; they are hashed without it")
	}
	sum := sha256.Sum256(data)
	cfg.Sha256 = hex.EncodeToString(sum[:])
	return cfg, nil
}

// writeFile replaces path with data atomically: a crash leaves the old
// file or the new one, never half of one.
func writeFile(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".snapshot-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// streamClient speaks HTTP/2 to the control plane at url: h2c with prior
// knowledge for an http URL (with HTTP/1.1 allowed, the transport would
// use it and the stream could not work), TLS otherwise. The services
// have their own in internal/svchttp, which the data plane does not
// import (testing/deptest).
func streamClient(url string) *http.Client {
	protocols := new(http.Protocols)
	if strings.HasPrefix(url, "http://") {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP2(true)
	}
	return &http.Client{Transport: &http.Transport{Protocols: protocols, IdleConnTimeout: time.Minute}}
}
