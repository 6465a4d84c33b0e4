package snapshot_test

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/portico-gw/portico/gateway/router"
	"github.com/portico-gw/portico/gateway/snapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
)

// demoSet is the demo orders service's file as a FileDescriptorSet, its
// imports left to the gateway (as `buf build --exclude-imports` writes it).
func demoSet(t *testing.T) []byte {
	t.Helper()
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(demov1.File_portico_demo_v1_orders_proto),
	}}
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func withService(svc *configv1.Service) *configv1.Snapshot {
	cfg := valid()
	cfg.Services = []*configv1.Service{svc}
	return cfg
}

func demoService(d *configv1.Descriptors) *configv1.Service {
	return &configv1.Service{Id: "demo-orders", Team: "orders", Name: "portico.demo.v1.OrdersService", Cluster: "orders", Descriptors: d}
}

// TestServiceRoutes derives the demo service's routes, from a descriptor
// set and from its .proto source, and routes requests to them.
func TestServiceRoutes(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../proto/portico/demo/v1/orders.proto")
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]*configv1.Descriptors{
		"set": {Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: demoSet(t)}},
		"sources": {Source: &configv1.Descriptors_Sources{Sources: &configv1.ProtoSources{Files: []*configv1.ProtoFile{
			{Name: "portico/demo/v1/orders.proto", Content: string(src)},
		}}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := snapshot.Compile(withService(demoService(d)))
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			var got []string
			for _, r := range s.Routes {
				if r.RPC != nil {
					got = append(got, r.ID+" "+r.Path+" "+r.RPC.Path)
				}
			}
			want := []string{
				"demo-orders.GetOrder /portico.demo.v1.OrdersService/GetOrder /portico.demo.v1.OrdersService/GetOrder",
				"demo-orders.GetOrder.http0 /v1/orders/{order_id} /portico.demo.v1.OrdersService/GetOrder",
				"demo-orders.CreateOrder /portico.demo.v1.OrdersService/CreateOrder /portico.demo.v1.OrdersService/CreateOrder",
				"demo-orders.CreateOrder.http0 /v1/orders /portico.demo.v1.OrdersService/CreateOrder",
				"demo-orders.WatchOrders /portico.demo.v1.OrdersService/WatchOrders /portico.demo.v1.OrdersService/WatchOrders",
				"demo-orders.WatchOrders.http0 /v1/customers/{customer_id}/orders:watch /portico.demo.v1.OrdersService/WatchOrders",
				"demo-orders.ListOrders /portico.demo.v1.OrdersService/ListOrders /portico.demo.v1.OrdersService/ListOrders",
				"demo-orders.ListOrders.http0 /v1/customers/{customer_id}/orders /portico.demo.v1.OrdersService/ListOrders",
				"demo-orders.ListOrders.http1 /v1/customers/{customer_id}/orders:search /portico.demo.v1.OrdersService/ListOrders",
				"demo-orders.ImportOrders /portico.demo.v1.OrdersService/ImportOrders /portico.demo.v1.OrdersService/ImportOrders",
				"demo-orders.SyncOrders /portico.demo.v1.OrdersService/SyncOrders /portico.demo.v1.OrdersService/SyncOrders",
			}
			if !slices.Equal(got, want) {
				t.Errorf("derived routes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			var p router.Params
			r, st := s.Table("").Match(router.Request{Method: "GET", Path: "/v1/orders/o-1"}, &p)
			if r == nil || r.RPC == nil || r.RPC.Method.Name() != "GetOrder" || !r.RPC.REST() || r.Cluster != "orders" {
				t.Fatalf("GET /v1/orders/o-1 matched %+v (%v), want GetOrder's binding", r, st)
			}
			if r.RPC.Service.Desc.FullName() != "portico.demo.v1.OrdersService" {
				t.Errorf("service %s", r.RPC.Service.Desc.FullName())
			}
			r, _ = s.Table("").Match(router.Request{Method: "POST", Path: "/portico.demo.v1.OrdersService/SyncOrders"}, &p)
			if r == nil || r.RPC == nil || r.RPC.REST() || !r.RPC.Method.IsStreamingClient() {
				t.Errorf("POST SyncOrders matched %+v", r)
			}
		})
	}
}

