package transcode_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http/httptest"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/portico-gw/portico/gateway/snapshot"
	"github.com/portico-gw/portico/gateway/transcode"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
)

// BenchmarkValidate is the edge validation of one 2 KB request message:
// read the frame, decode it (hyperpb), check its buf.validate rules, and
// hand the frame on.
func BenchmarkValidate(b *testing.B) {
	set, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(demov1.File_portico_demo_v1_orders_proto),
	}})
	if err != nil {
		b.Fatal(err)
	}
	s, err := snapshot.Compile(&configv1.Snapshot{
		Clusters: []*configv1.Cluster{{Name: "orders", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: "127.0.0.1:1"}}}},
		Services: []*configv1.Service{{Id: "orders", Team: "t", Name: "portico.demo.v1.OrdersService", Cluster: "orders",
			Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: set}}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	ts, err := transcode.New(s.Services, nil)
	if err != nil {
		b.Fatal(err)
	}
	var route *snapshot.Route
	for i := range s.Routes {
		if s.Routes[i].ID == "orders.CreateOrder" {
			route = &s.Routes[i]
		}
	}
	// 64 line items make a 2 KB message with 193 rules to check (64
	// patterns); 8 make a 250-byte one with 25.
	for _, items := range []int{8, 64} {
		b.Run(fmt.Sprintf("items=%d", items), func(b *testing.B) {
			order := &demov1.Order{CustomerId: "c-42"}
			for i := range items {
				order.Items = append(order.Items, &demov1.LineItem{Sku: fmt.Sprintf("SKU-%05d-BLUE-XL", i), Quantity: int32(i%9 + 1), UnitPriceCents: int64(1000 + i)})
			}
			msg, err := proto.Marshal(&demov1.CreateOrderRequest{Order: order})
			if err != nil {
				b.Fatal(err)
			}
			frame := make([]byte, 5+len(msg))
			binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
			copy(frame[5:], msg)
			b.ReportMetric(float64(len(msg)), "msg-bytes")
			b.ReportAllocs()
			body := bytes.NewReader(frame)
			r := httptest.NewRequest("POST", "/portico.demo.v1.OrdersService/CreateOrder", nil)
			for b.Loop() {
				body.Reset(frame)
				r.Body = io.NopCloser(body)
				if p := ts.Validate(r, route); p != nil {
					b.Fatal(p.Detail)
				}
				if n, _ := io.Copy(io.Discard, r.Body); n != int64(len(frame)) {
					b.Fatalf("replayed %d bytes of %d", n, len(frame))
				}
			}
		})
	}
}
