package gateway_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// kitchenSinkProto is a service using every type the REST mapping treats
// specially: the well-known types in proto3 JSON, a FieldMask as a query
// parameter, and google.api.HttpBody as request and as response.
const kitchenSinkProto = `syntax = "proto3";
package portico.test.v1;

import "google/api/annotations.proto";
import "google/api/httpbody.proto";
import "google/protobuf/any.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/field_mask.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

service KitchenSink {
  // Echo answers the sink it is sent.
  rpc Echo(Sink) returns (Sink) {
    option (google.api.http) = {post: "/v1/sinks" body: "*"};
  }
  // Patch answers the sink with its mask set to the update mask.
  rpc Patch(PatchRequest) returns (Sink) {
    option (google.api.http) = {patch: "/v1/sinks/{sink.id}" body: "sink"};
  }
  // Upload answers "<name>:<data>" in the upload's content type.
  rpc Upload(UploadRequest) returns (google.api.HttpBody) {
    option (google.api.http) = {put: "/v1/blobs/{name}" body: "data"};
  }
  // Download answers a CSV file.
  rpc Download(DownloadRequest) returns (google.api.HttpBody) {
    option (google.api.http) = {get: "/v1/blobs/{name}"};
  }
}

message Sink {
  string id = 1;
  google.protobuf.Timestamp at = 2;
  google.protobuf.Duration ttl = 3;
  google.protobuf.FieldMask mask = 4;
  google.protobuf.Struct attrs = 5;
  google.protobuf.Value value = 6;
  google.protobuf.Any extra = 7;
  google.protobuf.Int64Value count = 8;
  google.protobuf.BoolValue flag = 9;
  google.protobuf.ListValue list = 10;
  google.protobuf.StringValue note = 11;
  google.protobuf.BytesValue blob = 12;
}

message PatchRequest {
  Sink sink = 1;
  google.protobuf.FieldMask update_mask = 2;
}

message UploadRequest {
  string name = 1;
  google.api.HttpBody data = 2;
}

message DownloadRequest {
  string name = 1;
}
`

// kitchenSinkBackend serves the kitchen sink over gRPC from its
// descriptor, with dynamic messages.
func kitchenSinkBackend(t *testing.T) string {
	t.Helper()
	c := protocompile.Compiler{Resolver: protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
		if path == "sink.proto" {
			return protocompile.SearchResult{Source: strings.NewReader(kitchenSinkProto)}, nil
		}
		fd, err := protoregistry.GlobalFiles.FindFileByPath(path)
		if err != nil {
			return protocompile.SearchResult{}, err
		}
		return protocompile.SearchResult{Desc: fd}, nil
	})}
	files, err := c.Compile(context.Background(), "sink.proto")
	if err != nil {
		t.Fatal(err)
	}
	svc := files[0].Services().ByName("KitchenSink")
	msg := func(name protoreflect.FullName) *dynamicpb.Message {
		d, err := files.AsResolver().FindDescriptorByName(name)
		if err != nil {
			d, err = protoregistry.GlobalFiles.FindDescriptorByName(name)
		}
		if err != nil {
			t.Error(err)
			return nil
		}
		return dynamicpb.NewMessage(d.(protoreflect.MessageDescriptor))
	}
	field := func(m protoreflect.Message, name string) protoreflect.FieldDescriptor {
		return m.Descriptor().Fields().ByName(protoreflect.Name(name))
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		full, _ := grpc.MethodFromServerStream(stream)
		md := svc.Methods().ByName(protoreflect.Name(full[strings.LastIndexByte(full, '/')+1:]))
		if md == nil {
			return status.Error(codes.Unimplemented, full)
		}
		in := dynamicpb.NewMessage(md.Input())
		if err := stream.RecvMsg(in); err != nil {
			return err
		}
		var out proto.Message
		switch md.Name() {
		case "Echo":
			out = in
		case "Patch":
			sink := in.Get(field(in, "sink")).Message()
			sink.Set(field(sink, "mask"), in.Get(field(in, "update_mask")))
			out = sink.Interface()
		case "Upload":
			data := in.Get(field(in, "data")).Message()
			body := msg("google.api.HttpBody")
			body.Set(field(body, "content_type"), data.Get(field(data, "content_type")))
			body.Set(field(body, "data"), protoreflect.ValueOfBytes(append([]byte(in.Get(field(in, "name")).String()+":"), data.Get(field(data, "data")).Bytes()...)))
			out = body
		case "Download":
			body := msg("google.api.HttpBody")
			body.Set(field(body, "content_type"), protoreflect.ValueOfString("text/csv"))
			body.Set(field(body, "data"), protoreflect.ValueOfBytes([]byte("name,size\n"+in.Get(field(in, "name")).String()+",3\n")))
			out = body
		}
		return stream.SendMsg(out)
	}))
	ln := gatewaytest.Listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// TestRESTTypes calls the kitchen sink over REST through the gateway:
