package telemetry

import (
	"encoding/hex"
	"math/rand/v2"
)

// MaxRequestIDLen bounds an accepted client-sent request id.
const MaxRequestIDLen = 128

// ValidRequestID reports whether id is a well-formed request id a client may
// choose: 1 to 128 characters of letters, digits and "-_.:+/=" (enough for
// UUIDs, ULIDs and base64 ids, nothing that can break a log line or header).
func ValidRequestID(id string) bool {
	if len(id) == 0 || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '+', c == '/', c == '=':
		default:
			return false
		}
	}
	return true
}

// NewRequestID returns a fresh 128-bit random id as 32 lowercase hex digits.
// It is unique, not secret: it uses the runtime's fast random source.
func NewRequestID() string {
	var b [16]byte
	putUint64(b[:8], rand.Uint64())
	putUint64(b[8:], rand.Uint64())
	var out [32]byte
	hex.Encode(out[:], b[:])
	return string(out[:])
}

// RequestID returns incoming when it is a valid request id and a new one
// otherwise.
func RequestID(incoming string) string {
	if ValidRequestID(incoming) {
		return incoming
	}
	return NewRequestID()
}

func putUint64(b []byte, v uint64) {
	_ = b[7]
	b[0] = byte(v >> 56)
	b[1] = byte(v >> 48)
	b[2] = byte(v >> 40)
	b[3] = byte(v >> 32)
	b[4] = byte(v >> 24)
	b[5] = byte(v >> 16)
	b[6] = byte(v >> 8)
	b[7] = byte(v)
}
