package snapshot

import (
	"strconv"
	"strings"
)

// Error is a rejected snapshot. It lists every problem found, not just the
// first, each with the path of the offending field, so one round trip tells
// a team everything to fix.
type Error struct {
	Violations []Violation
}

// Violation is one problem: Path is a field path in the source config
// ("routes[3].cluster"), empty for the snapshot as a whole.
type Violation struct {
	Path    string
	Message string
}

func (v Violation) String() string {
	if v.Path == "" {
		return v.Message
	}
	return v.Path + ": " + v.Message
}

// maxListed bounds the violations Error spells out; Violations has all.
const maxListed = 20

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("snapshot rejected: ")
	if len(e.Violations) != 1 {
		b.WriteString(strconv.Itoa(len(e.Violations)))
		b.WriteString(" problems: ")
	}
	for i, v := range e.Violations {
		if i == maxListed {
			b.WriteString("; and ")
			b.WriteString(strconv.Itoa(len(e.Violations) - maxListed))
			b.WriteString(" more")
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(v.String())
	}
	return b.String()
}

func (e *Error) add(path, msg string) {
	e.Violations = append(e.Violations, Violation{Path: path, Message: msg})
}
