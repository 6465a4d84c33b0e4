package router_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/portico-gw/portico/gateway/router"
)

// rt builds a route whose value is its ID from a spec "METHOD[,METHOD] /path" or,
// for any method, "/path".
func rt(id, spec string, hosts ...string) router.Route[string] {
	r := router.Route[string]{ID: id, Value: id, Hosts: hosts}
	if methods, path, ok := strings.Cut(spec, " "); ok {
		r.Methods = strings.Split(methods, ",")
		r.Path = path
	} else {
		r.Path = spec
	}
	return r
}

// hdr adds header matches to r.
func hdr(r router.Route[string], hs ...router.HeaderMatch) router.Route[string] {
	r.Headers = append(r.Headers, hs...)
	return r
}

// rq builds a request from "METHOD host/path" (host may be empty: "GET /path") and
// "Name: value" headers.
func rq(spec string, headers ...string) router.Request {
	method, rest, _ := strings.Cut(spec, " ")
	req := router.Request{Method: method, Header: map[string][]string{}}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		req.Host, req.Path = rest[:i], rest[i:]
	} else {
		req.Host = rest
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		req.Header[name] = append(req.Header[name], value)
	}
	return req
}

func describe(req router.Request) string {
	s := req.Method + " " + req.Host + req.Path
	if len(req.Header) > 0 {
		var hs []string
		for k, vs := range req.Header {
			for _, v := range vs {
				hs = append(hs, k+": "+v)
			}
		}
		slices.Sort(hs)
		s += " [" + strings.Join(hs, "; ") + "]"
	}
	return s
}

func mustNew(t testing.TB, routes []router.Route[string]) *router.Table[string] {
	t.Helper()
	tbl, err := router.New(routes)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tbl
}

// matchCase is one request and what Match must make of it. params lists
// "name=value" bindings in template order; allowed is checked when status is
// MethodNotAllowed.
type matchCase struct {
	req     router.Request
	want    string
	status  router.Status
	params  []string
	allowed []string
}

func hit(req router.Request, want string, params ...string) matchCase {
	return matchCase{req: req, want: want, status: router.Matched, params: params}
}

func notFound(req router.Request) matchCase {
	return matchCase{req: req, status: router.NotFound}
}

func notAllowed(req router.Request, allowed ...string) matchCase {
	return matchCase{req: req, status: router.MethodNotAllowed, allowed: allowed}
}

