// Package cleanpath normalises request paths before the gateway matches them,
// so that the path a route is chosen by and the path the backend receives
// are the same string. Different readings of one path by the gateway and a
// backend are how "/public/../admin" or "/%61dmin" slip past a route's
// checks; this package removes them.
//
// The rules, applied to the raw (still percent-encoded) path:
//
//   - The path must start with "/". ASCII control bytes, raw bytes >= 0x80,
//     space, '\\', '"', '<', '>', '`', '{', '}', '|' and '^' are rejected: a
//     conforming client percent-encodes them.
//   - Every '%' must start a two-digit hex escape. Escapes of '/', '\\' and
//     NUL (%2F, %5C, %00) are rejected: an encoded slash means one thing to
//     the gateway and another to many backends.
//   - Escapes of unreserved characters (ALPHA DIGIT - . _ ~) are decoded,
//     and the hex digits of the remaining escapes are uppercased (RFC 3986
//     6.2.2.1 and 6.2.2.2), so "/%61dmin" is "/admin".
//   - Runs of '/' collapse to one.
//   - "." segments are removed and ".." removes the segment before it
//     (RFC 3986 5.2.4), after decoding, so "%2e%2e" is "..". A ".." that
//     would climb above the root is rejected rather than clamped.
//   - A trailing slash is kept: "/a/" and "/a" are different resources.
package cleanpath

import "errors"

// Error is why a path was rejected. The gateway answers 400 bad_request.
type Error struct {
	Reason string
}

func (e *Error) Error() string { return "invalid request path: " + e.Reason }

var (
	errNoSlash      = &Error{"must start with /"}
	errBadByte      = &Error{"contains a byte that must be percent-encoded"}
	errBadEscape    = &Error{"malformed percent-encoding"}
	errEncodedSlash = &Error{"encoded slash, backslash or NUL"}
	errAboveRoot    = &Error{"'..' climbs above the root"}
)

// IsError reports whether err is a path rejection.
func IsError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// Clean returns the normalised form of the raw request path p (no query).
// When p is already normal, Clean returns p itself without allocating.
func Clean(p string) (string, error) {
	if len(p) == 0 || p[0] != '/' {
		return "", errNoSlash
	}
	dirty := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if class[c] == plain {
			continue
		}
		switch {
		case c == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "", errBadEscape
			}
			d := unhex(p[i+1])<<4 | unhex(p[i+2])
			if d == '/' || d == '\\' || d == 0 {
				return "", errEncodedSlash
			}
			if isUnreserved(d) || isLowerHex(p[i+1]) || isLowerHex(p[i+2]) {
				dirty = true
			}
			i += 2
		case c == '/':
			if i+1 < len(p) && p[i+1] == '/' {
				dirty = true
			}
		case c == '.':
			// A segment of "." or ".." needs work.
			if p[i-1] == '/' && (i+1 == len(p) || p[i+1] == '/' ||
				(p[i+1] == '.' && (i+2 == len(p) || p[i+2] == '/'))) {
				dirty = true
			}
		case !pathByte(c):
			return "", errBadByte
		}
	}
	if !dirty {
		return p, nil
	}
	return clean(p)
}

// clean is the slow path: decode unreserved escapes, then rebuild the path
// segment by segment.
func clean(p string) (string, error) {
	dec := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c != '%' {
			dec = append(dec, c)
			continue
		}
		d := unhex(p[i+1])<<4 | unhex(p[i+2])
		if isUnreserved(d) {
			dec = append(dec, d)
		} else {
			dec = append(dec, '%', upper(p[i+1]), upper(p[i+2]))
		}
		i += 2
	}

	out := make([]byte, 0, len(dec))
	n := len(dec)
	for i := 0; i < n; {
		// dec[i] == '/' here: skip the run of slashes.
		for i < n && dec[i] == '/' {
			i++
		}
		j := i
		for j < n && dec[j] != '/' {
			j++
		}
		seg := dec[i:j]
		trailing := j == n // the segment ends the path (it may be empty)
		switch string(seg) {
		case ".":
			if trailing {
				out = append(out, '/')
			}
		case "..":
			k := len(out) - 1
			for k >= 0 && out[k] != '/' {
				k--
			}
			if k < 0 {
				return "", errAboveRoot
			}
			out = out[:k]
			if trailing {
				out = append(out, '/')
			}
		default:
			out = append(out, '/')
			out = append(out, seg...)
		}
		i = j
	}
	if len(out) == 0 {
		out = append(out, '/')
	}
	return string(out), nil
}

// Byte classes for the fast scan in Clean.
const (
	bad = iota
	plain
	special // '%', '/', '.'
)

var class = func() (t [256]uint8) {
	for c := range 256 {
		switch {
		case c == '%' || c == '/' || c == '.':
			t[c] = special
		case pathByte(byte(c)):
			t[c] = plain
		}
	}
	return t
}()

// pathByte reports whether c may appear raw in a path: RFC 3986 pchar plus
// '/', except that '%' is handled by the caller.
func pathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', // unreserved
		'!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', // sub-delims
		':', '@', '/':
		return true
	}
	return false
}

func isUnreserved(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '-' || c == '.' || c == '_' || c == '~'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isLowerHex(c byte) bool { return 'a' <= c && c <= 'f' }

func upper(c byte) byte {
	if isLowerHex(c) {
		return c - 'a' + 'A'
	}
	return c
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
