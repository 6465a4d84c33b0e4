// Package router holds the gateway's compiled route table: New compiles a set of
// routes once, off the request path, into an immutable Table whose Match picks the
// route for a request without allocating.
//
// # Templates
//
// A route's Path is a google.api.http path template:
//
//	Template  = "/" Segments [ Verb ] ;
//	Segments  = Segment { "/" Segment } ;
//	Segment   = "*" | "**" | LITERAL | Variable ;
//	Variable  = "{" FieldPath [ "=" Segments ] "}" ;
//	FieldPath = IDENT { "." IDENT } ;
//	Verb      = ":" LITERAL ;
//
// {x} is short for {x=*}. A "**", bare or inside a variable, may only be the last
// segment. Variables do not nest and their names are unique within a template. A
// LITERAL is one or more bytes other than '/', '{', '}', '*', ':', '?', '#', space and
// control characters; an IDENT is a letter or '_' followed by letters, digits and '_'.
// The template "/" has no segment and is rejected: "/**" matches every path, "/" included.
// A gRPC method path such as "/acme.orders.v1.OrderService/GetOrder" is simply two
// literal segments.
//
// # Matching
//
// The request path is split at '/' after its leading slash, so "/" is one empty
// segment and "/a/" is "a" followed by an empty segment. Match looks for a route in
// the order below, each step nested in the one before it; the first route found wins.
//
//  1. Host groups, in order: the routes that list the request's host exactly; then the
//     routes with a wildcard host "*.suffix" whose suffix ends the host after at
//     least one byte, longest suffix first ("*.example.com" matches "eu.example.com" and
//     "a.b.example.com" but not "example.com"); then the routes that list no host.
//  2. Within a host group: the routes that list the request's method; for HEAD, if
//     none of those matched, the routes that list GET; then the routes that list no
//     method.
//  3. Verb: if the last segment of the request path holds a ':' followed by at least
//     one byte, the routes whose template ends with that verb are tried against the
//     path with ":verb" removed (the last ':' of the last segment is the separator).
//     Then the routes without a verb are tried against the full path, so "{id}" binds
//     "42:cancel" when no ":cancel" route matched.
//  4. Path: segment by segment, a literal beats a single-segment match ("*", "{x}",
//     or a "*" inside a variable such as "{name=shelves/*}"), which beats "**". When a
//     more specific branch fails deeper in the path, the next one is tried
//     (backtracking). "*" matches exactly one non-empty segment; "**" matches all the
//     remaining segments, zero or more, so "/a/**" matches "/a", "/a/" and "/a/b/c". A
//     template that ends where the path ends beats one whose "**" matches zero
//     segments. Literals compare bytewise, case-sensitively, against the raw path.
//  5. Headers: the routes that reach the same place in the path with the same shape
//     are ordered by their number of distinct header matches, most first, then by ID;
//     the first whose header matches all hold wins. If none holds, backtracking goes on.
//
// Put declaratively: within one host group, method set and verb, the winner is the
// matching route whose sequence of segment kinds (literal < single < "**", with the
// end of the path lowest) is lexicographically smallest, ties broken by more header
// matches and then by the smaller ID.
//
// A header match holds when some value of the named header satisfies it (Exact:
// equal; Prefix: starts with Value; Regex: the whole value matches; Present: the header
// has at least one value); Invert turns that around, so an inverted match also holds
// when the header is absent.
//
// If no route matches, Match reports MethodNotAllowed when some route that names its
// methods would match the host, path and headers under another method, and NotFound
// otherwise. Allowed lists those methods for an Allow header.
//
// # Compiling
//
// New rejects a route set with a *CompileError that lists every problem: duplicate
// IDs, invalid templates, hosts, methods and header matches, templates with more
// variables than Params holds, and ambiguous routes — two routes that share a host
// (or both list none), share a method (or both list none), have the same verb and the
// same path shape once variable names are ignored ("/a/{x}", "/a/{y=*}" and "/a/*"),
// and the same set of header matches. Routes that merely overlap ("/a/b" and
// "/a/{x}") are fine: precedence decides between them.
package router

import (
	"sort"
	"strconv"
	"strings"
)

// Route is one route to compile. New does not keep the slices of a Route.
type Route[V any] struct {
	// ID names the route; it must be unique and non-empty and is used in errors and
	// to break ties.
	ID string
	// Hosts are lowercase host names without port: exact ("api.example.com") or
	// wildcard ("*.example.com"). Empty means any host.
	Hosts []string
	// Methods are uppercase HTTP methods. Empty means any method.
	Methods []string
	// Path is a google.api.http path template such as "/v1/{name=shelves/*}:archive".
	Path string
	// Headers must all hold for the route to match.
	Headers []HeaderMatch
	// Value is the caller's payload, returned by Match.
	Value V
}

