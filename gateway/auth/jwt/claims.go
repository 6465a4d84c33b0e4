package jwt

import (
	"errors"
	"math"
	"strings"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"
)

// Claims is the identity a verified token carries.
type Claims struct {
	// Issuer is the configured name of the issuer (Issuer.name), not the
	// token's iss URL.
	Issuer string
	// Subject is sub.
	Subject string
	// ClientID is client_id (RFC 9068), or azp when there is none.
	ClientID string
	// Tenant and Plan come from the issuer's tenant_claim and plan_claim;
	// Plan falls back to the issuer's default_plan.
	Tenant string
	Plan   string
	// Scopes is space-separated: the scope claim (RFC 8693, RFC 9068), or
	// else scp, either an array of strings or, as some issuers send it, a
	// space-separated string.
	Scopes string
	// JTI is jti.
	JTI string
	// IssuedAt and ExpiresAt are iat and exp in Unix seconds, rounded down;
	// IssuedAt is 0 when the token has no iat.
	IssuedAt  int64
	ExpiresAt int64
}

// maxNumericDate is 9999-12-31T23:59:59Z. Later or negative dates are
// refused rather than fed to time arithmetic that could overflow.
const maxNumericDate = 253402300799

// tokenClaims is a payload decoded once, after its signature was verified.
// It implements gojwt.Claims, so golang-jwt's Validator checks exp, nbf,
// iat, aud and iss exactly as its parser would.
type tokenClaims struct {
	iss                    string
	sub                    string
	aud                    gojwt.ClaimStrings
	exp, nbf, iat          gojwt.NumericDate
	hasExp, hasNbf, hasIat bool
	expSec, iatSec         float64
	jti, clientID, azp     string
	scope, scp             string
	hasScope               bool
	tenant, plan           string
}

var _ gojwt.Claims = (*tokenClaims)(nil)

func (c *tokenClaims) GetExpirationTime() (*gojwt.NumericDate, error) { return date(&c.exp, c.hasExp) }
func (c *tokenClaims) GetNotBefore() (*gojwt.NumericDate, error)      { return date(&c.nbf, c.hasNbf) }
func (c *tokenClaims) GetIssuedAt() (*gojwt.NumericDate, error)       { return date(&c.iat, c.hasIat) }
func (c *tokenClaims) GetIssuer() (string, error)                     { return c.iss, nil }
func (c *tokenClaims) GetSubject() (string, error)                    { return c.sub, nil }
func (c *tokenClaims) GetAudience() (gojwt.ClaimStrings, error)       { return c.aud, nil }

func date(d *gojwt.NumericDate, ok bool) (*gojwt.NumericDate, error) {
	if !ok {
		return nil, nil
	}
	return d, nil
}

