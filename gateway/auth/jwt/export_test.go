package jwt

import "crypto/sha256"

// CacheLen is how many tokens v's cache holds.
func CacheLen(v *Verifier) int {
	if v.cache == nil {
		return 0
	}
	return v.cache.len()
}

// DenyLen is how many deny entries v holds.
func DenyLen(v *Verifier) int {
	d := v.installed.Load().deny
	if d == nil {
		return 0
	}
	n := 0
	for _, m := range []map[string][]denyRule{d.jti, d.subject, d.client} {
		for _, rules := range m {
			n += len(rules)
		}
	}
	return n
}

// Cached reports whether v's cache holds a live entry for token.
func Cached(v *Verifier, token string) bool {
	if v.cache == nil {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	e := v.cache.get(&sum)
	return e != nil && v.now().UnixNano() < e.until
}

// Preparsed is what the pre-parser and the claims decoder read from a
// token, with the default claim names.
type Preparsed struct {
	Alg, KID, Iss string
	// ClaimsReason is why decoding the claims failed, or "".
	ClaimsReason             string
	Sub, JTI, ClientID, AZP  string
	Scope, Scp, Tenant, Plan string
	HasScope                 bool
	Aud                      []string
	Exp, Nbf, Iat            float64
	HasExp, HasNbf, HasIat   bool
}

// Preparse runs the pre-parser and, when it accepts, the claims decoder.
func Preparse(token string) (Preparsed, string) {
	s := getScratch()
	defer putScratch(s)
	s.token = append(s.token[:0], token...)
	p, reason := preparse(token, s)
	if reason != "" {
		return Preparsed{}, reason
	}
	out := Preparsed{Alg: string(p.alg), KID: string(p.kid), Iss: string(p.iss)}
	is := &issuer{iss: out.Iss, tenantClaim: defaultTenantClaim, planClaim: defaultPlanClaim}
	c, reason := decodeClaims(p.claims, is, &s.elems)
	if reason != "" {
		out.ClaimsReason = reason
		return out, ""
	}
	out.Sub, out.JTI, out.ClientID, out.AZP = c.sub, c.jti, c.clientID, c.azp
	out.Scope, out.Scp, out.Tenant, out.Plan, out.HasScope = c.scope, c.scp, c.tenant, c.plan, c.hasScope
	out.Aud = c.aud
	out.HasExp, out.HasIat, out.HasNbf = c.hasExp, c.hasIat, c.hasNbf
	out.Exp, out.Iat = c.expSec, c.iatSec
	if c.hasNbf {
		out.Nbf = float64(c.nbf.UnixNano()) / 1e9
	}
	return out, ""
}

// FetcherStopped reports whether the fetcher of set's issuer name has
// stopped (false without one).
func FetcherStopped(set *Issuers, name string) bool {
	is := set.issuer(name)
	if is == nil || is.fetch == nil {
		return false
	}
	select {
	case <-is.fetch.done:
		return true
	default:
		return false
	}
}
