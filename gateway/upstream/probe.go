package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// ProbeResult is how one cluster fared when probed (see [Probe]).
type ProbeResult struct {
	Cluster string
	// Err is why the cluster could not be built on this node at all (an
	// identity the node lacks, a CA that does not parse); no endpoint was
	// checked then.
	Err       error
	Endpoints []EndpointProbe
}

// EndpointProbe is one endpoint's check: Err nil means healthy.
type EndpointProbe struct {
	Address string
	Err     error
}

// Healthy counts the endpoints that passed.
func (r ProbeResult) Healthy() int {
	n := 0
	for _, e := range r.Endpoints {
		if e.Err == nil {
			n++
		}
	}
	return n
}

// Probe tries a cluster the node does not run yet, as the control plane
// asks before it commits a change that adds or changes it: it builds the
// cluster as [Registry.Build] would (identity, TLS, endpoint networks),
// without keeping it, and checks every endpoint once, concurrently, each
// within timeout: the cluster's health check when it has one, else a
// connection and, for a TLS cluster, a handshake verified as traffic's
// would be. cfg must have passed protovalidate. Nothing the node serves
// changes; the probe's connections are closed before Probe returns.
func Probe(ctx context.Context, cfg *configv1.Cluster, opts Options, timeout time.Duration) ProbeResult {
	res := ProbeResult{Cluster: cfg.GetName()}
	c, err := newCluster(cfg, opts.withDefaults())
	if err != nil {
		var cerr *ClusterError
		if errors.As(err, &cerr) {
			err = cerr.Err
		}
		res.Err = err
		return res
	}
	defer c.close()
	res.Endpoints = make([]EndpointProbe, len(c.endpoints))
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, e := range c.endpoints {
		res.Endpoints[i].Address = e.addr
		wg.Go(func() {
			if c.health != nil {
				res.Endpoints[i].Err = c.health.probe(pctx, e)
			} else {
				res.Endpoints[i].Err = c.connect(pctx, e)
			}
		})
	}
	wg.Wait()
	return res
}

// connect opens one connection to e over the cluster's dialer and, with
// TLS, completes the handshake, then closes it.
func (c *Cluster) connect(ctx context.Context, e *Endpoint) error {
	conn, err := c.transport.DialContext(ctx, "tcp", e.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if c.transport.TLSClientConfig == nil {
		return nil
	}
	conf := c.transport.TLSClientConfig.Clone()
	if conf.ServerName == "" {
		host, _, err := net.SplitHostPort(e.addr)
		if err != nil {
			return err
		}
		conf.ServerName = host
	}
	if c.transport.Protocols.HTTP2() {
		conf.NextProtos = []string{"h2"}
	} else {
		conf.NextProtos = []string{"http/1.1"}
	}
	return tls.Client(conn, conf).HandshakeContext(ctx)
}
