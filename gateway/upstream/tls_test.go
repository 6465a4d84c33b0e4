package upstream_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/testca"
)

// echo answers "<proto major> <client certificate CN or ->".
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	cn := "-"
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cn = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	fmt.Fprintf(w, "%d %s", r.ProtoMajor, cn)
})

// tlsBackend starts an HTTPS server with a certificate for hosts from ca.
func tlsBackend(t *testing.T, ca *testca.CA, h2 bool, conf func(*tls.Config), hosts ...string) *httptest.Server {
	t.Helper()
	pair := ca.Issue(t, "backend", false, hosts...).TLS
	srv := httptest.NewUnstartedServer(echo)
	srv.EnableHTTP2 = h2
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point of some tests
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	if conf != nil {
		conf(srv.TLS)
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTLSPinnedCA(t *testing.T) {
	t.Parallel()
	ca := testca.New(t, "upstream CA")
	caFile := filepath.Join(t.TempDir(), "ca.PEM")
	writeFile(t, caFile, ca.PEM)
	h1 := tlsBackend(t, ca, false, nil, "127.0.0.1")
	h2 := tlsBackend(t, ca, true, nil, "127.0.0.1")

	tests := []struct {
		name      string
		protocol  configv1.Protocol
		backend   *httptest.Server
		tls       *configv1.UpstreamTLS
		wantProto string
	}{
		{"https/1.1 ca_pem", configv1.Protocol_PROTOCOL_HTTP1, h1, &configv1.UpstreamTLS{CaPem: string(ca.PEM)}, "1"},
		{"https/1.1 ca_file", configv1.Protocol_PROTOCOL_HTTP1, h1, &configv1.UpstreamTLS{CaFile: caFile}, "1"},
		{"h2", configv1.Protocol_PROTOCOL_H2, h2, &configv1.UpstreamTLS{CaPem: string(ca.PEM)}, "2"},
		{"grpc over tls", configv1.Protocol_PROTOCOL_GRPC, h2, &configv1.UpstreamTLS{CaFile: caFile}, "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr := tt.backend.Listener.Addr().String()
			cfg := cluster("tls", tt.protocol, addr)
			cfg.Tls = tt.tls
			_, s := build(t, testOptions(t, nil), cfg)
			c := s.Cluster("tls")
			if c.Scheme() != "https" {
				t.Errorf("Scheme() = %q, want https", c.Scheme())
			}
			body, err := get(t, c, addr)
			if err != nil {
				t.Fatalf("GET over the pinned CA: %v", err)
			}
			if want := tt.wantProto + " -"; body != want {
				t.Errorf("backend saw %q, want %q", body, want)
			}
		})
	}
}

func TestTLSRefusesOtherCA(t *testing.T) {
	t.Parallel()
	pinned, other := testca.New(t, "pinned CA"), testca.New(t, "other CA")
	srv := tlsBackend(t, other, false, nil, "127.0.0.1")
	addr := srv.Listener.Addr().String()
	cfg := cluster("pinned", configv1.Protocol_PROTOCOL_HTTP1, addr)
	cfg.Tls = &configv1.UpstreamTLS{CaPem: string(pinned.PEM)}
	_, s := build(t, testOptions(t, nil), cfg)
	_, err := get(t, s.Cluster("pinned"), addr)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("GET to a server of another CA: error %v, want x509.UnknownAuthorityError", err)
	}
}

func TestTLSServerName(t *testing.T) {
	t.Parallel()
	ca := testca.New(t, "CA")
	srv := tlsBackend(t, ca, false, nil, "orders.internal") // no IP SAN
	addr := srv.Listener.Addr().String()
	for _, tt := range []struct {
		serverName string
		wantErr    bool
	}{
		{"orders.internal", false},
		{"", true}, // verified against 127.0.0.1
	} {
		cfg := cluster("sni", configv1.Protocol_PROTOCOL_HTTP1, addr)
		cfg.Tls = &configv1.UpstreamTLS{CaPem: string(ca.PEM), ServerName: tt.serverName}
		_, s := build(t, testOptions(t, nil), cfg)
		_, err := get(t, s.Cluster("sni"), addr)
		if (err != nil) != tt.wantErr {
			t.Errorf("server_name %q: GET error %v, want error %v", tt.serverName, err, tt.wantErr)
		}
	}
}

// TestTLSH2RequiresALPN: an H2 cluster must not quietly speak HTTP/1.1 to a
// TLS server that does not negotiate h2.
func TestTLSH2RequiresALPN(t *testing.T) {
	t.Parallel()
	ca := testca.New(t, "CA")
	srv := tlsBackend(t, ca, false, func(c *tls.Config) { c.NextProtos = []string{} }, "127.0.0.1")
	addr := srv.Listener.Addr().String()
	cfg := cluster("h2", configv1.Protocol_PROTOCOL_H2, addr)
	cfg.Tls = &configv1.UpstreamTLS{CaPem: string(ca.PEM)}
	_, s := build(t, testOptions(t, nil), cfg)
	if body, err := get(t, s.Cluster("h2"), addr); err == nil {
		t.Fatalf("H2 cluster to a server without ALPN got %q, want an error", body)
	}
}