// every well-known type round-trips in its proto3 JSON form, a FieldMask
// travels as a query parameter, and google.api.HttpBody is the raw body
// both ways.
func TestRESTTypes(t *testing.T) {
	t.Parallel()
	addr := kitchenSinkBackend(t)
	g := gatewaytest.Start(t, &configv1.Snapshot{
		Clusters: []*configv1.Cluster{{Name: "sink", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: addr}}}},
		Services: []*configv1.Service{{
			Id: "sink", Team: "t", Name: "portico.test.v1.KitchenSink", Cluster: "sink", Auth: gatewaytest.Public,
			Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_Sources{Sources: &configv1.ProtoSources{
				Files: []*configv1.ProtoFile{{Name: "sink.proto", Content: kitchenSinkProto}},
			}}},
		}},
	}, nil)
	hc := gatewaytest.HTTP1Client(t)
	// Answers list unset fields as null (grpc-gateway's default too):
	// compared without null members, on both sides.
	jsonEqual := func(t *testing.T, got []byte, want string) {
		t.Helper()
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("answer %q: %v", got, err)
		}
		if err := json.Unmarshal([]byte(want), &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(dropNulls(g), dropNulls(w)) {
			t.Errorf("answer\n %s\nwant\n %s", got, want)
		}
	}

	// Every well-known type, in and out.
	sink := `{
		"id": "s-1",
		"at": "2026-11-30T01:02:03.500Z",
		"ttl": "90.250s",
		"mask": "attrs.owner,count",
		"attrs": {"owner": "team-a", "tags": ["x", "y"], "limits": {"n": 3}, "off": null, "on": true},
		"value": [1, "two", {"three": 3}],
		"extra": {"@type": "type.googleapis.com/google.protobuf.Duration", "value": "1.500s"},
		"count": "9007199254740993",
		"flag": false,
		"list": [null, 2.5],
		"note": "",
		"blob": "AAEC"
	}`
	resp, body := gatewaytest.Do(t, hc, "POST", g.URL()+"/v1/sinks", sink, map[string]string{"Content-Type": "application/json"})
	if resp.StatusCode != 200 {
		t.Fatalf("Echo: %d %s", resp.StatusCode, body)
	}
	jsonEqual(t, body, sink)

	// An Any of one of the service's own messages.
	own := `{"id": "s-2", "extra": {"@type": "type.googleapis.com/portico.test.v1.DownloadRequest", "name": "n"}}`
	resp, body = gatewaytest.Do(t, hc, "POST", g.URL()+"/v1/sinks", own, map[string]string{"Content-Type": "application/json"})
	if resp.StatusCode != 200 {
		t.Fatalf("Echo, own Any: %d %s", resp.StatusCode, body)
	}
	jsonEqual(t, body, own)

	// Bad values of well-known types are the caller's fault.
	for _, bad := range []string{
		`{"at": "yesterday"}`, `{"ttl": "5 minutes"}`, `{"count": "many"}`,
		`{"extra": {"@type": "type.googleapis.com/no.such.Type"}}`, `{"mask": 7}`,
	} {
		resp, body = gatewaytest.Do(t, hc, "POST", g.URL()+"/v1/sinks", bad, map[string]string{"Content-Type": "application/json"})
		if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("Echo %s: %d %s, want a 400 problem", bad, resp.StatusCode, body)
		}
	}

	// A FieldMask in the query, the resource in the body, its id in the
	// path.
	resp, body = gatewaytest.Do(t, hc, "PATCH", g.URL()+"/v1/sinks/s-3?update_mask=attrs.owner,ttl", `{"ttl": "1s"}`, map[string]string{"Content-Type": "application/json"})
	if resp.StatusCode != 200 {
		t.Fatalf("Patch: %d %s", resp.StatusCode, body)
	}
	jsonEqual(t, body, `{"id": "s-3", "ttl": "1s", "mask": "attrs.owner,ttl"}`)

	// HttpBody in: the raw body and its content type; out: the same.
	resp, body = gatewaytest.Do(t, hc, "PUT", g.URL()+"/v1/blobs/report.bin", "\x00\x01binary\xff", map[string]string{"Content-Type": "application/octet-stream"})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/octet-stream" || string(body) != "report.bin:\x00\x01binary\xff" {
		t.Errorf("Upload: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	resp, body = gatewaytest.Do(t, hc, "GET", g.URL()+"/v1/blobs/sizes", "", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/csv" || string(body) != "name,size\nsizes,3\n" {
		t.Errorf("Download: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

// dropNulls removes the null members of JSON objects in v.
func dropNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil {
				delete(v, k)
			} else {
				v[k] = dropNulls(e)
			}
		}
	case []any:
		for i, e := range v {
			v[i] = dropNulls(e)
		}
	}
	return v
}
