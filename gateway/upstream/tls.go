package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// newTLSConfig builds the client TLS config of a cluster. Errors name the
// config field at fault; the caller adds the cluster.
//
// RootCAs is only the pinned CA when one is given, so a certificate from any
// other CA (public or private) is refused. ServerName left empty is filled in
// per connection by http.Transport from the endpoint's host. There is no
// ClientSessionCache on purpose: a resumed session would present the client
// certificate of the original handshake after a rotation.
func newTLSConfig(cfg *configv1.UpstreamTLS, requireH2 bool, ids *Identities) (*tls.Config, error) {
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
	if name := cfg.GetIdentity(); name != "" {
		id := ids.get(name)
		if id == nil {
			return nil, &MissingIdentityError{Identity: name}
		}
		conf.GetClientCertificate = id.get
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