// HeaderMatch is a condition on one request header.
type HeaderMatch struct {
	// Name is the header name in any case; New canonicalises it.
	Name string
	// Kind says how Value is compared. The zero Kind is Exact.
	Kind MatchKind
	// Value is the string to compare with, or the RE2 expression for Regex. It is
	// ignored for Present.
	Value string
	// Invert makes the match hold when the header is absent or does not match.
	Invert bool
}

// MatchKind says how a HeaderMatch compares a header value.
type MatchKind uint8

const (
	// Exact holds when a value equals HeaderMatch.Value.
	Exact MatchKind = iota
	// Prefix holds when a value starts with HeaderMatch.Value.
	Prefix
	// Regex holds when a whole value matches the RE2 expression HeaderMatch.Value.
	Regex
	// Present holds when the header has at least one value.
	Present
)

// String returns the kind's name in lowercase.
func (k MatchKind) String() string {
	switch k {
	case Exact:
		return "exact"
	case Prefix:
		return "prefix"
	case Regex:
		return "regex"
	case Present:
		return "present"
	}
	return "MatchKind(" + strconv.Itoa(int(k)) + ")"
}

// Request is what Match looks at.
type Request struct {
	// Host is the lowercase host without port.
	Host string
	// Method is the HTTP method as sent.
	Method string
	// Path is the normalised, still percent-encoded path without query. A path that
	// does not start with '/' matches nothing.
	Path string
	// Header is shaped like http.Header: canonical keys. Match only reads it.
	Header map[string][]string
}

// CanonicalHost is the form of a Host header that Request.Host takes:
// lowercase, without the port, a trailing dot or an IPv6 literal's
// brackets. It allocates only when host has uppercase letters.
func CanonicalHost(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host = host[:i]
	}
	host = strings.TrimSuffix(host, ".")
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(host)
		}
	}
	return host
}

// Status is the outcome of Match. The zero Status is NotFound.
type Status uint8

const (
	// NotFound means no route matched and none would under another method.
	NotFound Status = iota
	// Matched means a route matched.
	Matched
	// MethodNotAllowed means no route matched, but one would under another method.
	MethodNotAllowed
)

// String returns the status's name.
func (s Status) String() string {
	switch s {
	case NotFound:
		return "NotFound"
	case Matched:
		return "Matched"
	case MethodNotAllowed:
		return "MethodNotAllowed"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Table is a compiled, immutable route table. Its methods are safe for concurrent
// use; to change routes, compile a new Table and swap it in.
type Table[V any] struct {
	c      core
	values []V
}

// New compiles routes into a Table. It returns a *CompileError listing every problem
// it found if the routes cannot be compiled as a whole.
func New[V any](routes []Route[V]) (*Table[V], error) {
	specs := make([]routeSpec, len(routes))
	values := make([]V, len(routes))
	for i := range routes {
		r := &routes[i]
		specs[i] = routeSpec{ID: r.ID, Hosts: r.Hosts, Methods: r.Methods, Path: r.Path, Headers: r.Headers}
		values[i] = r.Value
	}
	c, err := compile(specs)
	if err != nil {
		return nil, err
	}
	return &Table[V]{c: c, values: values}, nil
}

// Match returns the value of the route that matches req and Matched, or the zero V
// and NotFound or MethodNotAllowed. It resets params, if not nil, and on a match fills
// it with the route's variable bindings, which are substrings of req.Path.
//
// Match is safe for concurrent use, does not allocate, and does not panic, whatever
// req holds. (Regex header matches use the regexp package, which reuses its
// matching state and does not allocate once warm.) A nil Table matches nothing.
func (t *Table[V]) Match(req Request, params *Params) (V, Status) {
	if params != nil {
		params.Reset()
	}
	var zero V
	if t == nil {
		return zero, NotFound
	}
	r, path := t.c.match(&req)
	if r < 0 {
		if t.c.methodNotAllowed(&req) {
			return zero, MethodNotAllowed
		}
		return zero, NotFound
	}
	if ps := t.c.routes[r].params; params != nil && ps.len > 0 {
		params.bind(t.c.params[ps.off:ps.off+ps.len], t.c.strs, path)
	}
	return t.values[r], Matched
}

// Allowed returns the sorted methods under which some route that names its methods
// would match req's host, path and headers, with HEAD added when GET is there. Routes
// that list no method are not counted. It serves to build the Allow header of a 405
// response and may allocate.
func (t *Table[V]) Allowed(req Request) []string {
	if t == nil {
		return nil
	}
	ms := t.c.allowed(&req)
	if len(ms) == 0 {
		return nil
	}
	sort.Strings(ms)
	out := ms[:1]
	for _, m := range ms[1:] {
		if m != out[len(out)-1] {
			out = append(out, m)
		}
	}
	return out
}

// Len returns the number of routes in the table.
func (t *Table[V]) Len() int {
	if t == nil {
		return 0
	}
	return len(t.values)
}

// routeSpec is a Route without its payload, so that compiling is not generic.
type routeSpec struct {
	ID      string
	Hosts   []string
	Methods []string
	Path    string
	Headers []HeaderMatch
}
