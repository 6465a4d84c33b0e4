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
		"/v1/a=b/c.d~e-f_g%2F!$&'()+,;@",
		"/acme.orders.v1.OrderService/GetOrder",
		"/{A_b.c_1}",
		"/é",
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
