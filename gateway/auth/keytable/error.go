package keytable

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/portico-gw/portico/gateway/apikey"
)

// Check's errors. Match them with errors.Is: a malformed key's error wraps
// ErrMalformed and the *apikey.Error that says why.
var (
	ErrMalformed = errors.New("keytable: malformed api key")
	ErrUnknown   = errors.New("keytable: unknown api key")
	ErrRevoked   = errors.New("keytable: api key revoked")
	ErrExpired   = errors.New("keytable: api key expired")
)

// malformedError is ErrMalformed with its cause. It holds a single pointer,
// so storing one in an error interface does not allocate.
type malformedError struct{ err *apikey.Error }

func malformed(err error) error {
	if e, ok := err.(*apikey.Error); ok {
		return malformedError{e}
	}
	return ErrMalformed // apikey.Parse returns only *apikey.Error
}

func (e malformedError) Error() string        { return ErrMalformed.Error() + ": " + e.err.Reason }
func (e malformedError) Is(target error) bool { return target == ErrMalformed }
func (e malformedError) Unwrap() error        { return e.err }

// BuildError is the error Build and Apply return: every problem found, in
// the order of the records or changes.
type BuildError struct {
	Problems []Problem
}

// maxListed bounds the problems Error spells out; Problems has them all.
const maxListed = 20

// Error lists the problems, one a line after a summary, up to 20.
func (e *BuildError) Error() string {
	var b strings.Builder
	b.WriteString("keytable: ")
	if len(e.Problems) == 1 {
		b.WriteString(e.Problems[0].Error())
		return b.String()
	}
	b.WriteString(strconv.Itoa(len(e.Problems)))
	b.WriteString(" problems:")
	for i := range min(len(e.Problems), maxListed) {
		b.WriteString("\n\t")
		b.WriteString(e.Problems[i].Error())
	}
	if more := len(e.Problems) - maxListed; more > 0 {
		fmt.Fprintf(&b, "\n\t… and %d more", more)
	}
	return b.String()
}

// ProblemKind is the category of a Problem.
type ProblemKind uint8

const (
	// NilRecord is a nil entry in the record list.
	NilRecord ProblemKind = iota + 1
	// InvalidHash is a sha256 that is not 32 bytes long.
	InvalidHash
	// MissingKeyID is a record without a key id.
	MissingKeyID
	// DuplicateKeyID is a key id already used by an earlier record
	// (Other), or, given to Apply, by another key of the table's overlay.
	DuplicateKeyID
	// DuplicateHash is a sha256 already held by an earlier record (Other).
	DuplicateHash
	// InvalidText is an id, plan or scope that is too long or holds a byte
	// that may not appear in an identity header: ids and plans must be
	// visible ASCII without spaces, scopes RFC 6749 scope tokens.
	InvalidText
	// InvalidStatus is a status other than active or revoked.
	InvalidStatus
	// InvalidPriority is a priority outside the Priority enum.
	InvalidPriority
	// InvalidNotAfter is a not_after that is not a valid timestamp.
	InvalidNotAfter
	// TooLarge is a table whose strings exceed 4 GiB.
	TooLarge
)

// Problem is one thing wrong with the records given to Build, or the
// changes given to Apply.
type Problem struct {
	Kind ProblemKind
	// Index is the record's position in the list (for Apply, the change's
	// in the changes), KeyID its key id.
	Index int
	KeyID string
	// Other is the position of the earlier record that a DuplicateKeyID or
	// DuplicateHash collides with; -1 for other kinds, and for a key id
	// that Apply finds in the table's overlay.
	Other int
	// Reason says what is wrong. It names key ids, never hash bytes.
	Reason string
}

// Error returns the problem as one line: where, then what.
func (p *Problem) Error() string {
	if p.KeyID == "" {
		return fmt.Sprintf("keys[%d]: %s", p.Index, p.Reason)
	}
	return fmt.Sprintf("keys[%d] (key %q): %s", p.Index, p.KeyID, p.Reason)
}
