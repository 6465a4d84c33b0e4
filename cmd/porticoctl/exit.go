package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// usageError is a command line porticoctl does not run: exit status 2.
// Cobra's own errors (an unknown command or flag, a bad flag value) are
// usage errors too.
type usageError struct {
	// msg is what is wrong; empty, the command's usage says it.
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// failure is a command that ran and did not do its work: a call refused
// or failed, a file that did not load. Exit status 1.
type failure struct{ err error }

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

func failf(format string, args ...any) error {
	return &failure{err: fmt.Errorf(format, args...)}
}

// exitCode is the exit status of a command that returned err.
func exitCode(err error) int {
	var f *failure
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &f):
		return exitFailed
	default:
		return exitUsage
	}
}

// report prints err, each of its errors if it joins several, after the
// command's name.
func report(w io.Writer, cmd string, err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			report(w, cmd, e)
		}
		return
	}
	fmt.Fprintf(w, "%s: %v\n", cmd, err)
}

// failed is the failure of a refused or failed call: its code and
// message, or each problem with its field path.
func failed(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return &failure{err: err}
	}
	var problems []string
	for _, d := range ce.Details() {
		m, derr := d.Value()
		if br, ok := m.(*errdetails.BadRequest); derr == nil && ok {
			for _, v := range br.GetFieldViolations() {
				problems = append(problems, "\n  "+v.GetField()+": "+v.GetDescription())
			}
		}
	}
	if len(problems) > 0 {
		return failf("refused (%s), %d problems:%s", ce.Code(), len(problems), strings.Join(problems, ""))
	}
	return failf("%s: %s", ce.Code(), ce.Message())
}
