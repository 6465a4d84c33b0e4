package telemetry

import (
	"encoding/hex"
	"math/rand/v2"
)

// TraceContext is a W3C Trace Context traceparent
// (https://www.w3.org/TR/trace-context/): the trace id shared by every hop,
// the id of the calling span, and the trace flags.
type TraceContext struct {
	TraceID  [16]byte
	ParentID [8]byte
	Flags    byte
}

// FlagSampled is the sampled bit of the trace flags.
const FlagSampled = 0x01

// traceparentLen is the length of a version 00 traceparent.
const traceparentLen = 55

// ParseTraceparent parses a traceparent header value. It accepts version 00
// exactly, and later versions by their version-00 prefix as the spec asks
// (a longer value continuing with '-'). Version ff, all-zero ids and
// malformed values are rejected.
func ParseTraceparent(s string) (TraceContext, bool) {
	var tc TraceContext
	if len(s) < traceparentLen {
		return tc, false
	}
	version, ok := hexByte(s[0], s[1])
	if !ok || version == 0xff || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return tc, false
	}
	if version == 0 && len(s) != traceparentLen {
		return tc, false
	}
	if version != 0 && len(s) > traceparentLen && s[traceparentLen] != '-' {
		return tc, false
	}
	if !decodeLowerHex(tc.TraceID[:], s[3:35]) || !decodeLowerHex(tc.ParentID[:], s[36:52]) {
		return tc, false
	}
	flags, ok := hexByte(s[53], s[54])
	if !ok {
		return tc, false
	}
	tc.Flags = flags
	if tc.TraceID == ([16]byte{}) || tc.ParentID == ([8]byte{}) {
		return tc, false
	}
	return tc, true
}

// NewTrace starts a trace: random trace and span ids.
func NewTrace(sampled bool) TraceContext {
	var tc TraceContext
	putUint64(tc.TraceID[:8], rand.Uint64())
	putUint64(tc.TraceID[8:], rand.Uint64()|1) // never all zero
	tc.ParentID = newSpanID()
	if sampled {
		tc.Flags = FlagSampled
	}
	return tc
}

// Child is the context this hop sends onward: the same trace, the gateway's
// own span id as the parent, the same flags.
func (tc TraceContext) Child() TraceContext {
	tc.ParentID = newSpanID()
	return tc
}

// Sampled reports whether the sampled flag is set.
func (tc TraceContext) Sampled() bool { return tc.Flags&FlagSampled != 0 }

// TraceIDString is the trace id as 32 lowercase hex digits.
func (tc TraceContext) TraceIDString() string { return hex.EncodeToString(tc.TraceID[:]) }

// String formats tc as a version 00 traceparent value.
func (tc TraceContext) String() string {
	var b [traceparentLen]byte
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tc.TraceID[:])
	b[35] = '-'
	hex.Encode(b[36:52], tc.ParentID[:])
	b[52] = '-'
	const digits = "0123456789abcdef"
	b[53] = digits[tc.Flags>>4]
	b[54] = digits[tc.Flags&0xF]
	return string(b[:])
}

func newSpanID() [8]byte {
	var id [8]byte
	putUint64(id[:], rand.Uint64()|1)
	return id
}

func decodeLowerHex(dst []byte, s string) bool {
	for i := range dst {
		b, ok := hexByte(s[2*i], s[2*i+1])
		if !ok {
			return false
		}
		dst[i] = b
	}
	return true
}

// hexByte decodes two lowercase hex digits; the spec forbids uppercase.
func hexByte(hi, lo byte) (byte, bool) {
	h, ok1 := lowerHexVal(hi)
	l, ok2 := lowerHexVal(lo)
	return h<<4 | l, ok1 && ok2
}

func lowerHexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
