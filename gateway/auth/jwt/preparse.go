package jwt

import (
	"encoding/base64"
	"strings"
	"sync"
)

// b64 decodes token segments: base64url without padding (RFC 7515), and
// without non-zero trailing bits, which would give one token several
// spellings.
var b64 = base64.RawURLEncoding.Strict()

// scratch is one Verify call's working memory, pooled so that the hot path
// allocates little beyond what it returns.
type scratch struct {
	token   []byte // a copy of the token, to hash and decode without allocating
	header  []byte
	payload []byte
	sig     []byte
	hdr     []member
	claims  []member
	elems   [][]byte
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// maxPooled bounds the buffers kept in the pool, so one large token does not
// pin its buffers for good.
const maxPooled = 16 << 10

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

func putScratch(s *scratch) {
	if cap(s.token) > maxPooled || cap(s.payload) > maxPooled || cap(s.claims) > 256 || cap(s.hdr) > 64 {
		return
	}
	s.elems = s.elems[:0]
	scratchPool.Put(s)
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// parsed is a token after pre-parsing: split, decoded and checked, with
// nothing of any issuer's config applied yet. Its byte slices alias the
// scratch it was parsed into.
type parsed struct {
	// signingInput is the header and payload segments as sent.
	signingInput string
	alg          []byte
	kid          []byte
	iss          []byte
	sig          []byte
	claims       []member
}

// preparse checks a token's shape before any key or library sees it:
// exactly three non-empty base64url segments without padding; a header that
// is a JSON object without duplicate members, with a string alg, no crit and
// a kid that is a plain name; a payload that is a JSON object without
// duplicate members and with a string iss. jku, x5u, jwk and x5c are never
// read. s.token must hold a copy of token. It returns the reason for a
// refusal, or "".
func preparse(token string, s *scratch) (parsed, string) {
	var p parsed
	// The decoder refuses every byte outside the base64url alphabet,
	// padding included, except line breaks, which it skips.
	dot1 := strings.IndexByte(token, '.')
	if dot1 <= 0 {
		return p, reasonMalformed
	}
	dot2 := strings.IndexByte(token[dot1+1:], '.') + dot1 + 1
	if dot2 <= dot1+1 || dot2 == len(token)-1 ||
		strings.IndexByte(token[dot2+1:], '.') >= 0 ||
		strings.IndexByte(token, '\n') >= 0 || strings.IndexByte(token, '\r') >= 0 {
		return p, reasonMalformed
	}
	h, pl, sg := s.token[:dot1], s.token[dot1+1:dot2], s.token[dot2+1:]
	var err error
	var n int
	s.header = grow(s.header, b64.DecodedLen(len(h)))
	if n, err = b64.Decode(s.header, h); err != nil {
		return p, reasonMalformed
	}
	s.header = s.header[:n]
	s.payload = grow(s.payload, b64.DecodedLen(len(pl)))
	if n, err = b64.Decode(s.payload, pl); err != nil {
		return p, reasonMalformed
	}
	s.payload = s.payload[:n]
	s.sig = grow(s.sig, b64.DecodedLen(len(sg)))
	if n, err = b64.Decode(s.sig, sg); err != nil {
		return p, reasonMalformed
	}
	p.sig = s.sig[:n]
	p.signingInput = token[:dot2]

	var ok bool
	if s.hdr, ok = parseObject(s.header, s.hdr[:0]); !ok {
		return p, reasonBadHeader
	}
	if duplicateName(s.hdr) {
		return p, reasonDupHeader
	}
	var haveAlg, haveKID bool
	for _, m := range s.hdr {
		switch string(m.name) {
		case "alg":
			if p.alg, ok = stringBytes(m.value); !ok {
				return p, reasonBadHeader
			}
			haveAlg = true
		case "kid":
			if p.kid, ok = stringBytes(m.value); !ok || !validKID(p.kid) {
				return p, reasonBadKID
			}
			haveKID = true
		case "crit":
			// RFC 7515 4.1.11: extensions we do not understand must fail
			// the token, and we understand none.
			return p, reasonCrit
		}
	}
	if !haveAlg {
		return p, reasonNoAlg
	}
	if !haveKID {
		return p, reasonNoKID
	}

	if s.claims, ok = parseObject(s.payload, s.claims[:0]); !ok {
		return p, reasonBadClaims
	}
	if duplicateName(s.claims) {
		return p, reasonDupClaim
	}
	p.claims = s.claims
	for _, m := range s.claims {
		if string(m.name) != "iss" {
			continue
		}
		if isNull(m.value) {
			break
		}
		if p.iss, ok = stringBytes(m.value); !ok {
			return p, invalidClaim("iss")
		}
	}
	if p.iss == nil {
		return p, reasonNoIss
	}
	return p, ""
}

// validKID reports whether kid matches ^[A-Za-z0-9._-]{1,128}$: a plain name
// that cannot be a path, a URL or a query when a key store is keyed by it.
func validKID(kid []byte) bool {
	if len(kid) == 0 || len(kid) > 128 {
		return false
	}
	for _, c := range kid {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
