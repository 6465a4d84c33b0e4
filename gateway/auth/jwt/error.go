package jwt

// Error is why a token was refused. Verify returns every refusal as an
// *Error, and its text never contains any part of the token, so it is safe
// to log and, as Reason, to show to the caller (for example in the
// error_description of a WWW-Authenticate header).
type Error struct {
	// Reason says what failed in a few words, one of a fixed set:
	// "not configured", "token too large", "malformed token",
	// "malformed header", "duplicate header member", "missing alg",
	// "crit not supported", "missing kid", "invalid kid",
	// "malformed claims", "duplicate claim", "missing iss",
	// "unknown issuer", "algorithm not allowed", "unknown kid",
	// "algorithm does not fit key", "invalid signature",
	// "invalid <claim> claim" (a registered claim of the wrong type or
	// range), "missing exp", "expired", "not yet valid",
	// "issued in the future", "missing aud", "audience not allowed",
	// "issuer mismatch", "lifetime too long" (exp - iat, or exp - now
	// without iat, is over the issuer's max_token_lifetime), "revoked".
	Reason string
	// Issuer is the configured name of the issuer the token named, once
	// the check got that far; empty before.
	Issuer string
}

func (e *Error) Error() string {
	if e.Issuer == "" {
		return "jwt: " + e.Reason
	}
	return "jwt: " + e.Reason + " (issuer " + e.Issuer + ")"
}

// Reasons, as constants so that a refusal allocates nothing but its *Error.
const (
	reasonNotConfigured  = "not configured"
	reasonTooLarge       = "token too large"
	reasonMalformed      = "malformed token"
	reasonBadHeader      = "malformed header"
	reasonDupHeader      = "duplicate header member"
	reasonNoAlg          = "missing alg"
	reasonCrit           = "crit not supported"
	reasonNoKID          = "missing kid"
	reasonBadKID         = "invalid kid"
	reasonBadClaims      = "malformed claims"
	reasonDupClaim       = "duplicate claim"
	reasonNoIss          = "missing iss"
	reasonUnknownIssuer  = "unknown issuer"
	reasonAlgNotAllowed  = "algorithm not allowed"
	reasonUnknownKID     = "unknown kid"
	reasonAlgKeyMismatch = "algorithm does not fit key"
	reasonBadSignature   = "invalid signature"
	reasonNoExp          = "missing exp"
	reasonExpired        = "expired"
	reasonNotYetValid    = "not yet valid"
	reasonIssuedInFuture = "issued in the future"
	reasonNoAud          = "missing aud"
	reasonAudNotAllowed  = "audience not allowed"
	reasonIssuerMismatch = "issuer mismatch"
	reasonTooLong        = "lifetime too long"
	reasonRevoked        = "revoked"
)

// invalidClaim is the reason for a registered claim of the wrong type or
// out of range. name is one of ours, never a name from the token.
func invalidClaim(name string) string { return "invalid " + name + " claim" }

func refuse(reason string) *Error { return &Error{Reason: reason} }
