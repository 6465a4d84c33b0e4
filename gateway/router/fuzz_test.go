package router_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/router"
)

// FuzzTemplate checks that any template either fails with a *TemplateError that
// says where, or compiles into a route that matches a path built from it, binding
// what the reference reader expects.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{
		"/a", "/", "", "a", "/**", "/a/**", "/{x}", "/{x=**}", "/{x=a/**}:v", "/a/{b.c=d/*/e/*}/f:g",
		"/a/{x", "/a/{x=}", "/a/{x={y}}", "/a/**/b", "/{x}/{x}", "/a:b:c", "/a/*b", "/%2F/é/\x00",
		"/acme.orders.v1.OrderService/GetOrder", "/v1/{name=projects/*/locations/*}:cancel",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tmpl string) {
		tbl, err := router.New([]router.Route[string]{{ID: "r", Path: tmpl, Value: "r"}})
		if err != nil {
			var ce *router.CompileError
			if !errors.As(err, &ce) || len(ce.Problems) != 1 {
				t.Fatalf("New(%q) = %v, want a *CompileError with one problem", tmpl, err)
			}
			p := ce.Problems[0]
			if p.Kind == router.TooManyVariables {
				return
			}
			var te *router.TemplateError
			if p.Kind != router.InvalidTemplate || !errors.As(err, &te) {
				t.Fatalf("New(%q) = %v, want a *TemplateError", tmpl, err)
			}
			if te.Template != tmpl || te.Offset < 0 || te.Offset > len(tmpl) || te.Reason == "" {
				t.Fatalf("New(%q) = %+v, want the template, an offset within it and a reason", tmpl, te)
			}
			return
		}
		// Build a path the template must match: literals as they are, "*" as "x",
		// "**" as "y/z", and the verb on the end.
		ref := refParse(tmpl)
		var segs []string
		for _, s := range ref.segs {
			switch s.kind {
			case refLiteral:
				segs = append(segs, s.lit)
			case refSingle:
				segs = append(segs, "x")
			case refMulti:
				segs = append(segs, "y", "z")
			}
		}
		path := "/" + strings.Join(segs, "/")
		if ref.verb != "" {
			path += ":" + ref.verb
		}
		req := router.Request{Method: "GET", Path: path}
		var ps router.Params
		if got, st := tbl.Match(req, &ps); got != "r" || st != router.Matched {
			t.Fatalf("template %q: Match(%q) = %q, %v, want r, Matched", tmpl, path, got, st)
		}
		_, wantParams, _ := ref.match(segs)
		checkParams(t, tmpl, path, &ps, wantParams)
	})
}

func checkParams(t *testing.T, what, path string, ps *router.Params, want [][2]string) {
	t.Helper()
	var got [][2]string
	for i := 0; i < ps.Len(); i++ {
		name, value := ps.At(i)
		got = append(got, [2]string{name, value})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: Match(%q) params = %q, want %q", what, path, got, want)
	}
}

// FuzzMatch builds route sets and requests from a small alphabet, so that routes
// collide and overlap, and checks New and Match against the reference.
func FuzzMatch(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 32; i++ {
		b := make([]byte, 16+rng.IntN(240))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		f.Add(b)
	}
	f.Fuzz(checkAgainstReference)
}

