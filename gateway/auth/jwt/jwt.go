// Package jwt verifies OAuth 2.0 JWT access tokens (RFC 7519, RFC 9068) on
// the request path, following the practices of RFC 8725.
//
// A [Verifier] holds the issuers of the current snapshot: their pinned
// algorithms, their keys (pushed with the snapshot as a JWKS, or fetched
// off the request path from a jwks_url) and the deny list. Verify never
// calls the network and never takes the algorithm from the token alone:
// the token's iss picks the issuer's config first, and only that config's
// algorithms and keys can verify it.
//
// Before golang-jwt sees a token, the Verifier pre-parses it: exactly three
// unpadded base64url segments, header and payload JSON objects without
// duplicate members, a kid that is a plain name, no crit. The payload is
// decoded once, by that pre-parser; golang-jwt checks the signature and the
// registered claims. A token that lives longer than its issuer's
// max_token_lifetime is refused, so that a deny entry, which lasts that
// long past the tokens it covers, outlives every one of them (see
// gateway/denyentry). Tokens that pass are cached by their SHA-256 for at most
// a minute, and a cache hit re-checks expiry, the deny list and that the
// signing key is still published.
//
// Nothing in this package logs or returns any part of a token: the Reason of
// an [Error] is one of a fixed set of phrases.
package jwt
