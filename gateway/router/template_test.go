package router_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/router"
)

// templateError compiles one route with path tmpl and returns its template error,
// or nil if New accepted it.
func templateError(t *testing.T, tmpl string) *router.TemplateError {
	t.Helper()
	_, err := router.New([]router.Route[string]{{ID: "r", Path: tmpl}})
	if err == nil {
		return nil
	}
	var te *router.TemplateError
	if !errors.As(err, &te) {
		t.Fatalf("New(%q) = %v, want a *TemplateError", tmpl, err)
	}
	return te
}

func TestTemplateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tmpl   string
		offset int
		reason string
	}{
		{"", 0, "empty template"},
		{"a/b", 0, "must start with '/'"},
		{"/", 1, "unexpected end, want segment"},
		{"//a", 1, `unexpected '/', want segment`},
		{"/a/", 3, "unexpected end, want segment"},
		{"/a//b", 3, `unexpected '/', want segment`},
		{"/a/b:", 5, "unexpected end, want verb"},
		{"/a/b:c:d", 6, `unexpected ':'`},
		{"/a:b/c", 4, `unexpected '/'`},
		{"/a/*b", 4, `unexpected 'b' after '*'`},
		{"/a/***", 5, `unexpected '*'`},
		{"/a/**/b", 3, "'**' must be the last segment"},
		{"/{x=**}/b", 4, "'**' must be the last segment"},
		{"/a/{", 4, "unexpected end, want identifier"},
		{"/a/{}", 4, `unexpected '}', want identifier`},
		{"/a/{1x}", 4, `unexpected '1', want identifier`},
		{"/a/{x.}", 6, `unexpected '}', want identifier`},
		{"/a/{x", 5, `unclosed variable "x" opened at offset 3`},
		{"/a/{x=}", 6, `unexpected '}', want segment`},
		{"/a/{x=b", 7, `unclosed variable "x"`},
		{"/a/{x=b:c}", 7, `unexpected ':' in variable "x"`},
		{"/a/{x={y}}", 6, "variables must not nest"},
		{"/a/{x}/{x}", 8, `duplicate variable "x"`},
		{"/a/}", 3, `unexpected '}', want segment`},
		{"/a/b}", 4, `unexpected '}'`},
		{"/a b", 2, `unexpected ' '`},
		{"/a?b", 2, `unexpected '?'`},
		{"/a#b", 2, `unexpected '#'`},
		{"/a/{x}{y}", 6, `unexpected '{'`},
		{"/a\x00", 2, `unexpected '\x00'`},
		// Segments no normalised request path has: they would never match.
		{"/a/./b", 3, `the segment "." is a dot segment`},
		{"/a/../admin", 3, `the segment ".." is a dot segment`},
		{"/..", 1, `the segment ".." is a dot segment`},
		{"/a/%2e%2e/admin", 3, `the segment "%2e%2e" is a dot segment`},
		{"/a/.%2E/b", 3, `the segment ".%2E" is a dot segment`},
		{"/a/%2E", 3, `the segment "%2E" is a dot segment`},
		{"/v1/{x=a/../b}", 9, `the segment ".." is a dot segment`},
		{"/a/%61dmin", 3, `write "%61" as "a"`},
		{"/a/x%7Ey", 4, `write "%7E" as "~"`},
		{"/a/b%2Fc", 4, `"%2F" never matches`},
		{"/a/b%5cc", 4, `"%5c" never matches`},
		{"/a/%00", 3, `"%00" never matches`},
		{"/a/b%3ac", 4, `write "%3a" as "%3A"`},
		{"/a/b%3", 4, "'%' must start a two-digit hex escape"},
		{"/a/b%zz", 4, "'%' must start a two-digit hex escape"},
		{"/é", 1, `the non-ASCII byte 0xC3 must be percent-encoded (%C3)`},
		{"/a\\b", 2, `byte '\\' must be percent-encoded (%5C)`},
		{"/a|b", 2, `byte '|' must be percent-encoded`},
	}
	for _, tt := range tests {
		te := templateError(t, tt.tmpl)
		if te == nil {
			t.Errorf("New(%q) = nil error, want offset %d: %s", tt.tmpl, tt.offset, tt.reason)
			continue
		}
		if te.Template != tt.tmpl || te.Offset != tt.offset || !strings.Contains(te.Reason, tt.reason) {
			t.Errorf("New(%q) = offset %d: %s, want offset %d: %s", tt.tmpl, te.Offset, te.Reason, tt.offset, tt.reason)
		}
	}
}

func TestTemplateValid(t *testing.T) {
	t.Parallel()
	for _, tmpl := range []string{
		"/a",
		"/*",
		"/**",
		"/{x}",
		"/{x=**}",
		"/{x=a/**}",
		"/v1/{name=shelves/*/books/*}",
		"/v1/{book.name=shelves/*}/{page_token}:list",
		"/v1/**:undelete",
		"/v1/a=b/c.d~e-f_g%3A%C3%A9!$&'()+,;@",
		"/a/.b/..c/...",
		"/acme.orders.v1.OrderService/GetOrder",
		"/{A_b.c_1}",
		"/%C3%A9",
	} {
		if te := templateError(t, tmpl); te != nil {
			t.Errorf("New(%q) = %v, want no error", tmpl, te)
		}
	}
}

func TestTemplateVariables(t *testing.T) {
	t.Parallel()
	got, err := router.TemplateVariables("/v1/{parent=shelves/*}/books/{book.id}:publish")
	if err != nil || len(got) != 2 || got[0] != "parent" || got[1] != "book.id" {
		t.Errorf("TemplateVariables = %q, %v; want [parent book.id]", got, err)
	}
	var terr *router.TemplateError
	if _, err := router.TemplateVariables("/v1/{x"); !errors.As(err, &terr) {
		t.Errorf("TemplateVariables of a bad template: %v, want a *TemplateError", err)
	}
}

func TestExamplePath(t *testing.T) {
	t.Parallel()
	tests := []struct{ tmpl, want string }{
		{"/v1/orders", "/v1/orders"},
		{"/v1/orders/{id}", "/v1/orders/probe"},
		{"/v1/orders/{id}/items", "/v1/orders/probe/items"},
		{"/v1/{name=shelves/*}", "/v1/shelves/probe"},
		{"/v1/{name=shelves/*/books/*}:archive", "/v1/shelves/probe/books/probe:archive"},
		{"/v1/*/x", "/v1/probe/x"},
		{"/files/**", "/files/probe"},
		{"/files/{rest=**}", "/files/probe"},
		{"/pkg.Svc/Method", "/pkg.Svc/Method"},
		{"/v1/{id}:cancel", "/v1/probe:cancel"},
	}
	for _, tt := range tests {
		got, err := router.ExamplePath(tt.tmpl, "probe")
		if err != nil || got != tt.want {
			t.Errorf("ExamplePath(%q) = %q, %v, want %q", tt.tmpl, got, err, tt.want)
			continue
		}
		// The path is one the template matches.
		tbl, err := router.New([]router.Route[string]{{ID: "r", Path: tt.tmpl, Value: "r"}})
		if err != nil {
			t.Fatal(err)
		}
		if v, st := tbl.Match(router.Request{Method: "GET", Path: got}, nil); st != router.Matched || v != "r" {
			t.Errorf("template %q does not match its example %q: %v", tt.tmpl, got, st)
		}
	}
	if _, err := router.ExamplePath("/a/{", "probe"); err == nil {
		t.Error(`ExamplePath("/a/{") = nil error, want a *TemplateError`)
	}
}
