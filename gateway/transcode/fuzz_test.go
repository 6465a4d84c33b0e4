package transcode_test

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/router"
	"github.com/portico-gw/portico/gateway/snapshot"
	"github.com/portico-gw/portico/gateway/transcode"
)

// echoUpstream answers every gRPC call with one empty message and status
// OK, as a backend would, without a network.
var echoUpstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	var frame [5]byte
	binary.BigEndian.PutUint32(frame[1:], 0)
	w.Header().Set("Content-Type", "application/grpc+proto")
	w.Header().Set("Trailer", "Grpc-Status")
	w.WriteHeader(200)
	_, _ = w.Write(frame[:])
	w.Header().Set("Grpc-Status", "0")
})

// FuzzREST drives REST calls with arbitrary paths, queries and bodies
// through the decoding the gateway does (query checks, the transcoder, the
// server-stream request builder): none may panic, and every answer is a
// success or a client error, never a server error, for input that reached
// a route.
func FuzzREST(f *testing.F) {
	for _, seed := range []struct{ method, path, query, body string }{
		{"GET", "/v1/books/find", "queryText=x&tags=a&kind=KIND_BOOK&page.size=3&after=2026-01-01T00:00:00Z", ""},
		{"PUT", "/v1/books", "note=x", `{"queryText":"y","page":{"size":1}}`},
		{"POST", "/v1/books:replace", "", `{"index":"b","doc":{"tags":["a"]}}`},
		{"GET", "/v1/books/find", "page.size=notanumber", ""},
		{"PUT", "/v1/books", "", `{"page":`},
		{"GET", "/v1/%zz/find", "kind=7&after=yesterday", ""},
	} {
		f.Add(seed.method, seed.path, seed.query, seed.body)
	}
	routes := searchRoutes(f, false)
	s, err := transcode.New([]*snapshot.Service{routes["search.Find"].RPC.Service}, echoUpstream)
	if err != nil {
		f.Fatal(err)
	}
	table, err := router.New([]router.Route[*snapshot.Route]{
		{ID: "find", Methods: []string{"GET"}, Path: "/v1/{index}/find", Value: routes["search.Find.http0"]},
		{ID: "put", Methods: []string{"PUT"}, Path: "/v1/{index}", Value: routes["search.Put.http0"]},
		{ID: "replace", Methods: []string{"POST"}, Path: "/v1/{index}:replace", Value: routes["search.Replace.http0"]},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path, query, body string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " ?#\r\n\x00") || strings.ContainsAny(query, " #\r\n\x00") {
			return
		}
		var params router.Params
		route, _ := table.Match(router.Request{Method: method, Path: path}, &params)
		if route == nil {
			return
		}
		// What reaches here has passed the gateway's path checks: a path
		// that is a URL, a method that is a token.
		r, err := http.NewRequest(method, "http://gw"+path, strings.NewReader(body))
		if err != nil {
			return
		}
		r.URL.RawQuery = query
		r.Header.Set("Content-Type", "application/json")
		query, p := transcode.CheckQuery(route, query)
		if p != nil {
			return // refused before decoding, as the gateway does
		}
		w := httptest.NewRecorder()
		s.For(route.RPC.Service).ServeHTTP(w, r)
		if w.Code >= 500 && w.Code != http.StatusNotImplemented {
			t.Errorf("%s %s?%s %q: %d %s", method, path, query, body, w.Code, w.Body)
		}
		r, _ = http.NewRequest(method, "http://gw"+path, strings.NewReader(body))
		w = httptest.NewRecorder()
		s.ServeServerStream(w, r, route, &params, query, nil, echoUpstream)
		_ = bytes.TrimSpace(w.Body.Bytes())
	})
}
