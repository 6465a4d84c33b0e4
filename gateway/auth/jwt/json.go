package jwt

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds the small JSON scanner that token headers, payloads and
// JWKS documents go through. It exists for two reasons encoding/json cannot
// serve: it sees duplicate member names (encoding/json silently keeps the
// last, so two parsers could read one token differently), and it lets the
// hot path decode a payload once, without reflection, into exactly the
// claims it needs.
//
// It accepts a subset of what encoding/json accepts: besides RFC 8259 it
// requires valid UTF-8, rejects escaped lone surrogates, numbers that do
// not fit a float64 (encoding/json fails on those too when decoding into
// an interface) and nesting deeper than maxDepth.

// maxDepth bounds nesting. Real tokens and key sets nest a few levels.
const maxDepth = 32

// member is one name/value pair of a JSON object.
type member struct {
	// name is unescaped: a sub-slice of the input unless the name had
	// escapes.
	name []byte
	// value is the raw JSON text of the value, from its first byte to its
	// last.
	value []byte
}

// parseObject parses b as one JSON object and appends its members to dst,
// in order. ok is false if b is not exactly one valid JSON object (with
// optional surrounding white space).
func parseObject(b []byte, dst []member) (_ []member, ok bool) {
	if !utf8.Valid(b) {
		return dst, false
	}
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return dst, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return dst, skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return dst, false
		}
		end, escaped, ok := scanString(b, i)
		if !ok {
			return dst, false
		}
		name := b[i+1 : end-1]
		if escaped {
			name = unescape(nil, name)
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return dst, false
		}
		i = skipSpace(b, i+1)
		vend, ok := skipValue(b, i, 1)
		if !ok {
			return dst, false
		}
		dst = append(dst, member{name: name, value: b[i:vend]})
		i = skipSpace(b, vend)
		if i >= len(b) {
			return dst, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return dst, skipSpace(b, i+1) == len(b)
		default:
			return dst, false
		}
	}
}

// duplicateName reports whether two members share a name.
func duplicateName(ms []member) bool {
	if len(ms) <= 32 {
		// Compare a cheap fingerprint first: most claim names are three
		// letters long.
		var prints [32]uint64
		for i, m := range ms {
			prints[i] = fingerprint(m.name)
			for j := 0; j < i; j++ {
				if prints[j] == prints[i] && string(ms[j].name) == string(m.name) {
					return true
				}
			}
		}
		return false
	}
	seen := make(map[string]struct{}, len(ms))
	for _, m := range ms {
		if _, dup := seen[string(m.name)]; dup {
			return true
		}
		seen[string(m.name)] = struct{}{}
	}
	return false
}