func TestServiceSelectedMethods(t *testing.T) {
	t.Parallel()
	svc := demoService(&configv1.Descriptors{Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: demoSet(t)}})
	svc.Methods = []string{"GetOrder"}
	svc.Auth = &configv1.RouteAuth{MethodScopes: []*configv1.MethodScopes{{Method: "/portico.demo.v1.OrdersService/GetOrder", Scopes: []string{"orders:read"}}}}
	cfg := withService(svc)
	cfg.Scopes = []*configv1.Scope{{Name: "orders:read"}}
	s, err := snapshot.Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	var ids []string
	for _, r := range s.Routes {
		if r.RPC != nil {
			ids = append(ids, r.ID)
			if !slices.Equal(r.Auth.Scopes, []string{"orders:read"}) {
				t.Errorf("%s scopes %v, want the method's [orders:read]", r.ID, r.Auth.Scopes)
			}
		}
	}
	if !slices.Equal(ids, []string{"demo-orders.GetOrder", "demo-orders.GetOrder.http0"}) {
		t.Errorf("routes %v, want GetOrder's only", ids)
	}
}

// badProto is a service whose every binding is wrong in its own way.
const badProto = `syntax = "proto3";
package acme.bad.v1;
import "google/api/annotations.proto";
service Bad {
  rpc NoField(Req) returns (Resp) { option (google.api.http) = { get: "/v1/things/{thing_id}" }; }
  rpc BadTemplate(Req) returns (Resp) { option (google.api.http) = { get: "/v1/{id" }; }
  rpc BadBody(Req) returns (Resp) { option (google.api.http) = { post: "/v1/things" body: "nope" response_body: "nada" }; }
  rpc Nested(Req) returns (Resp) { option (google.api.http) = { get: "/v1/a/{id}" additional_bindings { get: "/v1/b/{id}" additional_bindings { get: "/v1/c/{id}" } } }; }
  rpc Repeated(Req) returns (Resp) { option (google.api.http) = { get: "/v1/tags/{tags}" }; }
  rpc Upload(stream Req) returns (Resp) { option (google.api.http) = { post: "/v1/upload" body: "*" }; }
  rpc Clash(Req) returns (Resp) { option (google.api.http) = { get: "/v1/same/{id}" }; }
  rpc Clash2(Req) returns (Resp) { option (google.api.http) = { get: "/v1/same/{id}" }; }
}
message Req { string id = 1; repeated string tags = 2; }
message Resp { string id = 1; }
`

