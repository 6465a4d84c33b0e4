package router

import (
	"strconv"
	"strings"
)

// CompileError is the error New returns for a route set it cannot compile. It lists
// every problem found rather than the first: the problems of single routes in the
// order of the routes, then the ambiguous pairs.
type CompileError struct {
	Problems []*Problem
}

// Error lists the problems, one a line after a summary.
func (e *CompileError) Error() string {
	var b strings.Builder
	b.WriteString("router: ")
	if len(e.Problems) == 1 {
		b.WriteString(e.Problems[0].Error())
		return b.String()
	}
	b.WriteString(strconv.Itoa(len(e.Problems)))
	b.WriteString(" problems:")
	for _, p := range e.Problems {
		b.WriteString("\n\t")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap returns the problems, so that errors.As finds a *Problem or the
// *TemplateError behind one.
func (e *CompileError) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	return errs
}

// ProblemKind is the category of a Problem.
type ProblemKind uint8

const (
	// MissingID is a route with an empty ID.
	MissingID ProblemKind = iota + 1
	// DuplicateID is two routes with the same ID.
	DuplicateID
	// InvalidTemplate is a path template that does not parse; Err is a *TemplateError.
	InvalidTemplate
	// TooManyVariables is a template with more than MaxParams variables.
	TooManyVariables
	// InvalidHost is a host that is empty, not lowercase, or a malformed wildcard.
	InvalidHost
	// InvalidMethod is a method that is empty, not a token, or not uppercase.
	InvalidMethod
	// InvalidHeader is a header match with a bad name, kind or regular expression.
	InvalidHeader
	// Ambiguous is two routes that would match the same requests with equal precedence.
	Ambiguous
)

// String returns the kind's name.
func (k ProblemKind) String() string {
	switch k {
	case MissingID:
		return "MissingID"
	case DuplicateID:
		return "DuplicateID"
	case InvalidTemplate:
		return "InvalidTemplate"
	case TooManyVariables:
		return "TooManyVariables"
	case InvalidHost:
		return "InvalidHost"
	case InvalidMethod:
		return "InvalidMethod"
	case InvalidHeader:
		return "InvalidHeader"
	case Ambiguous:
		return "Ambiguous"
	}
	return "ProblemKind(" + strconv.Itoa(int(k)) + ")"
}

// Problem is one reason New rejected a route set.
type Problem struct {
	Kind ProblemKind
	// Routes are the IDs of the routes concerned: two for DuplicateID (the same ID
	// twice) and Ambiguous, one otherwise.
	Routes []string
	// Indexes are the positions of those routes in the slice given to New.
	Indexes []int
	// Message says what is wrong, naming the routes.
	Message string
	// Err is the underlying error, if any, such as a *TemplateError.
	Err error
}

// Error returns p.Message.
func (p *Problem) Error() string { return p.Message }

// Unwrap returns p.Err.
func (p *Problem) Unwrap() error { return p.Err }
