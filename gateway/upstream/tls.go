package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// certCheckInterval is how often, at most, the client certificate files are
// stat'ed for a rotation. Handshakes in between use the pair in memory.
const certCheckInterval = 5 * time.Second

// newTLSConfig builds the client TLS config of a cluster. Errors name the
// config field at fault; the caller adds the cluster.
//
// RootCAs is only the pinned CA when one is given, so a certificate from any
// other CA (public or private) is refused. ServerName left empty is filled in
// per connection by http.Transport from the endpoint's host. There is no
// ClientSessionCache on purpose: a resumed session would present the client
// certificate of the original handshake after a rotation.
func newTLSConfig(cfg *configv1.UpstreamTLS, requireH2 bool, now func() time.Time, log *slog.Logger) (*tls.Config, error) {
	conf := &tls.Config{
		ServerName: cfg.GetServerName(),
		MinVersion: tls.VersionTLS12,
	}
	switch {
	case cfg.GetCaPem() != "":
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(cfg.GetCaPem())) {
			return nil, errors.New("tls.ca_pem: no PEM certificate found")
		}
		conf.RootCAs = pool
	case cfg.GetCaFile() != "":
		pem, err := os.ReadFile(cfg.GetCaFile())
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file: %s: no PEM certificate found", cfg.GetCaFile())
		}
		conf.RootCAs = pool
	}
	if cfg.GetClientCertFile() != "" {
		l := &certLoader{
			certFile: cfg.GetClientCertFile(),
			keyFile:  cfg.GetClientKeyFile(),
			now:      now,
			log:      log,
		}
		if err := l.load(); err != nil {
			return nil, err
		}
		l.nextCheck = now().Add(certCheckInterval)
		conf.GetClientCertificate = l.get
	}
	if requireH2 {
		// Without ALPN h2 the transport would fall back to HTTP/1.1 over the
		// same connection; an H2 or gRPC cluster must not speak HTTP/1.
		conf.VerifyConnection = func(cs tls.ConnectionState) error {
			if cs.NegotiatedProtocol != "h2" {
				return fmt.Errorf("upstream %s did not negotiate ALPN h2 (got %q)", cs.ServerName, cs.NegotiatedProtocol)
			}
			return nil
		}
	}
	return conf, nil
}

// certLoader serves the client certificate of an mTLS cluster and picks up
// rotated files. It is called by crypto/tls during handshakes, from any
// number of goroutines.
type certLoader struct {
	certFile, keyFile string
	now               func() time.Time
	log               *slog.Logger

	mu        sync.Mutex
	cert      *tls.Certificate
	certStamp fileStamp
	keyStamp  fileStamp
	nextCheck time.Time
}

// fileStamp identifies one version of a file without reading it.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(name string) (fileStamp, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// load reads the pair for the first time; a failure fails the Build.
func (l *certLoader) load() error {
	cs, err := stampOf(l.certFile)
	if err != nil {
		return fmt.Errorf("tls.client_cert_file: %w", err)
	}
	ks, err := stampOf(l.keyFile)
	if err != nil {
		return fmt.Errorf("tls.client_key_file: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(l.certFile, l.keyFile)
	if err != nil {
		return fmt.Errorf("tls.client_cert_file/client_key_file: %w", err)
	}
	l.cert, l.certStamp, l.keyStamp = &cert, cs, ks
	return nil
}

// get is tls.Config.GetClientCertificate. It re-reads the files when their
// size or modification time changed, at most once per certCheckInterval. A
// new pair that does not load is logged and the old pair kept: a half-written
// rotation must not take the cluster down. The stamps of the bad files are
// remembered, so the next change (the other half being written) is retried.
func (l *certLoader) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Before(l.nextCheck) {
		return l.cert, nil
	}
	l.nextCheck = now.Add(certCheckInterval)
	cs, err1 := stampOf(l.certFile)
	ks, err2 := stampOf(l.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		l.log.Error("upstream client certificate unreadable, keeping the loaded one", "error", err)
		return l.cert, nil
	}
	if cs == l.certStamp && ks == l.keyStamp {
		return l.cert, nil
	}
	l.certStamp, l.keyStamp = cs, ks
	cert, err := tls.LoadX509KeyPair(l.certFile, l.keyFile)
	if err != nil {
		l.log.Error("upstream client certificate changed but does not load, keeping the old one",
			"cert_file", l.certFile, "key_file", l.keyFile, "error", err)
		return l.cert, nil
	}
	l.cert = &cert
	attrs := []any{"cert_file", l.certFile}
	if cert.Leaf != nil {
		attrs = append(attrs, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
	}
	l.log.Info("upstream client certificate reloaded", attrs...)
	return l.cert, nil
}