// checkCases runs cases against a table of routes, and against the reference
// matcher, so that the two are checked against each other too.
func checkCases(t *testing.T, routes []router.Route[string], cases []matchCase) {
	t.Helper()
	tbl := mustNew(t, routes)
	ref := newRefRoutes(routes)
	for _, c := range cases {
		var ps router.Params
		got, st := tbl.Match(c.req, &ps)
		if got != c.want || st != c.status {
			t.Errorf("Match(%q) = %q, %v, want %q, %v", describe(c.req), got, st, c.want, c.status)
			continue
		}
		var gotParams []string
		for i := 0; i < ps.Len(); i++ {
			name, value := ps.At(i)
			gotParams = append(gotParams, name+"="+value)
		}
		if st == router.Matched && !slices.Equal(gotParams, c.params) {
			t.Errorf("Match(%q) params = %q, want %q", describe(c.req), gotParams, c.params)
		}
		if st == router.MethodNotAllowed {
			if got := tbl.Allowed(c.req); !slices.Equal(got, c.allowed) {
				t.Errorf("Allowed(%q) = %q, want %q", describe(c.req), got, c.allowed)
			}
		}
		if r := refMatch(ref, c.req); r.id != c.want || r.status != c.status {
			t.Errorf("reference match(%q) = %q, %v, want %q, %v (test or reference is wrong)",
				describe(c.req), r.id, r.status, c.want, c.status)
		}
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		routes []router.Route[string]
		cases  []matchCase
	}{
		{
			name: "literal beats variable beats double wildcard",
			routes: []router.Route[string]{
				rt("lit", "GET /v1/orders/special"),
				rt("var", "GET /v1/orders/{id}"),
				rt("star", "GET /v1/orders/*/items"),
				rt("multi", "GET /v1/orders/**"),
			},
			cases: []matchCase{
				hit(rq("GET /v1/orders/special"), "lit"),
				hit(rq("GET /v1/orders/42"), "var", "id=42"),
				hit(rq("GET /v1/orders/42/items"), "star"),
				hit(rq("GET /v1/orders/special/items"), "star"),
				hit(rq("GET /v1/orders/42/items/7"), "multi"),
				hit(rq("GET /v1/orders"), "multi"),
				hit(rq("GET /v1/orders/"), "multi"), // "*" needs a non-empty segment
				notFound(rq("GET /v1/order")),
				notFound(rq("GET /V1/orders/42")), // literals are case-sensitive
			},
		},
		{
			name: "backtracking",
			routes: []router.Route[string]{
				rt("abcd", "GET /a/b/c/d"),
				rt("axce", "GET /a/{x}/c/e"),
				rt("yrest", "GET /{y}/**"),
				rt("pqr", "GET /p/q/r"),
				rt("pstar", "GET /p/*"),
			},
			cases: []matchCase{
				hit(rq("GET /a/b/c/d"), "abcd"),
				hit(rq("GET /a/b/c/e"), "axce", "x=b"),             // literal b fails deeper, variable wins
				hit(rq("GET /a/b/c/f"), "yrest", "y=a"),            // both fail deeper, "**" wins
				hit(rq("GET /p/q"), "pstar"),                       // literal q leads nowhere at the end
				hit(rq("GET /p/q/r/s"), "yrest", "y=p"),            // literal and single fail
				hit(rq("GET /p/q/s"), "yrest", "y=p"),              // literal q fails, single does not reach
				hit(rq("GET /a"), "yrest", "y=a"),                  // "**" matches zero segments
				notFound(rq("GET /")),                              // "{y}" needs a non-empty segment
				notFound(rq("GET //a")),                            // empty first segment
				hit(rq("GET /a/b/c/d/"), "yrest", "y=a"),           // trailing slash is a segment
				hit(rq("GET /a/b/c/d:x"), "yrest", "y=a"),          // no verb routes: full path
				hit(rq("GET /q%2Fr/x"), "yrest", "y=q%2Fr"),        // raw, still encoded
				hit(rq("GET /a/%7Bx%7D/c/e"), "axce", "x=%7Bx%7D"), // braces only in templates
			},
		},
		{
			name: "double wildcard",
			routes: []router.Route[string]{
				rt("a", "GET /a"),
				rt("arest", "GET /a/{rest=**}"),
				rt("files", "GET /files/{path=docs/**}"),
				rt("all", "GET /**"),
			},
			cases: []matchCase{
				hit(rq("GET /a"), "a"), // ending with the path beats "**" matching nothing
				hit(rq("GET /a/"), "arest", "rest="),
				hit(rq("GET /a/b/c"), "arest", "rest=b/c"),
				hit(rq("GET /a//c/"), "arest", "rest=/c/"),
				hit(rq("GET /files/docs"), "files", "path=docs"),
				hit(rq("GET /files/docs/x/y.txt"), "files", "path=docs/x/y.txt"),
				hit(rq("GET /files/img/x.png"), "all"),
				hit(rq("GET /"), "all"),
				hit(rq("GET /x/y/z"), "all"),
				notFound(rq("GET ")),
				notFound(router.Request{Method: "GET", Path: "a/b"}),
			},
		},
		{
			name: "multi-segment variables",
			routes: []router.Route[string]{
				rt("shelf", "GET /v1/{name=shelves/*}"),
				rt("book", "GET /v1/{book.name=shelves/*/books/*}"),
				rt("jobs", "GET /v1/{parent=projects/*/locations/*}/jobs"),
				rt("job", "GET /v1/{name=projects/*/locations/*/jobs/*}"),
				rt("generic", "GET /v1/{a}/{b}"),
			},
			cases: []matchCase{
				hit(rq("GET /v1/shelves/s1"), "shelf", "name=shelves/s1"), // literal inside variable beats {a}
				hit(rq("GET /v1/other/s1"), "generic", "a=other", "b=s1"),
				hit(rq("GET /v1/shelves/s1/books/b2"), "book", "book.name=shelves/s1/books/b2"),
				hit(rq("GET /v1/projects/p/locations/l/jobs"), "jobs", "parent=projects/p/locations/l"),
				hit(rq("GET /v1/projects/p/locations/l/jobs/j"), "job", "name=projects/p/locations/l/jobs/j"),
				notFound(rq("GET /v1/shelves/")),
				notFound(rq("GET /v1/shelves/s1/books")),
				notFound(rq("GET /v1/projects/p/locations/jobs")),
			},
		},
		{
			name: "verbs",
			routes: []router.Route[string]{
				rt("cancel", "POST /v1/orders/{id}:cancel"),
				rt("get", "GET /v1/orders/{id}"),
				rt("update", "POST /v1/orders/{id}"),
				rt("special-cancel", "POST /v1/orders/special:cancel"),
				rt("undelete", "POST /v1/{name=**}:undelete"),
			},
			cases: []matchCase{
				hit(rq("POST /v1/orders/42:cancel"), "cancel", "id=42"),
				hit(rq("POST /v1/orders/special:cancel"), "special-cancel"),
				hit(rq("POST /v1/orders/42:archive"), "update", "id=42:archive"), // unknown verb: full path
				hit(rq("GET /v1/orders/42:cancel"), "get", "id=42:cancel"),       // no GET verb route
				hit(rq("POST /v1/orders/42"), "update", "id=42"),
				hit(rq("POST /v1/orders/a:b:cancel"), "cancel", "id=a:b"),  // last ':' separates
				hit(rq("POST /v1/orders/:cancel"), "update", "id=:cancel"), // stripped segment is empty
				hit(rq("POST /v1/orders/42:"), "update", "id=42:"),         // empty verb is no verb
				hit(rq("POST /v1/a/b/c:undelete"), "undelete", "name=a/b/c"),
				hit(rq("POST /v1:undelete"), "undelete", "name="),
				notFound(rq("POST /v2/a:undelete")),
				notAllowed(rq("DELETE /v1/orders/42:cancel"), "GET", "HEAD", "POST"),
			},
		},
		{
			name: "host groups",
			routes: []router.Route[string]{
				rt("exact", "GET /x", "api.example.com"),
				rt("exact-var", "GET /v/{p}", "api.example.com"),
				rt("wild", "GET /x", "*.example.com"),
				rt("wild-w", "GET /w", "*.example.com"),
				rt("wild-eu", "GET /x", "*.eu.example.com"),
				rt("any", "GET /x"),
				rt("any-y", "GET /y"),
				rt("any-special", "GET /v/special"),
				rt("multi-host", "GET /m", "a.test", "b.test"),
			},
			cases: []matchCase{
				hit(rq("GET api.example.com/x"), "exact"),
				hit(rq("GET eu.example.com/x"), "wild"), // "*.eu.example.com" needs a label before .eu
				hit(rq("GET a.eu.example.com/x"), "wild-eu"),
				hit(rq("GET a.b.eu.example.com/x"), "wild-eu"),
				hit(rq("GET a.b.example.com/x"), "wild"),
				hit(rq("GET example.com/x"), "any"),
				hit(rq("GET .example.com/x"), "any"), // empty label is not a match for "*"
				hit(rq("GET other.org/x"), "any"),
				hit(rq("GET /x"), "any"),
				hit(rq("GET api.example.com/y"), "any-y"),                          // falls through exact and wildcard
				hit(rq("GET a.eu.example.com/w"), "wild-w"),                        // falls through the longer wildcard
				hit(rq("GET api.example.com/w"), "wild-w"),                         // exact host falls through to wildcard
				hit(rq("GET api.example.com/v/special"), "exact-var", "p=special"), // host group beats path
				hit(rq("GET other.org/v/special"), "any-special"),
				hit(rq("GET b.test/m"), "multi-host"),
				notFound(rq("GET c.test/m")),
			},
		},
		{
			name: "methods",
			routes: []router.Route[string]{
				rt("get", "GET /a"),
				rt("head", "HEAD /h"),
				rt("get-h", "GET /h"),
				rt("get-var", "GET /b/{x}"),
				rt("any-b", "/b/c"),
				rt("any-d", "/d"),
				rt("post-d", "POST,PUT /d"),
			},
			cases: []matchCase{
				hit(rq("GET /a"), "get"),
				hit(rq("HEAD /a"), "get"),  // HEAD falls back to GET
				hit(rq("HEAD /h"), "head"), // but prefers HEAD routes
				hit(rq("GET /h"), "get-h"),
				hit(rq("GET /b/c"), "get-var", "x=c"), // method table beats path specificity
				hit(rq("HEAD /b/c"), "get-var", "x=c"),
				hit(rq("POST /b/c"), "any-b"),
				hit(rq("DELETE /d"), "any-d"),
				hit(rq("PUT /d"), "post-d"),
				hit(rq("get /d"), "any-d"), // methods are case-sensitive
				notAllowed(rq("POST /a"), "GET", "HEAD"),
				notAllowed(rq("DELETE /b/x"), "GET", "HEAD"),
				notAllowed(rq("POST /h"), "GET", "HEAD"),
				notFound(rq("GET /c")),
			},
		},
		{
			name: "headers",
			routes: []router.Route[string]{
				hdr(rt("v2-beta", "GET /r"),
					router.HeaderMatch{Name: "x-api-version", Value: "2"},
					router.HeaderMatch{Name: "X-Beta", Kind: router.Present}),
				hdr(rt("v2", "GET /r"), router.HeaderMatch{Name: "X-API-VERSION", Value: "2"}),
				hdr(rt("b-tenant", "GET /r"), router.HeaderMatch{Name: "X-Tenant", Kind: router.Prefix, Value: "acme-"}),
				hdr(rt("a-ua", "GET /r"), router.HeaderMatch{Name: "User-Agent", Kind: router.Regex, Value: `grpc-go/1\.[0-9]+`}),
				rt("plain", "GET /r"),
				hdr(rt("no-debug", "GET /s/{x}"), router.HeaderMatch{Name: "X-Debug", Kind: router.Present, Invert: true}),
				hdr(rt("not-v1", "GET /s/lit"), router.HeaderMatch{Name: "X-Api-Version", Value: "1", Invert: true}),
				hdr(rt("gated", "GET /g/lit"), router.HeaderMatch{Name: "X-Gate", Value: "open"}),
				rt("gated-fallback", "GET /g/{x}"),
				hdr(rt("post-gated", "POST /p"), router.HeaderMatch{Name: "X-Gate", Value: "open"}),
			},
			cases: []matchCase{
				hit(rq("GET /r"), "plain"),
				hit(rq("GET /r", "X-Api-Version: 2"), "v2"),
				hit(rq("GET /r", "X-Api-Version: 2", "X-Beta: "), "v2-beta"), // more header matches first
				hit(rq("GET /r", "X-Api-Version: 1", "X-Beta: yes"), "plain"),
				hit(rq("GET /r", "X-Api-Version: 1", "X-Api-Version: 2"), "v2"), // any value
				hit(rq("GET /r", "X-Tenant: acme-eu"), "b-tenant"),
				hit(rq("GET /r", "X-Tenant: acme"), "plain"),
				hit(rq("GET /r", "User-Agent: grpc-go/1.62"), "a-ua"),
				hit(rq("GET /r", "User-Agent: grpc-go/1.62 x"), "plain"), // regex is anchored
				hit(rq("GET /r", "User-Agent: x grpc-go/1.62"), "plain"),
				hit(rq("GET /r", "User-Agent: grpc-go/1.62", "X-Tenant: acme-"), "a-ua"), // tie: lower ID
				hit(rq("GET /s/x"), "no-debug", "x=x"),
				notFound(rq("GET /s/x", "X-Debug: 1")),
				notFound(rq("GET /s/x", "X-Debug: ")), // present with an empty value
				// A key without values is absent.
				hit(router.Request{Method: "GET", Path: "/s/x", Header: map[string][]string{"X-Debug": {}}}, "no-debug", "x=x"),
				hit(rq("GET /s/lit"), "not-v1"), // absent counts as not matching
				hit(rq("GET /s/lit", "X-Api-Version: 2"), "not-v1"),
				hit(rq("GET /s/lit", "X-Api-Version: 1"), "no-debug", "x=lit"), // backtrack to variable
				notFound(rq("GET /s/lit", "X-Api-Version: 1", "X-Debug: 1")),
				hit(rq("GET /g/lit", "X-Gate: open"), "gated"),
				hit(rq("GET /g/lit", "X-Gate: closed"), "gated-fallback", "x=lit"),
				hit(rq("GET /g/lit", "x-gate: open"), "gated-fallback", "x=lit"), // request keys are canonical already
				notFound(rq("GET /p")),                                           // headers do not hold for any method
				notAllowed(rq("GET /p", "X-Gate: open"), "POST"),
			},
		},
		{
			name: "405 across host groups",
			routes: []router.Route[string]{
				rt("exact-post", "POST /a", "api.example.com"),
				rt("wild-put", "PUT /a", "*.example.com"),
				rt("any-delete", "DELETE /a"),
				rt("other-host", "PATCH /a", "other.example.com"),
			},
			cases: []matchCase{
				hit(rq("POST api.example.com/a"), "exact-post"),
				hit(rq("PUT api.example.com/a"), "wild-put"),
				hit(rq("DELETE api.example.com/a"), "any-delete"),
				notAllowed(rq("GET api.example.com/a"), "DELETE", "POST", "PUT"),
				notAllowed(rq("GET x.example.com/a"), "DELETE", "PUT"),
				notAllowed(rq("GET other.example.com/a"), "DELETE", "PATCH", "PUT"),
				notFound(rq("GET api.example.com/b")),
			},
		},
		{
			name: "versions and gRPC",
			routes: []router.Route[string]{
				rt("v1-get", "GET /v1/orders/{id}", "api.example.com"),
				rt("v2-get", "GET /v2/orders/{id}", "api.example.com"),
				rt("v2-item", "GET /v2/orders/{id}/items/{item_id}", "api.example.com"),
				rt("grpc-get", "POST /acme.orders.v1.OrderService/GetOrder"),
				rt("grpc-list", "POST /acme.orders.v1.OrderService/ListOrders"),
				rt("grpc-reflection", "POST /grpc.reflection.v1.ServerReflection/*"),
			},
			cases: []matchCase{
				hit(rq("GET api.example.com/v1/orders/1"), "v1-get", "id=1"),
				hit(rq("GET api.example.com/v2/orders/1"), "v2-get", "id=1"),
				hit(rq("GET api.example.com/v2/orders/1/items/2"), "v2-item", "id=1", "item_id=2"),
				notFound(rq("GET api.example.com/v1/orders/1/items/2")),
				notFound(rq("GET api.example.com/v3/orders/1")),
				hit(rq("POST api.example.com/acme.orders.v1.OrderService/GetOrder"), "grpc-get"),
				hit(rq("POST /acme.orders.v1.OrderService/ListOrders"), "grpc-list"),
				hit(rq("POST /grpc.reflection.v1.ServerReflection/ServerReflectionInfo"), "grpc-reflection"),
				notFound(rq("POST /acme.orders.v1.OrderService/DeleteOrder")),
				notFound(rq("POST /acme.orders.v1.orderservice/GetOrder")),
				notFound(rq("POST /acme.orders.v1.OrderService/GetOrder/")),
				notAllowed(rq("GET /acme.orders.v1.OrderService/GetOrder"), "POST"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkCases(t, tt.routes, tt.cases)
		})
	}
}

func TestMatchParamsReset(t *testing.T) {
	t.Parallel()
	tbl := mustNew(t, []router.Route[string]{rt("a", "GET /a/{x}/{y}")})
	var ps router.Params
	if _, st := tbl.Match(rq("GET /a/1/2"), &ps); st != router.Matched || ps.Len() != 2 {
		t.Fatalf("Match(%q) = %v with %d params, want Matched with 2", "/a/1/2", st, ps.Len())
	}
	if _, st := tbl.Match(rq("GET /b"), &ps); st != router.NotFound || ps.Len() != 0 {
		t.Errorf("Match(%q) = %v with params %v, want NotFound with none", "/b", st, &ps)
	}
	if _, st := tbl.Match(rq("GET /a/1/2"), nil); st != router.Matched {
		t.Errorf("Match(%q, nil) = %v, want Matched", "/a/1/2", st)
	}
}

func TestNilTable(t *testing.T) {
	t.Parallel()
	var tbl *router.Table[string]
	if v, st := tbl.Match(rq("GET /a"), nil); v != "" || st != router.NotFound {
		t.Errorf("nil Table Match = %q, %v, want \"\", NotFound", v, st)
	}
	if got := tbl.Allowed(rq("GET /a")); got != nil {
		t.Errorf("nil Table Allowed = %q, want nil", got)
	}
}

func TestAllowedOnMatch(t *testing.T) {
	t.Parallel()
	tbl := mustNew(t, []router.Route[string]{
		rt("get", "GET /a"),
		rt("post", "POST /a"),
		rt("any", "/a"),
		rt("delete", "DELETE /b"),
	})
	// Routes without methods are not counted; the request's own method is.
	for _, c := range []struct {
		req  router.Request
		want []string
	}{
		{rq("GET /a"), []string{"GET", "HEAD", "POST"}},
		{rq("PATCH /a"), []string{"GET", "HEAD", "POST"}},
		{rq("GET /b"), []string{"DELETE"}},
		{rq("GET /c"), nil},
		{router.Request{Method: "GET", Path: "a"}, nil},
	} {
		if got := tbl.Allowed(c.req); !slices.Equal(got, c.want) {
			t.Errorf("Allowed(%q) = %q, want %q", describe(c.req), got, c.want)
		}
	}
}

func TestStatusString(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s    fmt.Stringer
		want string
	}{
		{router.Matched, "Matched"},
		{router.NotFound, "NotFound"},
		{router.MethodNotAllowed, "MethodNotAllowed"},
		{router.Status(9), "Status(9)"},
		{router.Regex, "regex"},
		{router.MatchKind(7), "MatchKind(7)"},
		{router.Ambiguous, "Ambiguous"},
	} {
		if got := c.s.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}

// TestMatchRealistic checks the benchmark's table against the reference, so the
// benchmark measures what it claims, and that Match does not allocate on any kind
// of request: hit, 404 or 405.
func TestMatchRealistic(t *testing.T) {
	// Not parallel: AllocsPerRun refuses to run in parallel tests.
	routes := benchRouteSet()
	tbl := mustNew(t, routes)
	ref := newRefRoutes(routes)
	reqs := benchRequests(300)
	counts := map[string]map[router.Status]int{}
	for _, r := range reqs {
		var ps router.Params
		got, st := tbl.Match(r.req, &ps)
		want := refMatch(ref, r.req)
		if got != want.id || st != want.status {
			t.Errorf("Match(%q) = %q, %v, want %q, %v", describe(r.req), got, st, want.id, want.status)
		}
		if counts[r.kind] == nil {
			counts[r.kind] = map[router.Status]int{}
		}
		counts[r.kind][st]++
		allocs := testing.AllocsPerRun(10, func() { tbl.Match(r.req, &ps) })
		if allocs != 0 {
			t.Errorf("Match(%q) allocates %v times, want 0", describe(r.req), allocs)
		}
	}
	for kind, c := range counts {
		switch {
		case kind == "miss-404" || kind == "miss-404-grpc":
			if c[router.NotFound] == 0 || c[router.Matched] > 0 {
				t.Errorf("requests of kind %s: statuses %v, want all NotFound", kind, c)
			}
		case kind == "miss-405":
			if c[router.MethodNotAllowed] == 0 || c[router.Matched] > 0 {
				t.Errorf("requests of kind %s: statuses %v, want all MethodNotAllowed", kind, c)
			}
		case kind != "other-host":
			if c[router.Matched] == 0 || len(c) > 1 {
				t.Errorf("requests of kind %s: statuses %v, want all Matched", kind, c)
			}
		}
	}
}

// TestMatchConcurrent matches from several goroutines at once; under -race it
// shows that Match only reads the table.
func TestMatchConcurrent(t *testing.T) {
	t.Parallel()
	routes := benchRouteSet()
	tbl := mustNew(t, routes)
	reqs := benchRequests(200)
	want := make([]string, len(reqs))
	for i, r := range reqs {
		want[i], _ = tbl.Match(r.req, nil)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			var ps router.Params
			for i, r := range reqs {
				if got, _ := tbl.Match(r.req, &ps); got != want[i] {
					t.Errorf("concurrent Match(%q) = %q, want %q", describe(r.req), got, want[i])
				}
				tbl.Allowed(r.req)
			}
		})
	}
	wg.Wait()
}