// TestMatchAgainstReference runs the FuzzMatch check over many generated route sets
// in every test run, not only when fuzzing.
func TestMatchAgainstReference(t *testing.T) {
	t.Parallel()
	n := 3000
	if testing.Short() {
		n = 300
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < n; i++ {
		b := make([]byte, 16+rng.IntN(400))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		checkAgainstReference(t, b)
		if t.Failed() {
			t.Fatalf("failing input: %q", b)
		}
	}
}

// choices draws small numbers from fuzz input, and zeros once it is used up.
type choices []byte

func (c *choices) n(k int) int {
	if len(*c) == 0 {
		return 0
	}
	v := int((*c)[0]) % k
	*c = (*c)[1:]
	return v
}

func pickOf[T any](c *choices, xs ...T) T { return xs[c.n(len(xs))] }

var (
	fuzzHosts   = []string{"a.test", "*.a.test", "b.a.test", "*.b.a.test", "c.test"}
	fuzzMethods = []string{"GET", "HEAD", "POST", "DELETE"}
	fuzzHeaders = []router.HeaderMatch{
		{Name: "X-A", Value: "1"},
		{Name: "x-a", Value: "1"},
		{Name: "X-A", Kind: router.Prefix, Value: "1"},
		{Name: "X-A", Kind: router.Regex, Value: "[0-9]"},
		{Name: "X-A", Value: "1", Invert: true},
		{Name: "X-B", Kind: router.Present},
		{Name: "X-B", Kind: router.Present, Invert: true},
	}
	fuzzReqHosts    = []string{"a.test", "b.a.test", "c.b.a.test", "x.a.test", "c.test", "", ".a.test", "a.b.a.test"}
	fuzzReqMethods  = []string{"GET", "HEAD", "POST", "DELETE", "PUT"}
	fuzzReqSegments = []string{"a", "b", "c", "", "a:x", "b:y", ":x", "q", "c:", "a:y"}
)

// genRoutes draws a route set whose templates are all valid.
func genRoutes(c *choices) []router.Route[string] {
	routes := make([]router.Route[string], 1+c.n(10))
	for i := range routes {
		id := fmt.Sprintf("r%02d", i)
		r := router.Route[string]{ID: id, Value: id}
		for k := c.n(3); k > 0; k-- {
			r.Hosts = append(r.Hosts, pickOf(c, fuzzHosts...))
		}
		for k := c.n(3); k > 0; k-- {
			r.Methods = append(r.Methods, pickOf(c, fuzzMethods...))
		}
		var b strings.Builder
		nseg := 1 + c.n(4)
	segments:
		for k := 0; k < nseg; k++ {
			b.WriteByte('/')
			switch c.n(11) {
			case 0, 1:
				b.WriteString("a")
			case 2:
				b.WriteString("b")
			case 3:
				b.WriteString("c")
			case 4:
				b.WriteString("*")
			case 5:
				fmt.Fprintf(&b, "{v%d}", k)
			case 6:
				fmt.Fprintf(&b, "{v%d=a/*}", k)
			case 7:
				fmt.Fprintf(&b, "{v%d=*/b}", k)
			case 8:
				b.WriteString("**")
				break segments
			case 9:
				fmt.Fprintf(&b, "{v%d=**}", k)
				break segments
			case 10:
				fmt.Fprintf(&b, "{v%d=a/**}", k)
				break segments
			}
		}
		b.WriteString(pickOf(c, "", "", ":x", ":y"))
		r.Path = b.String()
		for k := c.n(3); k > 0; k-- {
			r.Headers = append(r.Headers, pickOf(c, fuzzHeaders...))
		}
		routes[i] = r
	}
	return routes
}

func genRequest(c *choices) router.Request {
	req := router.Request{
		Host:   pickOf(c, fuzzReqHosts...),
		Method: pickOf(c, fuzzReqMethods...),
		Header: map[string][]string{},
	}
	var b strings.Builder
	for k := c.n(6); k > 0; k-- {
		b.WriteByte('/')
		b.WriteString(pickOf(c, fuzzReqSegments...))
	}
	req.Path = b.String()
	switch c.n(8) {
	case 0:
		req.Path = "/"
	case 1:
		req.Path = strings.TrimPrefix(req.Path, "/")
	}
	switch c.n(5) {
	case 1:
		req.Header["X-A"] = []string{"1"}
	case 2:
		req.Header["X-A"] = []string{"12"}
	case 3:
		req.Header["X-A"] = []string{"2", "1"}
	case 4:
		req.Header["X-A"] = []string{}
	}
	switch c.n(3) {
	case 1:
		req.Header["X-B"] = []string{""}
	case 2:
		req.Header["X-B"] = []string{}
	}
	return req
}

func checkAgainstReference(t *testing.T, data []byte) {
	c := choices(data)
	routes := genRoutes(&c)
	ref := newRefRoutes(routes)

	_, err := router.New(routes)
	var gotPairs [][2]int
	if err != nil {
		var ce *router.CompileError
		if !errors.As(err, &ce) {
			t.Fatalf("New = %v, want a *CompileError", err)
		}
		for _, p := range ce.Problems {
			if p.Kind != router.Ambiguous || len(p.Indexes) != 2 {
				t.Fatalf("New(%s) = problem %v, want only ambiguities", describeRoutes(routes), p)
			}
			gotPairs = append(gotPairs, [2]int{p.Indexes[0], p.Indexes[1]})
		}
	}
	wantPairs := refAmbiguous(ref)
	slices.SortFunc(gotPairs, comparePairs)
	slices.SortFunc(wantPairs, comparePairs)
	if !slices.Equal(gotPairs, wantPairs) {
		t.Fatalf("New(%s) ambiguous pairs = %v, want %v", describeRoutes(routes), gotPairs, wantPairs)
	}
	// Drop the later route of each ambiguous pair; what is left must compile.
	drop := map[int]bool{}
	for _, p := range wantPairs {
		drop[p[1]] = true
	}
	var kept []router.Route[string]
	for i, r := range routes {
		if !drop[i] {
			kept = append(kept, r)
		}
	}
	tbl, err := router.New(kept)
	if err != nil {
		t.Fatalf("New(%s) = %v, want no error", describeRoutes(kept), err)
	}
	ref = newRefRoutes(kept)

	for k := 1 + c.n(8); k > 0; k-- {
		req := genRequest(&c)
		var ps router.Params
		got, st := tbl.Match(req, &ps)
		want := refMatch(ref, req)
		if got != want.id || st != want.status {
			t.Fatalf("routes %s: Match(%q) = %q, %v, want %q, %v", describeRoutes(kept), describe(req), got, st, want.id, want.status)
		}
		if st == router.Matched {
			checkParams(t, "routes "+describeRoutes(kept), req.Path, &ps, want.params)
			continue
		}
		if allowed := tbl.Allowed(req); !slices.Equal(allowed, want.allowed) {
			t.Fatalf("routes %s: Allowed(%q) = %q, want %q", describeRoutes(kept), describe(req), allowed, want.allowed)
		}
	}
}

func comparePairs(a, b [2]int) int {
	if a[0] != b[0] {
		return a[0] - b[0]
	}
	return a[1] - b[1]
}

func describeRoutes(routes []router.Route[string]) string {
	var parts []string
	for _, r := range routes {
		s := r.ID + " " + strings.Join(r.Methods, ",") + " " + strings.Join(r.Hosts, ",") + r.Path
		for _, h := range r.Headers {
			s += fmt.Sprintf(" [%s %v %q inv=%v]", h.Name, h.Kind, h.Value, h.Invert)
		}
		parts = append(parts, s)
	}
	return "{" + strings.Join(parts, "; ") + "}"
}
