package upstream

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"time"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Defaults of the ConnectionPool and Cluster fields left unset.
const (
	defaultConnectTimeout = 2 * time.Second
	defaultIdleTimeout    = 90 * time.Second
	defaultMaxIdle        = 256
)

// HTTP/2 connection health. A connection on which nothing was read for
// the ping interval is pinged; no answer within h2PingTimeout closes it, and
// so does a write that makes no progress for h2WriteTimeout.
//
// gRPC servers built on grpc-go close the connection (GOAWAY
// ENHANCE_YOUR_CALM "too_many_pings") when a client pings more than twice
// within the server's keepalive MinTime, 5 minutes by default, with no data in
// between. A quiet long-lived gRPC stream would then be killed by our own
// pings, so gRPC clusters ping just above that; they still have TCP keep-alive
// and the write timeout for dead peers.
const (
	h2PingInterval     = 30 * time.Second
	grpcH2PingInterval = 5*time.Minute + 30*time.Second
	h2PingTimeout      = 10 * time.Second
	h2WriteTimeout     = 30 * time.Second
)

// TCP keep-alive on upstream connections: an idle connection to a vanished
// host is noticed after about a minute.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 10 * time.Second, Count: 3}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// newDialer bounds each dial by the connect timeout, and dials the
// endpoints that have networks through their guard.
func newDialer(custom dialFunc, timeout time.Duration, endpoints []*Endpoint) dialFunc {
	var dial dialFunc
	if custom == nil {
		d := &net.Dialer{Timeout: timeout, KeepAliveConfig: keepAlive}
		dial = d.DialContext
	} else {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return custom(ctx, network, addr)
		}
	}
	guarded := map[string]dialFunc{}
	for _, e := range endpoints {
		if e.guard == nil {
			continue
		}
		if custom == nil {
			// The guard runs between the name's resolution and the
			// connect(2) of each address tried: nothing is sent to an
			// address outside the networks.
			d := &net.Dialer{Timeout: timeout, KeepAliveConfig: keepAlive, Control: e.guard.control}
			guarded[e.addr] = d.DialContext
		} else {
			// A custom dialer resolves on its own: the address it
			// connected to is checked before the connection is used.
			guarded[e.addr] = e.guard.after(dial)
		}
	}
	if len(guarded) == 0 {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if g := guarded[addr]; g != nil {
			return g(ctx, network, addr)
		}
		return dial(ctx, network, addr)
	}
}

// protocolsOf is the set of protocols the transport of a cluster may speak.
// Exactly one is allowed for each cluster protocol, so that a misconfigured
// upstream fails loudly instead of silently downgrading.
func protocolsOf(p configv1.Protocol, hasTLS bool) *http.Protocols {
	var ps http.Protocols
	switch p {
	case configv1.Protocol_PROTOCOL_H2C:
		ps.SetUnencryptedHTTP2(true) // prior knowledge, no Upgrade dance
	case configv1.Protocol_PROTOCOL_H2:
		ps.SetHTTP2(true)
	case configv1.Protocol_PROTOCOL_GRPC:
		if hasTLS {
			ps.SetHTTP2(true)
		} else {
			ps.SetUnencryptedHTTP2(true)
		}
	default: // PROTOCOL_HTTP1; validation rejects UNSPECIFIED
		ps.SetHTTP1(true)
	}
	return &ps
}

// newTransport builds the one http.Transport of a cluster. tlsConf is nil
// for cleartext clusters; dial is newDialer's.
func newTransport(cfg *configv1.Cluster, tlsConf *tls.Config, dial dialFunc) *http.Transport {
	pool := cfg.GetPool()
	connectTimeout := durationOr(cfg.GetConnectTimeout(), defaultConnectTimeout)
	maxIdle := int(pool.GetMaxIdlePerEndpoint())
	if maxIdle == 0 {
		maxIdle = defaultMaxIdle
	}
	protos := protocolsOf(cfg.GetProtocol(), tlsConf != nil)
	ping := h2PingInterval
	if cfg.GetProtocol() == configv1.Protocol_PROTOCOL_GRPC {
		ping = grpcH2PingInterval
	}
	return &http.Transport{
		Proxy:               nil, // never from the environment
		DialContext:         dial,
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: connectTimeout,
		// A proxy forwards the client's Accept-Encoding; it must not add its
		// own and transparently decompress.
		DisableCompression:  true,
		MaxIdleConnsPerHost: maxIdle,
		MaxConnsPerHost:     int(pool.GetMaxConnectionsPerEndpoint()),
		IdleConnTimeout:     durationOr(pool.GetIdleTimeout(), defaultIdleTimeout),
		ForceAttemptHTTP2:   protos.HTTP2() || protos.UnencryptedHTTP2(),
		Protocols:           protos,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout:  ping,
			PingTimeout:      h2PingTimeout,
			WriteByteTimeout: h2WriteTimeout,
		},
	}
}