// TestMatchWideNodes checks nodes with many literal children, which Match finds
// through a hash table rather than a scan: siblings with overlapping keys under
// different parents, keys that are prefixes of each other, misses that fall back
// to a single-segment route, and a verb. The reference matcher says what each
// request must match.
func TestMatchWideNodes(t *testing.T) {
	t.Parallel()
	var routes []router.Route[string]
	add := func(id, spec string) { routes = append(routes, rt(id, spec)) }
	for i := range 100 {
		add(fmt.Sprintf("a%d", i), fmt.Sprintf("GET /a/k%d", i))
		add(fmt.Sprintf("b%d", i+50), fmt.Sprintf("GET /b/k%d/x", i+50))
		add(fmt.Sprintf("v%d", i), fmt.Sprintf("POST /a/k%d:run", i))
	}
	for i := range 5 {
		add(fmt.Sprintf("c%d", i), fmt.Sprintf("GET /c/k%d", i))
	}
	add("a-any", "GET /a/{x}")
	add("b-files", "GET /b/{path=**}")
	tbl := mustNew(t, routes)
	ref := newRefRoutes(routes)

	var segs []string
	for i := range 160 {
		segs = append(segs, fmt.Sprintf("k%d", i))
	}
	segs = append(segs, "", "k", "k1000", "K1", "k1\x00", "a", "b")
	var reqs []router.Request
	for _, parent := range []string{"a", "b", "c", "d"} {
		for _, s := range segs {
			reqs = append(reqs,
				rq("GET /"+parent+"/"+s),
				rq("GET /"+parent+"/"+s+"/x"),
				rq("POST /"+parent+"/"+s+":run"),
				rq("DELETE /"+parent+"/"+s))
		}
	}
	matched := 0
	for _, req := range reqs {
		var ps router.Params
		got, st := tbl.Match(req, &ps)
		want := refMatch(ref, req)
		if got != want.id || st != want.status {
			t.Errorf("Match(%q) = %q, %v, want %q, %v", describe(req), got, st, want.id, want.status)
			continue
		}
		if st == router.Matched {
			matched++
			checkParams(t, "wide nodes", req.Path, &ps, want.params)
		}
	}
	// The routes match 605 of the requests; far fewer would mean the requests
	// no longer reach the wide nodes.
	if matched < 500 {
		t.Errorf("%d of %d requests matched, want over 500", matched, len(reqs))
	}
}

