package router_test

import (
	"errors"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/router"
)

// problems compiles routes and returns the problems New reports, failing the test if
// the error is not a *CompileError.
func problems(t *testing.T, routes []router.Route[string]) []*router.Problem {
	t.Helper()
	tbl, err := router.New(routes)
	if err == nil {
		if tbl == nil {
			t.Fatal("New returned neither a table nor an error")
		}
		return nil
	}
	var ce *router.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("New: error %T %v is not a *CompileError", err, err)
	}
	if len(ce.Problems) == 0 {
		t.Fatalf("New: *CompileError without problems: %v", err)
	}
	return ce.Problems
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	ver := func(v string) router.HeaderMatch { return router.HeaderMatch{Name: "X-Version", Value: v} }
	tests := []struct {
		name    string
		routes  []router.Route[string]
		kind    router.ProblemKind
		ids     []string
		message string // a substring of the problem's message
	}{
		{
			name:    "duplicate id",
			routes:  []router.Route[string]{rt("a", "GET /a"), rt("b", "GET /b"), rt("a", "GET /c")},
			kind:    router.DuplicateID,
			ids:     []string{"a", "a"},
			message: `routes #0 and #2 have the same id "a"`,
		},
		{
			name:    "missing id",
			routes:  []router.Route[string]{rt("", "GET /a")},
			kind:    router.MissingID,
			ids:     []string{""},
			message: "route #0 has no id",
		},
		{
			name:    "template",
			routes:  []router.Route[string]{rt("a", "GET /a/{x")},
			kind:    router.InvalidTemplate,
			ids:     []string{"a"},
			message: `route "a": invalid path template "/a/{x" at offset 5`,
		},
		{
			name: "variable names ignored",
			routes: []router.Route[string]{
				rt("orders-get", "GET /v1/orders/{id}", "api.example.com"),
				rt("orders-get-v2", "GET /v1/orders/{order_id}", "api.example.com"),
			},
			kind:    router.Ambiguous,
			ids:     []string{"orders-get", "orders-get-v2"},
			message: `routes "orders-get" and "orders-get-v2" are ambiguous: same host "api.example.com", method GET and path shape /v1/orders/*`,
		},
		{
			name:    "variable and star",
			routes:  []router.Route[string]{rt("a", "/a/{x=*}"), rt("b", "/a/*")},
			kind:    router.Ambiguous,
			ids:     []string{"a", "b"},
			message: "same host (any), method (any) and path shape /a/*",
		},
		{
			name:    "multi-segment variable and literals",
			routes:  []router.Route[string]{rt("a", "GET /v1/{name=shelves/*}:get"), rt("b", "GET /v1/shelves/{id}:get")},
			kind:    router.Ambiguous,
			ids:     []string{"a", "b"},
			message: "path shape /v1/shelves/*:get",
		},
		{
			name:    "double wildcard",
			routes:  []router.Route[string]{rt("a", "GET /a/**"), rt("b", "GET /a/{rest=**}")},
			kind:    router.Ambiguous,
			ids:     []string{"a", "b"},
			message: "path shape /a/**",
		},
		{
			name: "overlapping host and method lists",
			routes: []router.Route[string]{
				rt("a", "GET,POST /a", "x.test", "y.test"),
				rt("b", "PUT,POST /a", "y.test", "z.test"),
			},
			kind:    router.Ambiguous,
			ids:     []string{"a", "b"},
			message: `same host "y.test", method POST`,
		},
		{
			name: "same wildcard host",
			routes: []router.Route[string]{
				rt("a", "GET /a", "*.example.com"),
				rt("b", "GET /a", "*.example.com"),
			},
			kind:    router.Ambiguous,
			ids:     []string{"a", "b"},
			message: `same host "*.example.com"`,
		},
		{
			name: "same header set in another order and case",
			routes: []router.Route[string]{
				hdr(rt("a", "GET /a"), ver("2"), router.HeaderMatch{Name: "x-beta", Kind: router.Present, Value: "ignored"}),
				hdr(rt("b", "GET /a"), router.HeaderMatch{Name: "X-Beta", Kind: router.Present}, ver("2"), ver("2")),
			},
			kind:    router.Ambiguous,
			ids:     []string{"a", "b"},
			message: `and header matches [X-Beta present, X-Version exact "2"]`,
		},
		{
			name: "too many variables",
			routes: []router.Route[string]{
				rt("a", "GET /{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}/{j}/{k}/{l}/{m}/{n}/{o}/{p}/{q}"),
			},
			kind:    router.TooManyVariables,
			ids:     []string{"a"},
			message: "has 17 variables",
		},
		{
			name:    "regex",
			routes:  []router.Route[string]{hdr(rt("a", "GET /a"), router.HeaderMatch{Name: "X-A", Kind: router.Regex, Value: "a("})},
			kind:    router.InvalidHeader,
			ids:     []string{"a"},
			message: `route "a": header match 0 (X-A): invalid regex`,
		},
		{
			name:    "header name",
			routes:  []router.Route[string]{hdr(rt("a", "GET /a"), router.HeaderMatch{Name: "X A"})},
			kind:    router.InvalidHeader,
			ids:     []string{"a"},
			message: `invalid header name "X A"`,
		},
		{
			name:    "empty header name",
			routes:  []router.Route[string]{hdr(rt("a", "GET /a"), router.HeaderMatch{})},
			kind:    router.InvalidHeader,
			ids:     []string{"a"},
			message: `empty header name`,
		},
		{
			name:    "header kind",
			routes:  []router.Route[string]{hdr(rt("a", "GET /a"), router.HeaderMatch{Name: "X-A", Kind: 9})},
			kind:    router.InvalidHeader,
			ids:     []string{"a"},
			message: `unknown match kind 9`,
		},
		{
			name:    "uppercase host",
			routes:  []router.Route[string]{rt("a", "GET /a", "API.example.com")},
			kind:    router.InvalidHost,
			ids:     []string{"a"},
			message: `host "API.example.com" is not lowercase`,
		},
		{
			name:    "inner wildcard host",
			routes:  []router.Route[string]{rt("a", "GET /a", "api.*.com")},
			kind:    router.InvalidHost,
			ids:     []string{"a"},
			message: `host "api.*.com" has a '*'`,
		},
		{
			name:    "bare wildcard host",
			routes:  []router.Route[string]{rt("a", "GET /a", "*")},
			kind:    router.InvalidHost,
			ids:     []string{"a"},
			message: `host "*" has a '*'`,
		},
		{
			name:    "empty host",
			routes:  []router.Route[string]{rt("a", "GET /a", "")},
			kind:    router.InvalidHost,
			ids:     []string{"a"},
			message: `host "" is empty`,
		},
		{
			name:    "lowercase method",
			routes:  []router.Route[string]{rt("a", "get /a")},
			kind:    router.InvalidMethod,
			ids:     []string{"a"},
			message: `method "get" is not uppercase`,
		},
		{
			name:    "empty method",
			routes:  []router.Route[string]{{ID: "a", Methods: []string{""}, Path: "/a"}},
			kind:    router.InvalidMethod,
			ids:     []string{"a"},
			message: `method "" is not a token`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ps := problems(t, tt.routes)
			if len(ps) != 1 {
				t.Fatalf("New(%s) problems = %q, want one %v", tt.name, ps, tt.kind)
			}
			p := ps[0]
			if p.Kind != tt.kind || !slices.Equal(p.Routes, tt.ids) || !strings.Contains(p.Message, tt.message) {
				t.Errorf("New(%s) problem = %v %q: %q, want %v %q: ...%q...", tt.name, p.Kind, p.Routes, p.Message, tt.kind, tt.ids, tt.message)
			}
		})
	}
}

func TestNewAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		routes []router.Route[string]
	}{
		{"literal and variable", []router.Route[string]{rt("a", "GET /a/b"), rt("b", "GET /a/{x}")}},
		{"variable and double wildcard", []router.Route[string]{rt("a", "GET /a/{x}"), rt("b", "GET /a/**")}},
		{"end and double wildcard", []router.Route[string]{rt("a", "GET /a"), rt("b", "GET /a/**")}},
		{"different verbs", []router.Route[string]{rt("a", "POST /a/{x}:cancel"), rt("b", "POST /a/{x}:undo"), rt("c", "POST /a/{x}")}},
		{"different methods", []router.Route[string]{rt("a", "GET /a"), rt("b", "POST /a")}},
		{"method and any method", []router.Route[string]{rt("a", "GET /a"), rt("b", "/a")}},
		{"different hosts", []router.Route[string]{rt("a", "GET /a", "a.test"), rt("b", "GET /a", "b.test")}},
		{"host and any host", []router.Route[string]{rt("a", "GET /a", "a.test"), rt("b", "GET /a")}},
		{"exact and wildcard host", []router.Route[string]{rt("a", "GET /a", "a.test"), rt("b", "GET /a", "*.a.test")}},
		{"different headers", []router.Route[string]{
			hdr(rt("a", "GET /a"), router.HeaderMatch{Name: "X-V", Value: "1"}),
			hdr(rt("b", "GET /a"), router.HeaderMatch{Name: "X-V", Value: "1", Invert: true}),
			hdr(rt("c", "GET /a"), router.HeaderMatch{Name: "X-V", Kind: router.Prefix, Value: "1"}),
			rt("d", "GET /a"),
		}},
		{"duplicates within a route", []router.Route[string]{rt("a", "GET,GET /a", "a.test", "a.test")}},
		{"sixteen variables", []router.Route[string]{rt("a", "GET /{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}/{j}/{k}/{l}/{m}/{n}/{o}/{p}")}},
		{"no routes", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := router.New(tt.routes); err != nil {
				t.Errorf("New(%s) = %v, want no error", tt.name, err)
			}
		})
	}
}

