package transcode_test

import (
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/snapshot"
	"github.com/portico-gw/portico/gateway/transcode"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

const searchProto = `syntax = "proto3";
package acme.search.v1;
import "google/api/annotations.proto";
import "google/protobuf/timestamp.proto";
service Search {
  rpc Find(FindRequest) returns (FindResponse) { option (google.api.http) = { get: "/v1/{index}/find" }; }
  rpc Put(PutRequest) returns (FindResponse) { option (google.api.http) = { put: "/v1/{index}" body: "doc" }; }
  rpc Replace(PutRequest) returns (FindResponse) { option (google.api.http) = { post: "/v1/{index}:replace" body: "*" }; }
}
enum Kind { KIND_UNSPECIFIED = 0; KIND_BOOK = 1; }
message Page { int32 size = 1; string token = 2; }
message FindRequest {
  string index = 1;
  string query_text = 2;
  repeated string tags = 3;
  Kind kind = 4;
  Page page = 5;
  google.protobuf.Timestamp after = 6;
  map<string, string> labels = 7;
  repeated Page pages = 8;
}
message PutRequest { string index = 1; FindRequest doc = 2; string note = 3; }
message FindResponse {}
`

func searchRoutes(t testing.TB, allowUnknown bool) map[string]*snapshot.Route {
	t.Helper()
	s, err := snapshot.Compile(&configv1.Snapshot{
		Clusters: []*configv1.Cluster{{Name: "search", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: "127.0.0.1:1"}}}},
		Services: []*configv1.Service{{
			Id: "search", Team: "t", Name: "acme.search.v1.Search", Cluster: "search", AllowUnknownFields: allowUnknown,
			Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_Sources{Sources: &configv1.ProtoSources{Files: []*configv1.ProtoFile{
				{Name: "acme/search/v1/search.proto", Content: searchProto},
			}}}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*snapshot.Route{}
	for i := range s.Routes {
		out[s.Routes[i].ID] = &s.Routes[i]
	}
	return out
}

func TestCheckQuery(t *testing.T) {
	t.Parallel()
	routes := searchRoutes(t, false)
	find, put, replace := routes["search.Find.http0"], routes["search.Put.http0"], routes["search.Replace.http0"]
	for _, tc := range []struct {
		route *snapshot.Route
		query string
		want  string // "" for accepted, else part of the problem's detail
	}{
		{find, "queryText=x&query_text=y&tags=a&tags=b&kind=KIND_BOOK&page.size=3&page.token=t&after=2026-01-01T00:00:00Z", ""},
		{find, "page%2Esize=3&x", "has no field x"},
		{find, "nope=1", "query parameter nope: acme.search.v1.FindRequest has no field nope"},
		{find, "page=1", "field acme.search.v1.FindRequest.page is a message, not a value"},
		{find, "page.nope=1", "acme.search.v1.Page has no field nope"},
		{find, "labels=a", "is a map"},
		{find, "pages.size=1", "has no fields to name"},
		{find, "tags.x=1", "has no fields to name"},
		{put, "note=x", ""},
		{put, "doc.tags=x", "field doc is the request body"},
		{replace, "note=x", "no query parameters are accepted"},
		{find, "%zz=1", "is not validly escaped"},
		{routes["search.Find"], "anything=1", ""}, // not a REST route
	} {
		_, p := transcode.CheckQuery(tc.route, tc.query)
		switch {
		case tc.want == "" && p != nil:
			t.Errorf("%s ?%s: %s, want accepted", tc.route.ID, tc.query, p.Detail)
		case tc.want != "" && (p == nil || !strings.Contains(p.Detail, tc.want)):
			t.Errorf("%s ?%s: %v, want a problem saying %q", tc.route.ID, tc.query, p, tc.want)
		}
	}
	if _, p := transcode.CheckQuery(searchRoutes(t, true)["search.Find.http0"], "nope=1"); p != nil {
		t.Errorf("allow_unknown_fields: %s, want accepted", p.Detail)
	}
	// A parameter naming a field the path fills is dropped: the path decides.
	for _, q := range []string{"index=other&queryText=x", "queryText=x&index=other"} {
		if got, p := transcode.CheckQuery(find, q); p != nil || got != "queryText=x" {
			t.Errorf("?%s: %q, %v; want queryText=x", q, got, p)
		}
	}
}
