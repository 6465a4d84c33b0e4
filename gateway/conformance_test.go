package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/gen/portico/demo/v1/demov1connect"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// TestProtocolTable calls the demo orders service through the gateway in
// every protocol it serves — REST, Connect (JSON and proto), gRPC-Web and
// gRPC — operation by operation, and wants the same result from each: the
// same messages (as proto3 JSON), or the same error code.
func TestProtocolTable(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, rpcSnapshot(t, d.OrdersAddr()), nil)
	hc := gatewaytest.H2CClient(t)
	clients := map[string]demov1connect.OrdersServiceClient{
		"connect-json":  demov1connect.NewOrdersServiceClient(hc, g.URL(), connect.WithProtoJSON()),
		"connect-proto": demov1connect.NewOrdersServiceClient(hc, g.URL()),
		"grpc-web":      demov1connect.NewOrdersServiceClient(hc, g.URL(), connect.WithGRPCWeb()),
		"grpc":          demov1connect.NewOrdersServiceClient(hc, g.URL(), connect.WithGRPC()),
	}
	// result is a call's outcome in comparable form.
	result := func(msgs []proto.Message, err error) string {
		if err != nil {
			return "error " + connect.CodeOf(err).String()
		}
		var parts []string
		for _, m := range msgs {
			b, _ := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
			var v any
			_ = json.Unmarshal(b, &v)
			nb, _ := json.Marshal(v)
			parts = append(parts, string(nb))
		}
		return strings.Join(parts, "\n")
	}
	// rest is the same call over REST: the body, or each line of a stream,
	// decoded into want's type.
	rest := func(method, path, body string, newMsg func() proto.Message, stream bool) string {
		req, _ := http.NewRequest(method, g.URL()+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			var p map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&p)
			code := connect.Code(0)
			_ = code.UnmarshalText([]byte(p["error"].(string)))
			return "error " + code.String()
		}
		var msgs []proto.Message
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		if !stream {
			sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
				if atEOF && len(data) > 0 {
					return len(data), data, nil
				}
				return 0, nil, nil
			})
		}
		for sc.Scan() {
			m := newMsg()
			if err := protojson.Unmarshal(sc.Bytes(), m); err != nil {
				t.Fatalf("%s %s: %q: %v", method, path, sc.Bytes(), err)
			}
			msgs = append(msgs, m)
		}
		return result(msgs, nil)
	}
	ctx := context.Background()
	one := func(m proto.Message, err error) ([]proto.Message, error) {
		if err != nil {
			return nil, err
		}
		return []proto.Message{m}, nil
	}
	for _, op := range []struct {
		name string
		rpc  func(c demov1connect.OrdersServiceClient) ([]proto.Message, error)
		rest string // the REST result, from rest()
	}{
		{"get", func(c demov1connect.OrdersServiceClient) ([]proto.Message, error) {
			r, err := c.GetOrder(ctx, connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-1001"}))
			if err != nil {
				return nil, err
			}
			return one(r.Msg.GetOrder(), nil) // REST's response_body is the order
		}, rest("GET", "/v1/orders/o-1001", "", func() proto.Message { return &demov1.Order{} }, false)},
		{"get unknown", func(c demov1connect.OrdersServiceClient) ([]proto.Message, error) {
			_, err := c.GetOrder(ctx, connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-9999"}))
			return nil, err
		}, rest("GET", "/v1/orders/o-9999", "", nil, false)},
		{"get invalid", func(c demov1connect.OrdersServiceClient) ([]proto.Message, error) {
			_, err := c.GetOrder(ctx, connect.NewRequest(&demov1.GetOrderRequest{OrderId: "nope"}))
			return nil, err
		}, rest("GET", "/v1/orders/nope", "", nil, false)},
		{"list filtered", func(c demov1connect.OrdersServiceClient) ([]proto.Message, error) {
			r, err := c.ListOrders(ctx, connect.NewRequest(&demov1.ListOrdersRequest{CustomerId: "c-42",
				Statuses: []demov1.OrderStatus{demov1.OrderStatus_ORDER_STATUS_PENDING, demov1.OrderStatus_ORDER_STATUS_PAID}, PageSize: 1}))
			return one(r.Msg, err)
		}, rest("GET", "/v1/customers/c-42/orders?statuses=ORDER_STATUS_PENDING&statuses=ORDER_STATUS_PAID&pageSize=1", "", func() proto.Message { return &demov1.ListOrdersResponse{} }, false)},
		{"search", func(c demov1connect.OrdersServiceClient) ([]proto.Message, error) {
			r, err := c.ListOrders(ctx, connect.NewRequest(&demov1.ListOrdersRequest{CustomerId: "c-42",
				Filter: &demov1.OrderFilter{Sku: "WIDGET-1"}}))
			return one(r.Msg, err)
		}, rest("POST", "/v1/customers/c-42/orders:search", `{"sku":"WIDGET-1"}`, func() proto.Message { return &demov1.ListOrdersResponse{} }, false)},
		{"create invalid", func(c demov1connect.OrdersServiceClient) ([]proto.Message, error) {
			_, err := c.CreateOrder(ctx, connect.NewRequest(&demov1.CreateOrderRequest{Order: &demov1.Order{CustomerId: "c-1"}}))
			return nil, err
		}, rest("POST", "/v1/orders", `{"customerId":"c-1"}`, nil, false)},
		{"watch", func(c demov1connect.OrdersServiceClient) ([]proto.Message, error) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			s, err := c.WatchOrders(ctx, connect.NewRequest(&demov1.WatchOrdersRequest{CustomerId: "c-7", MaxEvents: 1}))
			if err != nil {
				return nil, err
			}
			defer s.Close()
			var msgs []proto.Message
			for s.Receive() {
				ev := s.Msg().GetEvent()
				ev.EventTime = nil // made up per stream
				msgs = append(msgs, ev)
			}
			return msgs, s.Err()
		}, ""},
	} {
		want := ""
		for name, c := range clients {
			got := result(op.rpc(c))
			if want == "" {
				want = got
			}
			if got != want {
				t.Errorf("%s over %s:\n %s\nwant (as another protocol):\n %s", op.name, name, got, want)
			}
		}
		if op.rest != "" && op.rest != want {
			t.Errorf("%s over REST:\n %s\nwant:\n %s", op.name, op.rest, want)
		}
		if strings.HasPrefix(want, "error unknown") || want == "" {
			t.Errorf("%s: %q", op.name, want)
		}
	}
}
