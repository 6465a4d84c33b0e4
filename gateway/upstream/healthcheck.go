package upstream

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Defaults of the HealthCheck fields left unset.
const (
	defaultHealthInterval     = 5 * time.Second
	defaultHealthTimeout      = 1 * time.Second
	defaultUnhealthyThreshold = 3
	defaultHealthyThreshold   = 2

	// maxProbeBody is how much of a probe's answer is read (and, for HTTP
	// probes, drained so the connection can be reused).
	maxProbeBody = 64 << 10
)

// healthChecker actively probes every endpoint of one cluster. One goroutine
// per cluster ticks at the interval (±10 % jitter so that clusters built
// together do not probe in lock-step); each round probes all endpoints
// concurrently and waits for them, so rounds never overlap and the per-endpoint
// counters are only touched by one goroutine at a time.
//
// Endpoints start healthy: a node that just started, or a cluster just built,
// serves at once instead of answering 503 until healthy_threshold rounds have
// passed. A dead endpoint is taken out after unhealthy_threshold failed
// probes, and meanwhile outlier detection sheds the requests that fail on it.
//
// Probes go over the cluster's own transport, so they exercise the same TLS
// config, client certificate, protocol and (for HTTP/2) the same multiplexed
// connections as the traffic. The one exception: an HTTP/1 cluster with
// max_connections_per_endpoint probes over a sibling transport (same config,
// no connection cap), or a saturated pool would make probes queue, time out
// and mark a busy endpoint unhealthy, pushing its load onto the others.
type healthChecker struct {
	c         *Cluster
	rt        *http.Transport
	ownRT     bool // rt is a sibling of the cluster's transport, closed with the checker
	interval  time.Duration
	timeout   time.Duration
	unhealthy uint32
	healthy   uint32

	probe func(ctx context.Context, e *Endpoint) error

	httpPath, httpHost string

	grpcFrame   []byte // the length-prefixed HealthCheckRequest, sent as is
	grpcTimeout string // grpc-timeout header value
}

func newHealthChecker(c *Cluster, cfg *configv1.HealthCheck) *healthChecker {
	h := &healthChecker{
		c:         c,
		rt:        c.transport,
		interval:  durationOr(cfg.GetInterval(), defaultHealthInterval),
		timeout:   durationOr(cfg.GetTimeout(), defaultHealthTimeout),
		unhealthy: cfg.GetUnhealthyThreshold(),
		healthy:   cfg.GetHealthyThreshold(),
	}
	if h.unhealthy == 0 {
		h.unhealthy = defaultUnhealthyThreshold
	}
	if h.healthy == 0 {
		h.healthy = defaultHealthyThreshold
	}
	if c.cfg.GetProtocol() == configv1.Protocol_PROTOCOL_HTTP1 && c.transport.MaxConnsPerHost > 0 {
		h.rt = c.transport.Clone()
		h.rt.MaxConnsPerHost = 0
		h.rt.MaxIdleConnsPerHost = 1
		h.ownRT = true
	}
	switch {
	case cfg.GetGrpc() != nil:
		msg, err := proto.Marshal(&healthpb.HealthCheckRequest{Service: cfg.GetGrpc().GetService()})
		if err != nil {
			panic(fmt.Sprintf("upstream: marshal HealthCheckRequest: %v", err)) // cannot happen for a string field
		}
		h.grpcFrame = make([]byte, 5+len(msg))
		binary.BigEndian.PutUint32(h.grpcFrame[1:5], uint32(len(msg)))
		copy(h.grpcFrame[5:], msg)
		h.grpcTimeout = fmt.Sprintf("%dm", max(h.timeout.Milliseconds(), 1))
		h.probe = h.probeGRPC
	default:
		h.httpPath = cfg.GetHttp().GetPath()
		h.httpHost = cfg.GetHttp().GetHost()
		h.probe = h.probeHTTP
	}
	return h
}

// run probes until ctx is canceled, then closes done. It is the only
// goroutine of a cluster; the cluster owns it and waits for done when it
// closes.
func (h *healthChecker) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	if h.ownRT {
		defer h.rt.CloseIdleConnections()
	}
	// The first round comes soon, so that a dead endpoint of a fresh node is
	// found early, but not at the same instant for every cluster.
	timer := time.NewTimer(rand.N(min(h.interval, time.Second)))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		h.round(ctx)
		timer.Reset(h.interval - h.interval/10 + rand.N(h.interval/5+1))
	}
}