// decodeClaims reads the claims the gateway uses from a payload's members.
// null counts as absent, as with encoding/json. Identity claims must be
// strings without control characters: they end up in headers to backends.
func decodeClaims(ms []member, is *issuer, scratch *[][]byte) (*tokenClaims, string) {
	c := &tokenClaims{iss: is.iss}
	var ok bool
	elems := *scratch
	defer func() { *scratch = elems[:0] }()
	for _, m := range ms {
		v := m.value
		if isNull(v) {
			continue
		}
		switch string(m.name) {
		case "sub":
			if c.sub, ok = identity(v); !ok {
				return nil, invalidClaim("sub")
			}
		case "aud":
			if s, isString := stringValue(v); isString {
				if s != "" {
					c.aud = gojwt.ClaimStrings{s}
				}
				break
			}
			if elems, ok = elements(v, elems[:0]); !ok {
				return nil, invalidClaim("aud")
			}
			for _, e := range elems {
				s, ok := stringValue(e)
				if !ok {
					return nil, invalidClaim("aud")
				}
				c.aud = append(c.aud, s)
			}
		case "exp":
			if c.expSec, ok = numericDate(v); !ok {
				return nil, invalidClaim("exp")
			}
			c.exp, c.hasExp = toDate(c.expSec), true
		case "nbf":
			f, ok := numericDate(v)
			if !ok {
				return nil, invalidClaim("nbf")
			}
			c.nbf, c.hasNbf = toDate(f), true
		case "iat":
			if c.iatSec, ok = numericDate(v); !ok {
				return nil, invalidClaim("iat")
			}
			c.iat, c.hasIat = toDate(c.iatSec), true
		case "jti":
			if c.jti, ok = identity(v); !ok {
				return nil, invalidClaim("jti")
			}
		case "client_id":
			if c.clientID, ok = identity(v); !ok {
				return nil, invalidClaim("client_id")
			}
		case "azp":
			if c.azp, ok = identity(v); !ok {
				return nil, invalidClaim("azp")
			}
		case "scope":
			if c.scope, ok = identity(v); !ok {
				return nil, invalidClaim("scope")
			}
			c.hasScope = true
		case "scp":
			if c.scp, ok = identity(v); ok {
				break
			}
			if elems, ok = elements(v, elems[:0]); !ok {
				return nil, invalidClaim("scp")
			}
			var b strings.Builder
			for i, e := range elems {
				s, ok := identity(e)
				if !ok || s == "" || strings.IndexByte(s, ' ') >= 0 {
					return nil, invalidClaim("scp")
				}
				if i > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(s)
			}
			c.scp = b.String()
		}
		if string(m.name) == is.tenantClaim {
			if c.tenant, ok = identity(v); !ok {
				return nil, invalidClaim("tenant")
			}
		}
		if string(m.name) == is.planClaim {
			if c.plan, ok = identity(v); !ok {
				return nil, invalidClaim("plan")
			}
		}
	}
	return c, ""
}

// identity returns v as a string if it is one without control characters.
func identity(v []byte) (string, bool) {
	s, ok := stringValue(v)
	if !ok {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return "", false
		}
	}
	return s, true
}

func numericDate(v []byte) (float64, bool) {
	f, ok := numberValue(v)
	return f, ok && f >= 0 && f <= maxNumericDate
}

func toDate(f float64) gojwt.NumericDate {
	sec, frac := math.Modf(f)
	return gojwt.NumericDate{Time: time.Unix(int64(sec), int64(frac*1e9))}
}

// claims builds the caller's view.
func (c *tokenClaims) claims(is *issuer) Claims {
	out := Claims{
		Issuer:    is.name,
		Subject:   c.sub,
		ClientID:  c.clientID,
		Tenant:    c.tenant,
		Plan:      c.plan,
		Scopes:    c.scp,
		JTI:       c.jti,
		ExpiresAt: int64(c.expSec),
	}
	if out.ClientID == "" {
		out.ClientID = c.azp
	}
	if out.Plan == "" {
		out.Plan = is.defaultPlan
	}
	if c.hasScope {
		out.Scopes = c.scope
	}
	if c.hasIat {
		out.IssuedAt = int64(c.iatSec)
	}
	return out
}

// claimsReason turns golang-jwt's validation errors (all of them, joined)
// into the reason of the first failing check, in a fixed order.
func claimsReason(c *tokenClaims, err error) string {
	switch {
	case !c.hasExp:
		return reasonNoExp
	case errors.Is(err, gojwt.ErrTokenExpired):
		return reasonExpired
	case errors.Is(err, gojwt.ErrTokenNotValidYet):
		return reasonNotYetValid
	case errors.Is(err, gojwt.ErrTokenUsedBeforeIssued):
		return reasonIssuedInFuture
	case errors.Is(err, gojwt.ErrTokenRequiredClaimMissing):
		// exp is settled above and iss is always present, so it is aud.
		return reasonNoAud
	case errors.Is(err, gojwt.ErrTokenInvalidAudience):
		return reasonAudNotAllowed
	case errors.Is(err, gojwt.ErrTokenInvalidIssuer):
		return reasonIssuerMismatch
	}
	return reasonBadClaims
}
