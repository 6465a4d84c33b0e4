package upstream_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/testca"
)

// TestProbe: a cluster the node does not run is tried once per endpoint,
// by its health check or by a connection (and handshake), and left
// nothing running. It is not parallel: it counts goroutines.
func TestProbe(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(ok.Close)
	okAddr := ok.Listener.Addr().String()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	ca := testca.New(t, "CA")
	secure := tlsBackend(t, ca, false, nil, "127.0.0.1")
	secureAddr := secure.Listener.Addr().String()

	before := healthGoroutines()
	opts := testOptions(t, nil)
	probe := func(cfg *configv1.Cluster) upstream.ProbeResult {
		return upstream.Probe(context.Background(), cfg, opts, 2*time.Second)
	}

	plain := cluster("plain", configv1.Protocol_PROTOCOL_HTTP1, okAddr, dead)
	if r := probe(plain); r.Err != nil || r.Healthy() != 1 || r.Endpoints[0].Err != nil || r.Endpoints[1].Err == nil {
		t.Errorf("a live and a dead endpoint: %+v, want the first healthy and the second not", r)
	}
	checked := cluster("checked", configv1.Protocol_PROTOCOL_HTTP1, okAddr)
	checked.HealthCheck = &configv1.HealthCheck{Probe: &configv1.HealthCheck_Http{Http: &configv1.HTTPProbe{Path: "/healthz"}}}
	if r := probe(checked); r.Healthy() != 0 || r.Endpoints[0].Err == nil {
		t.Errorf("a health check answering 503: %+v, want unhealthy", r)
	}
	pinned := cluster("pinned", configv1.Protocol_PROTOCOL_HTTP1, secureAddr)
	pinned.Tls = &configv1.UpstreamTLS{CaPem: string(ca.PEM)}
	if r := probe(pinned); r.Healthy() != 1 {
		t.Errorf("TLS with the right CA: %+v, want healthy", r)
	}
	pinned.Tls = &configv1.UpstreamTLS{CaPem: string(testca.New(t, "other").PEM)}
	var unknown x509.UnknownAuthorityError
	if r := probe(pinned); r.Healthy() != 0 || !errors.As(r.Endpoints[0].Err, &unknown) {
		t.Errorf("TLS with another CA: %+v, want x509.UnknownAuthorityError", r)
	}
	outside := cluster("outside", configv1.Protocol_PROTOCOL_HTTP1, okAddr)
	outside.Endpoints[0].Networks = []string{"10.0.0.0/8"}
	var refused *upstream.DialRefusedError
	if r := probe(outside); r.Healthy() != 0 || !errors.As(r.Endpoints[0].Err, &refused) {
		t.Errorf("an endpoint outside its networks: %+v, want *upstream.DialRefusedError", r)
	}
	noID := cluster("no-id", configv1.Protocol_PROTOCOL_HTTP1, secureAddr)
	noID.Tls = &configv1.UpstreamTLS{CaPem: string(ca.PEM), Identity: "orders-mtls"}
	var missing *upstream.MissingIdentityError
	if r := probe(noID); !errors.As(r.Err, &missing) || missing.Identity != "orders-mtls" || len(r.Endpoints) != 0 {
		t.Errorf("an identity the node lacks: %+v, want *upstream.MissingIdentityError and no endpoint checked", r)
	}
	if n := healthGoroutines(); n != before {
		t.Errorf("%d health-check goroutines after probing, want %d", n, before)
	}
}