// TestNewListsEveryProblem checks that one error reports all problems, each naming
// its routes, and that errors.As reaches the template error inside.
func TestNewListsEveryProblem(t *testing.T) {
	t.Parallel()
	routes := []router.Route[string]{
		rt("list", "GET /v1/orders"),
		rt("get", "GET /v1/orders/{id}"),
		rt("get-again", "GET /v1/orders/{order}"),
		rt("broken", "GET /v1/{x=**}/tail"),
		rt("list", "POST /v1/orders"),
		hdr(rt("regex", "GET /r"), router.HeaderMatch{Name: "X-A", Kind: router.Regex, Value: "[z-a]"}),
		rt("any-1", "/**"),
		rt("any-2", "/{rest=**}"),
		rt("bad-host", "GET /h", "Example.com"),
	}
	_, err := router.New(routes)
	if err == nil {
		t.Fatal("New = nil error, want problems")
	}
	var ce *router.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("New: error %T is not a *CompileError", err)
	}
	type summary struct {
		kind router.ProblemKind
		ids  string
	}
	var got []summary
	for _, p := range ce.Problems {
		got = append(got, summary{p.Kind, strings.Join(p.Routes, ",")})
		for _, id := range p.Routes {
			if !strings.Contains(p.Message, `"`+id+`"`) {
				t.Errorf("problem %q does not name route %q", p.Message, id)
			}
		}
	}
	want := []summary{
		{router.InvalidTemplate, "broken"},
		{router.DuplicateID, "list,list"},
		{router.InvalidHeader, "regex"},
		{router.InvalidHost, "bad-host"},
		{router.Ambiguous, "get,get-again"},
		{router.Ambiguous, "any-1,any-2"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("New problems = %v, want %v", got, want)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "router: 6 problems:\n\t") || strings.Count(msg, "\n\t") != 6 {
		t.Errorf("New error = %q, want a summary line and six indented problems", msg)
	}
	var te *router.TemplateError
	if !errors.As(err, &te) || te.Template != "/v1/{x=**}/tail" || te.Offset != 7 {
		t.Errorf("errors.As(*TemplateError) = %+v, want the template of route broken at offset 7", te)
	}
	var se *syntax.Error
	if !errors.As(err, &se) || se.Code != syntax.ErrInvalidCharRange {
		t.Errorf("errors.As(*syntax.Error) = %v, want the regex error", se)
	}
}

func TestNewSingleProblemMessage(t *testing.T) {
	t.Parallel()
	_, err := router.New([]router.Route[string]{rt("a", "GET a")})
	const want = `router: route "a": invalid path template "a" at offset 0: must start with '/'`
	if err == nil || err.Error() != want {
		t.Errorf("New error = %v, want %s", err, want)
	}
}
