// Package admintest makes clients of Portico's APIs (the control plane's
// admin API, the key service) for tests.
package admintest

import (
	"net/http"
	"time"

	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
)

// Client returns an AdminService client of the control plane at url that
// sends token as its bearer token (no Authorization header when token is
// empty).
func Client(url, token string) adminv1connect.AdminServiceClient {
	return adminv1connect.NewAdminServiceClient(HTTPClient(token), url)
}

// HTTPClient returns a client that sends token as its bearer token (no
// Authorization header when token is empty), with a 30 s timeout.
func HTTPClient(token string) *http.Client {
	return &http.Client{Transport: Bearer(token, nil), Timeout: 30 * time.Second}
}

// Bearer returns a transport that sends token as the bearer token of
// every request through next (http.DefaultTransport when nil); no
// Authorization header when token is empty. It is svcauth.Transport, the
// services' own.
func Bearer(token string, next http.RoundTripper) http.RoundTripper {
	return svcauth.Transport(token, next)
}
