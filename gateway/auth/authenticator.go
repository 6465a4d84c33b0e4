package auth

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/portico-gw/portico/gateway/auth/jwt"
	"github.com/portico-gw/portico/gateway/auth/keytable"
	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/snapshot"
)

// Authenticator checks credentials and permissions against a View. It is
// safe for concurrent use.
//
// Lifecycle: New; Check on the hot path, with the View of the request's
// state (see Sources).
type Authenticator struct {
	tokens *jwt.Verifier
	now    func() time.Time
}

// New returns an Authenticator verifying tokens with tokens (which may be
// nil: every token is then refused). now is the clock; nil means time.Now.
func New(tokens *jwt.Verifier, now func() time.Time) *Authenticator {
	if now == nil {
		now = time.Now
	}
	return &Authenticator{tokens: tokens, now: now}
}

// checkKey authenticates an API key against the fast lane's table, then,
// for a key the lane does not know, the snapshot's: a key the lane holds
// (a revocation above all) overrides the snapshot's.
func checkKey(v *View, key string, now int64) (keytable.Record, error) {
	return keytable.CheckFirst(v.lane, v.keys, key, now)
}

// Failure is a refused request: the problem to answer with and, for 401 and
// 403, the WWW-Authenticate challenge (RFC 6750). Detail never contains any
// part of a credential.
type Failure struct {
	Code      problem.Code
	Detail    string
	Challenge string
}

const realm = `Bearer realm="portico"`

func unauthenticated(detail string, invalidToken bool) *Failure {
	c := realm
	if invalidToken {
		c += `, error="invalid_token"`
	}
	return &Failure{Code: problem.Unauthenticated, Detail: detail, Challenge: c}
}

// Check authenticates r for route against the credentials of view and
// authorises it against snap's plans: view and snap are of the one state
// the request loaded. rawQuery is the request's query; when the route's
// query key carried the credential, the caller must forward
// WithoutQueryKey(rawQuery, …). Check returns the caller's identity, or
// why the request is refused: with the identity too when the credential
// is good but the route is not the caller's to call (403), so that the
// refusal is counted to the caller it refused.
func (a *Authenticator) Check(r *http.Request, route *snapshot.Route, view *View, snap *snapshot.Snapshot, path, rawQuery string) (Identity, *Failure) {
	ra := route.Auth
	if ra.Public {
		return Identity{}, nil
	}
	cred, why := extract(r, ra.QueryKey, rawQuery)
	if why != "" {
		return Identity{}, unauthenticated(why, false)
	}

	var id Identity
	switch cred.kind {
	case APIKey:
		rec, err := checkKey(view, cred.value, a.now().UnixNano())
		if err != nil {
			return Identity{}, unauthenticated(keyReason(err), true)
		}
		id = Identity{
			Kind: APIKey, ClientID: rec.AppID, KeyID: rec.KeyID, Tenant: rec.TenantID,
			Plan: rec.Plan, Scopes: rec.Scopes, Priority: rec.Priority,
		}
	case Token:
		if a.tokens == nil {
			return Identity{}, unauthenticated("access tokens are not accepted here", true)
		}
		c, err := a.tokens.VerifyWith(view.tokens, cred.value)
		if err != nil {
			return Identity{}, unauthenticated(tokenReason(err), true)
		}
		if !ra.AcceptsIssuer(c.Issuer) {
			return Identity{}, unauthenticated("this route does not accept tokens from the token's issuer", true)
		}
		id = Identity{
			Kind: Token, Subject: c.Subject, ClientID: c.ClientID, Issuer: c.Issuer,
			Tenant: c.Tenant, Plan: c.Plan, Scopes: c.Scopes,
		}
	}

	for _, s := range ra.RequiredScopes(r.Method, path) {
		if !id.HasScope(s) {
			need := strings.Join(ra.RequiredScopes(r.Method, path), " ")
			return id, &Failure{
				Code:      problem.InsufficientScope,
				Detail:    "the credential lacks a scope this route requires: " + need,
				Challenge: realm + `, error="insufficient_scope", scope="` + need + `"`,
			}
		}
	}
	if ra.Product != "" && !snap.PlanIncludes(id.Plan, ra.Product) {
		return id, &Failure{
			Code:   problem.ProductNotInPlan,
			Detail: "the caller's plan does not include the API product " + ra.Product,
		}
	}
	return id, nil
}

// keyReason says why a key was refused, without naming the key.
func keyReason(err error) string {
	switch {
	case errors.Is(err, keytable.ErrMalformed):
		return "the API key is malformed"
	case errors.Is(err, keytable.ErrRevoked):
		return "the API key is revoked"
	case errors.Is(err, keytable.ErrExpired):
		return "the API key has expired"
	}
	return "the API key is not valid"
}

// tokenReason says why a token was refused; the verifier's reasons are
// written to be shown.
func tokenReason(err error) string {
	var e *jwt.Error
	if errors.As(err, &e) && e.Reason != "" {
		return "the access token is not valid: " + e.Reason
	}
	return "the access token is not valid"
}