// fingerprint packs a name's length and up to its first three and last
// byte: equal names have equal fingerprints.
func fingerprint(name []byte) uint64 {
	f := uint64(len(name)) << 32
	for i := 0; i < len(name) && i < 3; i++ {
		f |= uint64(name[i]) << (8 * i)
	}
	if len(name) > 0 {
		f |= uint64(name[len(name)-1]) << 24
	}
	return f
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue scans the JSON value starting at b[i] and returns the index
// just past it.
func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		end, _, ok := scanString(b, i)
		return end, ok
	case c == '{':
		if depth >= maxDepth {
			return i, false
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			end, _, ok := scanString(b, i)
			if !ok {
				return i, false
			}
			i = skipSpace(b, end)
			if i >= len(b) || b[i] != ':' {
				return i, false
			}
			if i, ok = skipValue(b, skipSpace(b, i+1), depth+1); !ok {
				return i, false
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case '}':
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '[':
		if depth >= maxDepth {
			return i, false
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = skipValue(b, i, depth+1); !ok {
				return i, false
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case ']':
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || '0' <= c && c <= '9':
		return scanNumber(b, i)
	}
	return i, false
}

func literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanNumber scans an RFC 8259 number and checks that it fits a float64.
func scanNumber(b []byte, i int) (int, bool) {
	start := i
	fractional := false
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return i, false
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		fractional = true
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		fractional = true
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	// Up to 15 digits, an integer is exact in a float64; anything else goes
	// through the parser that encoding/json uses.
	if i-start <= 15 && !fractional {
		return i, true
	}
	if _, err := strconv.ParseFloat(string(b[start:i]), 64); err != nil {
		return i, false
	}
	return i, true
}

// plain marks the bytes a JSON string can hold as they are.
var plain = func() (t [256]bool) {
	for c := 0x20; c < len(t); c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString scans the string starting at the quote b[i] and returns the
// index just past its closing quote, and whether it has escapes.
func scanString(b []byte, i int) (end int, escaped, ok bool) {
	i++
	for i < len(b) {
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, escaped, true
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return i, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, ok := hex4(b, i+2)
				if !ok {
					return i, false, false
				}
				i += 6
				if !utf16.IsSurrogate(r) {
					continue
				}
				// Only a high surrogate followed by an escaped low one
				// makes a character; encoding/json would turn anything
				// else into U+FFFD, so refuse it rather than guess.
				if r >= 0xDC00 || i+1 >= len(b) || b[i] != '\\' || b[i+1] != 'u' {
					return i, false, false
				}
				r2, ok := hex4(b, i+2)
				if !ok || r2 < 0xDC00 || r2 > 0xDFFF {
					return i, false, false
				}
				i += 6
			default:
				return i, false, false
			}
		default: // a control character
			return i, false, false
		}
	}
	return i, false, false
}

func hex4(b []byte, i int) (rune, bool) {
	if len(b)-i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// unescape appends the unescaped form of s, the inside of a JSON string
// that scanString accepted, to dst.
func unescape(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		switch s[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, _ := hex4(s, i+2)
			if utf16.IsSurrogate(r) {
				r2, _ := hex4(s, i+8)
				r = utf16.DecodeRune(r, r2)
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
			i += 6
			continue
		default: // '"', '\\', '/'
			dst = append(dst, s[i+1])
		}
		i += 2
	}
	return dst
}

// Value accessors. They take the raw text of a value that parseObject
// accepted.

// isNull reports whether v is the literal null, which the claims treat as
// absent, as encoding/json does.
func isNull(v []byte) bool { return string(v) == "null" }

// stringValue returns v's string, or false if v is not a string.
func stringValue(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	in := v[1 : len(v)-1]
	for _, c := range in {
		if c == '\\' {
			return string(unescape(make([]byte, 0, len(in)), in)), true
		}
	}
	return string(in), true
}

// stringBytes is stringValue without a copy when v has no escapes; the
// result aliases v and must not outlive it.
func stringBytes(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	in := v[1 : len(v)-1]
	for _, c := range in {
		if c == '\\' {
			return unescape(make([]byte, 0, len(in)), in), true
		}
	}
	return in, true
}

// numberValue returns v's number, or false if v is not a number.
func numberValue(v []byte) (float64, bool) {
	if len(v) == 0 || (v[0] != '-' && !isDigit(v[0])) {
		return 0, false
	}
	if len(v) <= 15 {
		// The common case, a plain unsigned integer, without the parser.
		n := int64(0)
		for _, c := range v {
			if !isDigit(c) {
				goto parse
			}
			n = n*10 + int64(c-'0')
		}
		return float64(n), true
	}
parse:
	f, err := strconv.ParseFloat(string(v), 64)
	return f, err == nil
}

// elements appends the raw elements of the array v to dst, or returns
// false if v is not an array.
func elements(v []byte, dst [][]byte) ([][]byte, bool) {
	if len(v) < 2 || v[0] != '[' {
		return dst, false
	}
	i := skipSpace(v, 1)
	if v[i] == ']' {
		return dst, true
	}
	for {
		end, ok := skipValue(v, i, 1)
		if !ok {
			return dst, false
		}
		dst = append(dst, v[i:end])
		i = skipSpace(v, end)
		if i >= len(v) || v[i] != ',' {
			return dst, true
		}
		i = skipSpace(v, i+1)
	}
}
