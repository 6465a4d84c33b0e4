package upstream_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// countingListener counts the connections a backend accepted.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// TestDialGuard: an endpoint with networks is connected to only at
// addresses inside them, whatever its name resolves to; a refused address
// is never sent a packet, and the refusal is counted.
func TestDialGuard(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.Listener = cl
	srv.Start()
	t.Cleanup(srv.Close)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	custom := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	for _, dialer := range []struct {
		name string
		dial func(ctx context.Context, network, addr string) (net.Conn, error)
	}{{"net.Dialer", nil}, {"custom dialer", custom}} {
		tests := []struct {
			name     string
			addr     string
			networks []string
			ok       bool
		}{
			// localhost resolves to 127.0.0.1 (and maybe ::1): inside
			// loopback networks, outside 10/8.
			{"name resolving inside", "localhost:" + port, []string{"127.0.0.0/8", "::1/128"}, true},
			{"name resolving outside", "localhost:" + port, []string{"10.0.0.0/8"}, false},
			{"address outside", "127.0.0.1:" + port, []string{"10.0.0.0/8", "fd00::/8"}, false},
			{"no networks", "127.0.0.1:" + port, nil, true},
			{"IPv4-mapped network", "127.0.0.1:" + port, []string{"::ffff:127.0.0.0/104"}, true},
		}
		for _, tt := range tests {
			before := cl.accepted.Load()
			opts := testOptions(t, nil)
			opts.Dialer = dialer.dial
			cfg := cluster("guarded", configv1.Protocol_PROTOCOL_HTTP1, tt.addr)
			cfg.Endpoints[0].Networks = tt.networks
			_, s := build(t, opts, cfg)
			c := s.Cluster("guarded")
			body, err := get(t, c, tt.addr)
			refused := c.Endpoints()[0].RefusedDials
			if tt.ok {
				if err != nil || body != "ok" {
					t.Errorf("%s, %s: GET = %q, %v; want ok", dialer.name, tt.name, body, err)
				}
				if refused != 0 {
					t.Errorf("%s, %s: RefusedDials = %d, want 0", dialer.name, tt.name, refused)
				}
				continue
			}
			var rerr *upstream.DialRefusedError
			var op *net.OpError
			if !errors.As(err, &rerr) || !errors.As(err, &op) || op.Op != "dial" {
				t.Errorf("%s, %s: GET error %v, want a dial *net.OpError with a *upstream.DialRefusedError", dialer.name, tt.name, err)
			}
			if refused == 0 {
				t.Errorf("%s, %s: RefusedDials = 0, want the refusal counted", dialer.name, tt.name)
			}
			if dialer.dial == nil && cl.accepted.Load() != before {
				t.Errorf("%s, %s: the backend accepted a connection the guard refused", dialer.name, tt.name)
			}
		}
	}
}