// round probes every endpoint once, concurrently, and waits for all.
func (h *healthChecker) round(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, e := range h.c.endpoints {
		wg.Go(func() {
			err := h.probe(pctx, e)
			if ctx.Err() != nil {
				return // the cluster is closing; the probe was cut short
			}
			h.record(e, err)
		})
	}
	wg.Wait()
}

// record counts one probe result and flips the endpoint's health when a
// threshold is reached.
func (h *healthChecker) record(e *Endpoint, err error) {
	if err != nil {
		e.hcOKs = 0
		e.hcFails = min(e.hcFails+1, h.unhealthy)
		if e.hcFails == h.unhealthy && e.healthy.Load() {
			h.c.setHealthy(e, false)
			h.c.log.Warn("upstream endpoint unhealthy", "endpoint", e.addr, "failed_probes", e.hcFails, "error", err)
		}
		return
	}
	e.hcFails = 0
	e.hcOKs = min(e.hcOKs+1, h.healthy)
	if e.hcOKs == h.healthy && !e.healthy.Load() {
		h.c.setHealthy(e, true)
		h.c.log.Info("upstream endpoint healthy again", "endpoint", e.addr)
	}
}

// probeHTTP sends GET path and wants a 2xx answer. Redirects are failures.
func (h *healthChecker) probeHTTP(ctx context.Context, e *Endpoint) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.c.scheme+"://"+e.addr+h.httpPath, nil)
	if err != nil {
		return err
	}
	if h.httpHost != "" {
		req.Host = h.httpHost
	}
	req.Header["User-Agent"] = []string{"portico-health-check"}
	resp, err := h.rt.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("health check answered %s", resp.Status)
	}
	return nil
}

// probeGRPC makes a grpc.health.v1.Health/Check unary call by hand over
// the cluster's transport: gRPC over HTTP/2 is a POST with a length-prefixed
// message, answered by one length-prefixed message and a grpc-status trailer.
// grpc-go's health client would need a grpc.ClientConn per endpoint with
// its own connections, dialer and TLS setup, probing something other than
// the pool that carries the traffic.
func (h *healthChecker) probeGRPC(ctx context.Context, e *Endpoint) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		h.c.scheme+"://"+e.addr+"/grpc.health.v1.Health/Check", bytes.NewReader(h.grpcFrame))
	if err != nil {
		return err
	}
	req.ContentLength = int64(len(h.grpcFrame))
	req.Header["Content-Type"] = []string{"application/grpc"}
	req.Header["Te"] = []string{"trailers"}
	req.Header["Grpc-Timeout"] = []string{h.grpcTimeout}
	req.Header["User-Agent"] = []string{"portico-health-check"}
	resp, err := h.rt.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("grpc health check answered HTTP %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/grpc") {
		return fmt.Errorf("grpc health check answered content-type %q", ct)
	}
	// A trailers-only answer (an error such as NOT_FOUND for an unknown
	// service) carries its status in the headers.
	if st := resp.Header.Get("Grpc-Status"); st != "" {
		return grpcStatusError(st, resp.Header.Get("Grpc-Message"))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody+1))
	if err != nil {
		return fmt.Errorf("grpc health check: reading the answer: %w", err)
	}
	if st := resp.Trailer.Get("Grpc-Status"); st != "0" {
		if st == "" {
			return errors.New("grpc health check: no grpc-status trailer")
		}
		return grpcStatusError(st, resp.Trailer.Get("Grpc-Message"))
	}
	msg, err := unframe(body)
	if err != nil {
		return fmt.Errorf("grpc health check: %w", err)
	}
	var out healthpb.HealthCheckResponse
	if err := proto.Unmarshal(msg, &out); err != nil {
		return fmt.Errorf("grpc health check: %w", err)
	}
	if out.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("grpc health check: status %s", out.GetStatus())
	}
	return nil
}

// unframe returns the message of a body holding exactly one uncompressed
// gRPC length-prefixed message.
func unframe(body []byte) ([]byte, error) {
	if len(body) < 5 {
		return nil, fmt.Errorf("answer of %d bytes, want a message", len(body))
	}
	if body[0] != 0 {
		return nil, fmt.Errorf("answer with flags %#x, want an uncompressed message", body[0])
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if uint64(n) != uint64(len(body)-5) {
		return nil, fmt.Errorf("answer frame of %d bytes in a body of %d", n, len(body))
	}
	return body[5:], nil
}

func grpcStatusError(code, message string) error {
	if code == "0" {
		return errors.New("grpc health check: OK without a message")
	}
	return fmt.Errorf("grpc health check: grpc-status %s: %s", code, message)
}
