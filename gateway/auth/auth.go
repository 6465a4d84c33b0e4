// Package auth authenticates and authorises requests on the node, from data
// already in memory: API keys against the key table, OAuth 2.0 access
// tokens (JWTs) against the issuers' keys and the deny list, then the
// route's scopes and product against the caller's scopes and plan. It never
// calls the network on the request path, and it fails closed: a request it
// cannot vouch for is refused.
//
// Credentials never leave this package: the Identity it returns carries no
// part of a key or token, errors and log lines name only why a credential
// was refused, and the proxy drops the Authorization and X-Api-Key headers
// (and the route's query key) before forwarding.
package auth

import (
	"strings"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Kind is how a caller authenticated.
type Kind uint8

const (
	// Anonymous is a request to a public route.
	Anonymous Kind = iota
	// APIKey is a caller that presented an API key.
	APIKey
	// Token is a caller that presented an OAuth 2.0 access token.
	Token
	// Synthetic is the platform's synthetic caller: the probes a node
	// sends its own request chain while a change rolls out (see
	// SyntheticCaller). No credential authenticates as it, and nothing a
	// client sends makes a request one.
	Synthetic
)

func (k Kind) String() string {
	switch k {
	case APIKey:
		return "api_key"
	case Token:
		return "token"
	case Synthetic:
		return "synthetic"
	}
	return "anonymous"
}

// The platform's synthetic caller, as backends see it (X-Auth-Client-Id
// and X-Auth-Tenant).
const (
	SyntheticClientID = "portico-synthetic"
	SyntheticTenant   = "platform"
)

// SyntheticCaller is the identity of a synthetic probe of a route that
// requires scopes (the route's, for the probe's method): the platform's
// synthetic caller, with those scopes, so that the backend sees who
// called and what the call may do. It has no plan, key or subject.
func SyntheticCaller(scopes []string) Identity {
	return Identity{Kind: Synthetic, ClientID: SyntheticClientID, Tenant: SyntheticTenant, Scopes: strings.Join(scopes, " ")}
}

// Identity is who a request is from, once authenticated. It is what the
// backend learns, as x-auth-* headers (or gRPC metadata); it holds no part
// of the credential.
type Identity struct {
	Kind Kind
	// Subject is the token's sub (the end user); empty for API keys.
	Subject string
	// ClientID is the token's client_id (or azp), or the key's app id.
	ClientID string
	// KeyID is the API key's id; empty for tokens.
	KeyID string
	// Issuer is the name of the token's issuer; empty for API keys.
	Issuer string
	Tenant string
	Plan   string
	// Scopes, space-separated.
	Scopes   string
	Priority configv1.Priority
}

// The identity headers, in canonical form. The proxy strips any a client
// sends; only the gateway sets them.
const (
	HeaderSubject  = "X-Auth-Subject"
	HeaderClientID = "X-Auth-Client-Id"
	HeaderKeyID    = "X-Auth-Key-Id"
	HeaderTenant   = "X-Auth-Tenant"
	HeaderPlan     = "X-Auth-Plan"
	HeaderScopes   = "X-Auth-Scopes"
	// HeaderSynthetic is "true" on the platform's synthetic calls, and
	// absent on every other: a backend can tell a node's probe from a real
	// app that happens to be called portico-synthetic (app names and
	// client_ids are free text), which X-Auth-Client-Id alone cannot.
	HeaderSynthetic = "X-Auth-Synthetic"
)

// EachHeader calls set for every identity header that applies (non-empty
// values only), in a fixed order.
func (id *Identity) EachHeader(set func(name, value string)) {
	if id == nil {
		return
	}
	var synthetic string
	if id.Kind == Synthetic {
		synthetic = "true"
	}
	for _, h := range [...]struct{ name, value string }{
		{HeaderSubject, id.Subject},
		{HeaderClientID, id.ClientID},
		{HeaderKeyID, id.KeyID},
		{HeaderTenant, id.Tenant},
		{HeaderPlan, id.Plan},
		{HeaderScopes, id.Scopes},
		{HeaderSynthetic, synthetic},
	} {
		if h.value != "" {
			set(h.name, h.value)
		}
	}
}

// HasScope reports whether scope is one of the identity's scopes.
func (id *Identity) HasScope(scope string) bool {
	s := id.Scopes
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != ' ' {
			i++
		}
		if s[:i] == scope {
			return true
		}
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return false
}