func TestServiceProblems(t *testing.T) {
	t.Parallel()
	sources := func(files ...string) *configv1.Descriptors {
		ps := &configv1.ProtoSources{}
		for i := 0; i < len(files); i += 2 {
			ps.Files = append(ps.Files, &configv1.ProtoFile{Name: files[i], Content: files[i+1]})
		}
		return &configv1.Descriptors{Source: &configv1.Descriptors_Sources{Sources: ps}}
	}
	bad := &configv1.Service{Id: "bad", Team: "orders", Name: "acme.bad.v1.Bad", Cluster: "orders", Descriptors: sources("acme/bad/v1/bad.proto", badProto)}
	for _, tc := range []struct {
		name string
		svc  *configv1.Service
		want []string
	}{
		{"bindings", bad, []string{
			"services[0].descriptors: acme/bad/v1/bad.proto: acme.bad.v1.Bad.NoField option (google.api.http): path variable {thing_id}: acme.bad.v1.Req has no field thing_id",
			"acme.bad.v1.Bad.BadTemplate option (google.api.http): invalid path template \"/v1/{id\"",
			"acme.bad.v1.Bad.BadBody option (google.api.http): body \"nope\": acme.bad.v1.Req has no field nope",
			"acme.bad.v1.Bad.BadBody option (google.api.http): response_body \"nada\": acme.bad.v1.Resp has no field nada",
			"acme.bad.v1.Bad.Nested option (google.api.http).additional_bindings[0]: additional_bindings may not nest",
			"acme.bad.v1.Bad.Repeated option (google.api.http): path variable {tags}: field acme.bad.v1.Req.tags is repeated",
			"acme.bad.v1.Bad.Upload option (google.api.http): REST bindings serve unary and server-streaming methods",
			// Two bindings of the same path.
			`services[0] (acme/bad/v1/bad.proto: acme.bad.v1.Bad.Clash option (google.api.http)): routes "bad.Clash.http0" and "bad.Clash2.http0" are ambiguous`,
		}},
		{"unresolved import", &configv1.Service{Id: "x", Team: "t", Name: "acme.x.v1.X", Cluster: "orders",
			Descriptors: sources("acme/x/v1/x.proto", "syntax = \"proto3\";\npackage acme.x.v1;\nimport \"acme/common/v1/money.proto\";\nservice X {}\n")},
			[]string{`services[0].descriptors: acme/x/v1/x.proto:3:8: could not resolve path "acme/common/v1/money.proto": neither in the sources nor one the gateway has`}},
		{"syntax error", &configv1.Service{Id: "x", Team: "t", Name: "acme.x.v1.X", Cluster: "orders",
			Descriptors: sources("acme/x/v1/x.proto", "syntax = \"proto3\";\npackage acme.x.v1;\nservice X { rpc }\n")},
			[]string{"services[0].descriptors: acme/x/v1/x.proto:3:"}},
		{"set missing an import", &configv1.Service{Id: "x", Team: "t", Name: "acme.x.v1.X", Cluster: "orders",
			Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: mustMarshal(t, &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{{
				Name: proto.String("acme/x/v1/x.proto"), Package: proto.String("acme.x.v1"), Syntax: proto.String("proto3"),
				Dependency: []string{"acme/common/v1/money.proto"},
			}}})}}},
			[]string{"services[0].descriptors: acme/x/v1/x.proto: imports acme/common/v1/money.proto, which is neither in the set nor one the gateway has"}},
		{"not a set", &configv1.Service{Id: "x", Team: "t", Name: "acme.x.v1.X", Cluster: "orders",
			Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: []byte("\xff\xff")}}},
			[]string{"services[0].descriptors: file_descriptor_set does not decode"}},
		{"unknown service and method, HTTP/1.1 cluster", &configv1.Service{Id: "x", Team: "t", Name: "portico.demo.v1.Nope", Cluster: "legacy", Methods: []string{"Nope"},
			Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: demoSet(t)}}},
			[]string{
				"services[0].cluster: service \"x\" needs a gRPC cluster; \"legacy\" speaks HTTP/1.1",
				"services[0].name: the descriptors define no service portico.demo.v1.Nope",
			}},
		{"method scopes", func() *configv1.Service {
			s := demoService(&configv1.Descriptors{Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: demoSet(t)}})
			s.Methods = []string{"GetOrder", "Nope"}
			s.Auth = &configv1.RouteAuth{MethodScopes: []*configv1.MethodScopes{{Method: "POST"}}}
			return s
		}(), []string{
			"services[0].methods[1]: service portico.demo.v1.OrdersService has no method Nope",
			"services[0].auth.method_scopes[0].method: \"POST\" is not an exposed method of portico.demo.v1.OrdersService",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := snapshot.Compile(withService(tc.svc))
			var serr *snapshot.Error
			if !errors.As(err, &serr) {
				t.Fatalf("Compile: %v, want a *snapshot.Error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, strings.Join(violations(serr), "\n"))
				}
			}
		})
	}
}

func violations(e *snapshot.Error) []string {
	out := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		out[i] = v.String()
	}
	return out
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestServiceImportsGatewayFiles: sources may import the files the
// gateway carries (google/api, the well-known types, buf/validate)
// without listing them, wherever the snapshot is compiled: the control
// plane links no transcoder that would bring google/api/httpbody.proto.
func TestServiceImportsGatewayFiles(t *testing.T) {
	t.Parallel()
	const src = `syntax = "proto3";
package acme.files.v1;
import "google/api/annotations.proto";
import "google/api/httpbody.proto";
import "google/protobuf/field_mask.proto";
import "google/protobuf/struct.proto";
import "buf/validate/validate.proto";
service Files {
  rpc Get(GetRequest) returns (google.api.HttpBody) { option (google.api.http) = {get: "/v1/files/{name}"}; }
}
message GetRequest {
  string name = 1 [(buf.validate.field).string.min_len = 1];
  google.protobuf.FieldMask mask = 2;
  google.protobuf.Struct meta = 3;
}
`
	svc := &configv1.Service{Id: "files", Team: "orders", Name: "acme.files.v1.Files", Cluster: "orders",
		Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_Sources{Sources: &configv1.ProtoSources{
			Files: []*configv1.ProtoFile{{Name: "acme/files/v1/files.proto", Content: src}},
		}}}}
	if _, err := snapshot.Compile(withService(svc)); err != nil {
		t.Fatal(err)
	}
}
