// Package admintest makes clients of the control plane's admin API for
// tests.
package admintest

import (
	"net/http"
	"time"

	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
)

// Client returns an AdminService client of the control plane at url that
// sends token as its bearer token (no Authorization header when token is
// empty).
func Client(url, token string) adminv1connect.AdminServiceClient {
	return adminv1connect.NewAdminServiceClient(&http.Client{Transport: bearer(token), Timeout: 30 * time.Second}, url)
}

type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+string(b))
	}
	return http.DefaultTransport.RoundTrip(r)
}
