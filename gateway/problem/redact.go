package problem

import "strings"

// Redacted replaces a credential in what a problem echoes.
const Redacted = "[redacted]"

// Redact returns s with everything in it that looks like a credential
// replaced by Redacted: an API key (ak_live_ or ak_test_, in any case, and
// the base62 that follows) and a JWT (eyJ and base64url, a '.', more
// base64url, and the signature if there is one; or one such segment of 16
// characters or more). Percent-escapes are read
// through, so a key spelled ak%5Flive%5F… in a raw query is found too. It
// returns s itself, without allocating, when there is nothing to replace.
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
		case 'a', 'A', 'e', '%': // where a credential can start
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
		return runEnd(s, end, isBase62, i)
	}
	if end := prefixAt(s, i, "ak_test_", true); end > i {
		return runEnd(s, end, isBase62, i)
	}
	if end := prefixAt(s, i, "eyJ", false); end > i {
		return jwtEnd(s, end, i)
	}
	return i
}

// jwtEnd returns the end of a JWT whose header started at start and whose
// "eyJ" ends at i: the rest of the header, a '.', a payload of at least
// one character, and an optional '.' and signature. A segment alone
// (base64url JSON of minSegment characters or more, as a query key cut at
// its first '.' leaves it) counts too. It returns start if the shape is
// neither.
func jwtEnd(s string, i, start int) int {
	i = runEnd(s, i, isBase64URL, -1)
	if i < 0 {
		return start
	}
	c, n := byteAt(s, i)
	if c != '.' {
		if i-start >= minSegment {
			return i
		}
		return start
	}
	payload := runEnd(s, i+n, isBase64URL, -1)
	if payload < 0 {
		return start
	}
	if c, n := byteAt(s, payload); c == '.' {
		if sig := runEnd(s, payload+n, isBase64URL, -1); sig >= 0 {
			return sig
		}
		return payload + n // alg none: an empty signature
	}
	return payload
}

// minSegment is the shortest lone JWT segment Redact replaces: the
// shortest JOSE header, {"alg":"none"}, is 19 characters in base64url.
const minSegment = 16

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

func isBase62(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isBase64URL(c byte) bool { return isBase62(c) || c == '-' || c == '_' }
