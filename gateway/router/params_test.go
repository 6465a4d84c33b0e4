package router_test

import (
	"testing"

	"github.com/portico-gw/portico/gateway/router"
)

func TestParams(t *testing.T) {
	t.Parallel()
	tbl := mustNew(t, []router.Route[string]{
		rt("book", "GET /v1/{book.name=shelves/*/books/*}/{page}:read"),
	})
	var ps router.Params
	if _, st := tbl.Match(rq("GET /v1/shelves/s%201/books/b/p7:read"), &ps); st != router.Matched {
		t.Fatalf("Match = %v, want Matched", st)
	}
	if ps.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", ps.Len())
	}
	if name, value := ps.At(1); name != "page" || value != "p7" {
		t.Errorf("At(1) = %q, %q, want %q, %q", name, value, "page", "p7")
	}
	for _, c := range []struct {
		name, want string
		ok         bool
	}{
		{"book.name", "shelves/s%201/books/b", true},
		{"page", "p7", true},
		{"book", "", false},
		{"", "", false},
	} {
		if got, ok := ps.Get(c.name); got != c.want || ok != c.ok {
			t.Errorf("Get(%q) = %q, %v, want %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
	if got, want := ps.String(), "{book.name=shelves/s%201/books/b, page=p7}"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	ps.Reset()
	if _, ok := ps.Get("page"); ps.Len() != 0 || ok {
		t.Errorf("after Reset: Len() = %d, Get(page) found = %v, want 0, false", ps.Len(), ok)
	}
}

func TestParamsAtPanics(t *testing.T) {
	t.Parallel()
	var ps router.Params
	defer func() {
		if recover() == nil {
			t.Error("At(0) on empty Params did not panic")
		}
	}()
	ps.At(0)
}

func TestParamsSixteen(t *testing.T) {
	t.Parallel()
	tbl := mustNew(t, []router.Route[string]{rt("a", "GET /{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}/{j}/{k}/{l}/{m}/{n}/{o}/{p=**}")})
	var ps router.Params
	if _, st := tbl.Match(rq("GET /1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17"), &ps); st != router.Matched {
		t.Fatalf("Match = %v, want Matched", st)
	}
	if v, _ := ps.Get("p"); ps.Len() != router.MaxParams || v != "16/17" {
		t.Errorf("Len() = %d, Get(p) = %q, want %d, %q", ps.Len(), v, router.MaxParams, "16/17")
	}
}
