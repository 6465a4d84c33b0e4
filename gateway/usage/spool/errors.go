package spool

import (
	"errors"
	"fmt"
)

var (
	// ErrFull is returned by Append when the record would take the spool
	// past Options.MaxBytes. Nothing was written: the caller keeps the
	// window and tries again after a Trim has freed space.
	ErrFull = errors.New("spool full")

	// ErrNotFound is returned by Get for a sequence number that was never
	// appended or has been trimmed.
	ErrNotFound = errors.New("record not found")

	// ErrOutOfOrder is returned by Append for a sequence number that is not
	// greater than Last.
	ErrOutOfOrder = errors.New("sequence number not increasing")

	// ErrTooLarge is returned by Append for a payload over MaxPayload.
	ErrTooLarge = errors.New("payload too large")

	// ErrClosed is returned by every method but Close after Close.
	ErrClosed = errors.New("spool closed")

	// ErrLocked is returned by Open when another Spool, in this process or
	// another, has the directory open.
	ErrLocked = errors.New("spool directory in use")
)

// CorruptError reports a record that does not check out: returned by Open
// for damage anywhere but the tail of the last segment, and by Get and Scan
// for a record that changed on disk after Open read it.
type CorruptError struct {
	File   string // path of the segment file
	Offset int64  // where the record starts in the file
	Reason string // what was wrong, such as "bad crc"
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("spool: %s at offset %d: %s", e.File, e.Offset, e.Reason)
}
