package gatewaytest

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/portico-gw/portico/testing/testca"
)

// Certificate issues a server certificate for hosts from a fresh CA and
// returns it with a pool that trusts it.
func Certificate(t testing.TB, hosts ...string) (tls.Certificate, *x509.CertPool) {
	ca := testca.New(t, "gatewaytest CA")
	return ca.Issue(t, hosts[0], false, hosts...).TLS, ca.Pool
}