func TestMTLS(t *testing.T) {
	t.Parallel()
	serverCA, clientCA := testca.New(t, "server CA"), testca.New(t, "client CA")
	srv := tlsBackend(t, serverCA, false, func(c *tls.Config) {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = clientCA.Pool
	}, "127.0.0.1")
	srv.Config.SetKeepAlivesEnabled(false) // every request a new handshake
	addr := srv.Listener.Addr().String()

	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	leaf := clientCA.Issue(t, "gateway-1", true)
	certPEM, keyPEM := leaf.CertPEM, leaf.KeyPEM
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)

	clock := newFakeClock()
	opts := testOptions(t, clock)
	ids, err := upstream.LoadIdentities([]upstream.IdentityFiles{{Name: "gateway", CertFile: certFile, KeyFile: keyFile}}, clock.Now, opts.Logger)
	if err != nil {
		t.Fatal(err)
	}
	opts.Identities = ids
	withCert := cluster("mtls", configv1.Protocol_PROTOCOL_HTTP1, addr)
	withCert.Tls = &configv1.UpstreamTLS{CaPem: string(serverCA.PEM), Identity: "gateway"}
	// A second cluster naming the same identity shares its certificate
	// and sees its rotations.
	sibling := cluster("mtls-2", configv1.Protocol_PROTOCOL_HTTP1, addr)
	sibling.Tls = &configv1.UpstreamTLS{CaPem: string(serverCA.PEM), Identity: "gateway"}
	withoutCert := cluster("plain", configv1.Protocol_PROTOCOL_HTTP1, addr)
	withoutCert.Tls = &configv1.UpstreamTLS{CaPem: string(serverCA.PEM)}
	_, s := build(t, opts, withCert, sibling, withoutCert)
	c := s.Cluster("mtls")

	expect := func(want string) {
		t.Helper()
		body, err := get(t, c, addr)
		if err != nil {
			t.Fatalf("GET with the client certificate: %v", err)
		}
		if want = "1 " + want; body != want {
			t.Fatalf("backend saw %q, want %q", body, want)
		}
	}
	expect("gateway-1")
	if body, err := get(t, s.Cluster("plain"), addr); err == nil {
		t.Fatalf("GET without a client certificate got %q, want the handshake refused", body)
	}

	// Rotate the files. Within the check interval the loaded pair is used.
	leaf = clientCA.Issue(t, "gateway-2", true)
	certPEM, keyPEM = leaf.CertPEM, leaf.KeyPEM
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)
	expect("gateway-1")
	clock.Add(6 * time.Second)
	expect("gateway-2")

	// A rotation that does not parse keeps the last good pair.
	writeFile(t, certFile, []byte("half-written"))
	clock.Add(6 * time.Second)
	expect("gateway-2")
	leaf = clientCA.Issue(t, "gateway-3", true)
	certPEM, keyPEM = leaf.CertPEM, leaf.KeyPEM
	writeFile(t, keyFile, keyPEM)
	writeFile(t, certFile, certPEM)
	clock.Add(6 * time.Second)
	expect("gateway-3")
	if body, err := get(t, s.Cluster("mtls-2"), addr); err != nil || body != "1 gateway-3" {
		t.Fatalf("the sibling cluster: %q, %v; want %q", body, err, "1 gateway-3")
	}
	info := ids.Info()
	if len(info) != 1 || info[0].Name != "gateway" || info[0].Subject != "CN=gateway-3" || len(info[0].SHA256) != 64 || info[0].NotAfter.IsZero() {
		t.Errorf("Info() = %+v, want the rotated certificate gateway-3 with its digest and expiry", info)
	}
}

func TestGRPCHealthCheckOverTLS(t *testing.T) {
	t.Parallel()
	ca := testca.New(t, "CA")
	pair := ca.Issue(t, "grpc backend", false, "127.0.0.1").TLS
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}})))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	addr := l.Addr().String()

	cfg := cluster("grpcs", configv1.Protocol_PROTOCOL_GRPC, addr)
	cfg.Tls = &configv1.UpstreamTLS{CaPem: string(ca.PEM)}
	cfg.HealthCheck = &configv1.HealthCheck{
		Interval:           dur(100 * time.Millisecond),
		Timeout:            dur(5 * time.Second),
		UnhealthyThreshold: 2,
		HealthyThreshold:   2,
		Probe:              &configv1.HealthCheck_Grpc{Grpc: &configv1.GRPCProbe{}},
	}
	_, s := build(t, testOptions(t, nil), cfg)
	c := s.Cluster("grpcs")
	waitFor(t, 5*time.Second, "NOT_SERVING server unhealthy", func() bool { return !healthy(c, addr) })
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	waitFor(t, 5*time.Second, "SERVING server healthy", func() bool { return healthy(c, addr) })
}
