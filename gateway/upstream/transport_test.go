package upstream_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

func TestTransportProtocols(t *testing.T) {
	t.Parallel()
	var acceptEncoding atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acceptEncoding.Store(r.Header.Get("Accept-Encoding"))
		echo(w, r)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	for _, tt := range []struct {
		protocol configv1.Protocol
		want     string
	}{
		{configv1.Protocol_PROTOCOL_HTTP1, "1 -"},
		{configv1.Protocol_PROTOCOL_H2C, "2 -"},
		{configv1.Protocol_PROTOCOL_GRPC, "2 -"},
	} {
		_, s := build(t, testOptions(t, nil), cluster("c", tt.protocol, addr))
		c := s.Cluster("c")
		if c.Scheme() != "http" {
			t.Errorf("%v: Scheme() = %q, want http", tt.protocol, c.Scheme())
		}
		body, err := get(t, c, addr)
		if err != nil {
			t.Fatalf("%v: GET: %v", tt.protocol, err)
		}
		if body != tt.want {
			t.Errorf("%v: backend saw %q, want %q", tt.protocol, body, tt.want)
		}
		if ae := acceptEncoding.Load(); ae != "" {
			t.Errorf("%v: transport added Accept-Encoding %q", tt.protocol, ae)
		}
	}
}

func TestTransportConfig(t *testing.T) {
	t.Parallel()
	defaults := cluster("defaults", configv1.Protocol_PROTOCOL_HTTP1, "127.0.0.1:1")
	defaults.ConnectTimeout = nil
	tuned := cluster("tuned", configv1.Protocol_PROTOCOL_H2C, "127.0.0.1:1")
	tuned.ConnectTimeout = dur(time.Second)
	tuned.Pool = &configv1.ConnectionPool{MaxIdlePerEndpoint: 7, MaxConnectionsPerEndpoint: 9, IdleTimeout: dur(time.Minute)}
	_, s := build(t, testOptions(t, nil), defaults, tuned)

	for _, tt := range []struct {
		cluster           string
		maxIdle, maxConns int
		idle, handshake   time.Duration
	}{
		{"defaults", 256, 0, 90 * time.Second, 2 * time.Second},
		{"tuned", 7, 9, time.Minute, time.Second},
	} {
		tr, ok := s.Cluster(tt.cluster).Transport().(*http.Transport)
		if !ok {
			t.Fatalf("Transport() is a %T, want *http.Transport", s.Cluster(tt.cluster).Transport())
		}
		if tr.MaxIdleConnsPerHost != tt.maxIdle || tr.MaxConnsPerHost != tt.maxConns ||
			tr.IdleConnTimeout != tt.idle || tr.TLSHandshakeTimeout != tt.handshake {
			t.Errorf("%s: MaxIdleConnsPerHost %d, MaxConnsPerHost %d, IdleConnTimeout %v, TLSHandshakeTimeout %v; want %d, %d, %v, %v",
				tt.cluster, tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost, tr.IdleConnTimeout, tr.TLSHandshakeTimeout,
				tt.maxIdle, tt.maxConns, tt.idle, tt.handshake)
		}
		if !tr.DisableCompression || tr.Proxy != nil {
			t.Errorf("%s: DisableCompression %v, Proxy set %v; want true, false", tt.cluster, tr.DisableCompression, tr.Proxy != nil)
		}
		if tr.HTTP2 == nil || tr.HTTP2.SendPingTimeout <= 0 {
			t.Errorf("%s: no HTTP/2 health pings configured", tt.cluster)
		}
	}
}

// TestTransportKeepsIdleConnections: after a burst of 20 concurrent requests
// the next burst reuses all 20 connections (the default Transport would keep
// 2 and open 18 new ones).
func TestTransportKeepsIdleConnections(t *testing.T) {
	t.Parallel()
	const burst = 20
	var arrived sync.WaitGroup
	backend := newConnCountingBackend(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait() // all requests of the burst are in flight at once
	})
	addr := backend.addr()
	_, s := build(t, testOptions(t, nil), cluster("pool", configv1.Protocol_PROTOCOL_HTTP1, addr))
	c := s.Cluster("pool")
	for range 2 {
		arrived.Add(burst)
		var wg sync.WaitGroup
		for range burst {
			wg.Go(func() {
				if _, err := get(t, c, addr); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	if n := backend.opened.Load(); n != burst {
		t.Errorf("backend accepted %d connections for two bursts of %d, want %d", n, burst, burst)
	}
}

func TestTransportDialer(t *testing.T) {
	t.Parallel()
	backend := newConnCountingBackend(t, nil)
	var dials atomic.Int64
	var deadline atomic.Bool
	opts := testOptions(t, nil)
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		_, ok := ctx.Deadline()
		deadline.Store(ok)
		if addr == "192.0.2.1:80" { // a black hole
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(3 * time.Second):
				return nil, errors.New("dial not bounded by the connect timeout")
			}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	// The connect timeout is short only towards the black hole, so that a
	// loaded machine cannot make the good dial time out.
	good := cluster("dialed", configv1.Protocol_PROTOCOL_HTTP1, backend.addr())
	hole := cluster("hole", configv1.Protocol_PROTOCOL_HTTP1, "192.0.2.1:80")
	hole.ConnectTimeout = dur(100 * time.Millisecond)
	_, s := build(t, opts, good, hole)
	if _, err := get(t, s.Cluster("dialed"), backend.addr()); err != nil {
		t.Fatal(err)
	}
	if dials.Load() != 1 || !deadline.Load() {
		t.Errorf("custom Dialer called %d times (deadline %v), want once with the connect timeout", dials.Load(), deadline.Load())
	}
	c := s.Cluster("hole")
	start := time.Now()
	_, err := get(t, c, "192.0.2.1:80")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("GET to a black hole: error %v, want the connect timeout", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("GET to a black hole took %v, want about the 100ms connect timeout", took)
	}
	if got := upstream.OutcomeOf(context.Background(), nil, err); got != upstream.Failure {
		t.Errorf("OutcomeOf(connect timeout) = %v, want failure", got)
	}
}
