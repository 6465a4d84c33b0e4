package proxy

import (
	"net/textproto"
	"strings"
	"testing"
)

// TestDropRequestHeader covers the spellings a client can give a
// gateway-owned name, in net/http's canonical form (what the handler
// sees) and as sent.
func TestDropRequestHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		drop bool
	}{
		{"X-Auth-Tenant", true},
		{"x-AUTH-scopes", true},
		{"X_Auth_Tenant", true},
		{"x_auth_subject", true},
		{"X-Auth_Tenant", true},
		{"X_Auth-Tenant", true},
		{"X_auth_", true},
		{"X_Api_Key", true},
		{"X_Request_Id", true},
		{"X-Request_Id", true},
		{"X_Forwarded_For", true},
		{"X_Forwarded_Anything", true},
		{"X-Forwarded-Port", true},
		{"X-Forwarded-Prefix", true},
		{"x-forwarded-ssl", true},
		{"X-Real-Ip", true},
		{"X_Real_IP", true},
		{"True-Client-Ip", true},
		{"true_client_ip", true},
		{"Grpc_Timeout", true},
		{"Proxy_Authorization", true},
		{"Transfer_Encoding", true},
		{"Authorization", true},
		{"Traceparent", true},
		// Names that only resemble one.
		{"X-Auth", false},
		{"X_Auth", false},
		{"X_Authority", false},
		{"X_Api_Keys", false},
		{"X_Api_Ke", false},
		{"X_Request_Ids", false},
		{"X_Custom_Thing", false},
		{"Tracestate", false},
		{"User-Agent", false},
		{"X-Api-Version", false},
		{"X-Forwarded", false},
		{"X-Forwardedfor", false},
		{"My_X_Auth_Tenant", false},
		{"", false},
	} {
		for _, k := range []string{tc.name, textproto.CanonicalMIMEHeaderKey(tc.name)} {
			if got := dropRequestHeader(k); got != tc.drop {
				t.Errorf("dropRequestHeader(%q) = %v, want %v", k, got, tc.drop)
			}
		}
	}
}

// TestDropRequestHeaderEveryOwnedName: every owned name and family, with
// each '-' spelled '_', is dropped (dropRequestHeader's first-letter
// filter must know them all).
func TestDropRequestHeaderEveryOwnedName(t *testing.T) {
	t.Parallel()
	var names []string
	names = append(names, ownedNames[:]...)
	for _, p := range ownedPrefixes {
		names = append(names, p+"anything")
	}
	for _, n := range names {
		k := strings.ReplaceAll(n, "-", "_")
		for _, k := range []string{k, strings.ToUpper(k), textproto.CanonicalMIMEHeaderKey(k)} {
			if !dropRequestHeader(k) {
				t.Errorf("dropRequestHeader(%q) = false, want true (%s spelled with '_')", k, n)
			}
		}
	}
}
