package problem

import "strings"

// Redacted replaces a credential in what a problem echoes.
const Redacted = "[redacted]"

// Redact returns s with everything in it that looks like a credential
// replaced by Redacted: an API key (ak_live_ or ak_test_, in any case) and
// a JWT, recognised by its shape (see jwtAt) rather than by the "eyJ" that
// only compact JSON encodes to, each with every base64url character and
// '.' that follows it, so that what is glued to a credential (another
// one, the rest of a token) goes with it. Percent-escapes are read
// through, so a key spelled ak%5Flive%5F… in a raw query is found too. It
// returns s itself, without allocating, when there is nothing to replace,
// and its work is linear in len(s).
//
// Problems echo parts of the request (the path as instance, the path or a
// query parameter's name in a detail, a parameter's value in a violation),
// and a client that puts its key in the wrong place must not find it copied
// into an error that proxies, browsers and support tickets keep.
func Redact(s string) string {
	var b strings.Builder
	found := false
	last := 0 // s[last:i] is not yet written
	for i := 0; i < len(s); {
		end := i
		switch s[i] {
		case 'a', 'A', 'e', 'I', 'C', 'D', '%': // where a credential can start
			end = credentialAt(s, i)
		}
		if end == i {
			i++
			continue
		}
		if !found {
			b.Grow(len(s))
			found = true
		}
		b.WriteString(s[last:i])
		b.WriteString(Redacted)
		i, last = end, end
	}
	if !found {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// credentialAt returns where a credential that starts at s[i] ends, or i
// if none does.
func credentialAt(s string, i int) int {
	if end := prefixAt(s, i, "ak_live_", true); end > i {
		return runEnd(s, end, isTokenByte, i)
	}
	if end := prefixAt(s, i, "ak_test_", true); end > i {
		return runEnd(s, end, isTokenByte, i)
	}
	return jwtAt(s, i)
}

// jwtAt returns where a JWT (or one of its segments) that starts at s[i]
// ends, or i if none does.
//
// A JWT's header and payload are base64url JSON objects, and the verifier
// (gateway/auth/jwt) takes JSON white space around and inside them, so a
// token need not start with the "eyJ" of `{"`: `{ "` is "eyAi", `{\n` is
// "ewo", ` {` is "IHs". What every header the verifier accepts has is a
// '{' after optional white space, then (after more) the '"' of a member
// name. jwtAt decodes the first bytes at s[i] and asks for exactly that: at
// most two white-space bytes, '{', then '"' within three bytes or three
// white-space bytes. A header that starts with more white space is found
// where its '{' is decoded, a group of four characters further on: what
// stays unredacted before it is base64 of white space.
//
// The header must then run on for minSegment characters (a query key cut
// at its first '.' leaves a header alone, so a lone one counts); the JWT
// ends where the base64url characters and dots after it end.
func jwtAt(s string, i int) int {
	var head [6]byte
	// Most candidates fail on their first byte: look at it alone first.
	if decodeAt(s, i, head[:1]) == 0 || head[0] != '{' && !isJSONSpace(head[0]) {
		return i
	}
	if !jsonObjectStart(head[:decodeAt(s, i, head[:])]) {
		return i
	}
	j := i
	for n := 0; n < minSegment; n++ {
		c, w := byteAt(s, j)
		if w == 0 || !isBase64URL(c) {
			return i
		}
		j += w
	}
	return runEnd(s, j, isTokenByte, j)
}

// minSegment is the shortest JWT header Redact replaces: the shortest
// JOSE header, {"alg":"none"}, is 19 characters in base64url, and the
// verifier also wants a kid.
const minSegment = 16

// jsonObjectStart reports whether b, the first bytes a base64url run
// decodes to, starts like a JSON object with a member: up to two
// white-space bytes, '{', then '"' after up to two more, or three
// white-space bytes.
func jsonObjectStart(b []byte) bool {
	j := 0
	for j < 2 && j < len(b) && isJSONSpace(b[j]) {
		j++
	}
	if j >= len(b) || b[j] != '{' {
		return false
	}
	for k := j + 1; k <= j+3; k++ {
		if k >= len(b) {
			return false
		}
		if b[k] == '"' {
			return true
		}
		if !isJSONSpace(b[k]) {
			return false
		}
	}
	return true
}

// decodeAt decodes the base64url characters at s[i:] (escapes read
// through) into dst, as far as they go or dst holds, and returns how many
// bytes it filled.
func decodeAt(s string, i int, dst []byte) int {
	var acc uint
	bits, n := 0, 0
	for n < len(dst) {
		c, w := byteAt(s, i)
		if w == 0 {
			break
		}
		v, ok := base64URLValue(c)
		if !ok {
			break
		}
		acc = acc<<6 | uint(v)
		bits += 6
		if bits >= 8 {
			bits -= 8
			dst[n] = byte(acc >> bits)
			acc &= 1<<bits - 1
			n++
		}
		i += w
	}
	return n
}

// prefixAt returns the end of prefix if s has it at i (escapes read
// through; fold: without ASCII case), else i.
func prefixAt(s string, i int, prefix string, fold bool) int {
	j := i
	for k := 0; k < len(prefix); k++ {
		c, n := byteAt(s, j)
		if n == 0 {
			return i
		}
		if fold && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[k] {
			return i
		}
		j += n
	}
	return j
}

// runEnd returns the end of the run of bytes (escapes read through) that
// ok accepts starting at i, or none if the run is empty.
func runEnd(s string, i int, ok func(byte) bool, none int) int {
	j := i
	for {
		c, n := byteAt(s, j)
		if n == 0 || !ok(c) {
			break
		}
		j += n
	}
	if j == i {
		return none
	}
	return j
}

// byteAt returns the byte at s[i], a %XX escape decoded, and how many
// bytes of s it took (0 at the end).
func byteAt(s string, i int) (byte, int) {
	if i >= len(s) {
		return 0, 0
	}
	if s[i] == '%' && i+2 < len(s) {
		if hi, ok := unhex(s[i+1]); ok {
			if lo, ok := unhex(s[i+2]); ok {
				return hi<<4 | lo, 3
			}
		}
	}
	return s[i], 1
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// base64URLValue returns the six bits a base64url character stands for.
func base64URLValue(c byte) (byte, bool) {
	switch {
	case 'A' <= c && c <= 'Z':
		return c - 'A', true
	case 'a' <= c && c <= 'z':
		return c - 'a' + 26, true
	case '0' <= c && c <= '9':
		return c - '0' + 52, true
	case c == '-':
		return 62, true
	case c == '_':
		return 63, true
	}
	return 0, false
}

func isBase64URL(c byte) bool { _, ok := base64URLValue(c); return ok }

// isTokenByte reports whether c can be part of a key or a JWT as Redact
// reads them: base64url, and the dots between a JWT's segments.
func isTokenByte(c byte) bool { return c == '.' || isBase64URL(c) }

// isJSONSpace reports whether c is white space to JSON (RFC 8259).
func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