// TestMatchExtensionMethods checks methods outside RFC 9110, which a group finds by
// name rather than by index, next to standard ones.
func TestMatchExtensionMethods(t *testing.T) {
	t.Parallel()
	checkCases(t, []router.Route[string]{
		rt("purge", "PURGE /cache/{key}"),
		rt("propfind", "PROPFIND,GET /dav/**"),
		rt("long", "VERSION-CONTROL /dav/{x}"), // longer than eight bytes
		rt("get", "GET /cache/{key}"),
	}, []matchCase{
		hit(rq("PURGE /cache/a"), "purge", "key=a"),
		hit(rq("GET /cache/a"), "get", "key=a"),
		hit(rq("HEAD /cache/a"), "get", "key=a"),
		hit(rq("PROPFIND /dav/a/b"), "propfind"),
		hit(rq("VERSION-CONTROL /dav/a"), "long", "x=a"),
		notAllowed(rq("VERSION-CONTROX /dav/a"), "GET", "HEAD", "PROPFIND", "VERSION-CONTROL"),
		notAllowed(rq("PURGEX /cache/a"), "GET", "HEAD", "PURGE"),
		notAllowed(rq("GETX /cache/a"), "GET", "HEAD", "PURGE"),
		notAllowed(rq("get /cache/a"), "GET", "HEAD", "PURGE"),
		notAllowed(rq("POST /cache/a"), "GET", "HEAD", "PURGE"),
		notAllowed(rq("PURGE /dav/a/b/c:x"), "GET", "HEAD", "PROPFIND"),
		notFound(rq("PURGE /other")),
	})
}
