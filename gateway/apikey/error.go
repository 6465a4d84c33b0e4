package apikey

import "errors"

// The categories of Parse's errors, for errors.Is.
var (
	// ErrFormat is a string that is not shaped like a key: wrong length,
	// unknown prefix, or a byte outside the base62 alphabet.
	ErrFormat = errors.New("apikey: malformed key")
	// ErrChecksum is a key-shaped string whose checksum does not match:
	// almost always a mistyped or altered key.
	ErrChecksum = errors.New("apikey: checksum mismatch")
)

// Error is the error Parse returns. It says what is wrong with a key but
// never holds any part of it, so it may be logged and shown to the caller.
// Parse returns shared values: do not modify one.
type Error struct {
	// Reason is a short phrase: "wrong length", "unknown prefix",
	// "character outside [0-9A-Za-z]" or "checksum mismatch".
	Reason string
	kind   error
}

// Error returns "apikey: " and the reason.
func (e *Error) Error() string { return "apikey: " + e.Reason }

// Unwrap returns ErrFormat or ErrChecksum.
func (e *Error) Unwrap() error { return e.kind }

// Parse's errors, allocated once so that Parse never allocates.
var (
	errLength   = &Error{Reason: "wrong length", kind: ErrFormat}
	errPrefix   = &Error{Reason: "unknown prefix", kind: ErrFormat}
	errAlphabet = &Error{Reason: "character outside [0-9A-Za-z]", kind: ErrFormat}
	errChecksum = &Error{Reason: "checksum mismatch", kind: ErrChecksum}
)
