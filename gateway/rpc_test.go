package gateway_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/gen/portico/demo/v1/demov1connect"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// rpcSnapshot exposes the demo orders service from its descriptor alone:
// no hand-written routes for it.
func rpcSnapshot(t testing.TB, addr string) *configv1.Snapshot {
	t.Helper()
	set, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(demov1.File_portico_demo_v1_orders_proto),
	}})
	if err != nil {
		t.Fatal(err)
	}
	return &configv1.Snapshot{
		Clusters: []*configv1.Cluster{{Name: "orders", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: addr}}}},
		Services: []*configv1.Service{{
			Id: "orders", Team: "demo", Name: "portico.demo.v1.OrdersService", Cluster: "orders", Auth: gatewaytest.Public,
			Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: set}},
		}},
	}
}

// TestRPCProtocols calls GetOrder through the gateway in every protocol:
// REST, Connect (JSON and proto), gRPC-Web and gRPC, against the demo gRPC
// backend, and gets the same order.
func TestRPCProtocols(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, rpcSnapshot(t, d.OrdersAddr()), nil)
	hc := gatewaytest.H2CClient(t)

	// REST: GET /v1/orders/{order_id}, response_body "order".
	resp, body := gatewaytest.Do(t, hc, "GET", g.URL()+"/v1/orders/o-1001", "", nil)
	var order map[string]any
	if resp.StatusCode != 200 || json.Unmarshal(body, &order) != nil || order["orderId"] != "o-1001" || order["customerId"] != "c-42" {
		t.Fatalf("REST GET: %d %s", resp.StatusCode, body)
	}

	for name, opts := range map[string][]connect.ClientOption{
		"connect-json":  {connect.WithProtoJSON()},
		"connect-proto": nil,
		"grpc-web":      {connect.WithGRPCWeb()},
		"grpc":          {connect.WithGRPC()},
	} {
		c := demov1connect.NewOrdersServiceClient(hc, g.URL(), opts...)
		got, err := c.GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-1001"}))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got.Msg.GetOrder().GetOrderId() != "o-1001" || got.Msg.GetOrder().GetCustomerId() != "c-42" {
			t.Errorf("%s: %v", name, got.Msg)
		}
		// Errors keep their code over every protocol.
		_, err = c.GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-9999"}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("%s: unknown order: %v, want not_found", name, err)
		}
	}
}

// TestRPCRESTCreate posts a body mapped to a field and gets a field back.
func TestRPCRESTCreate(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, rpcSnapshot(t, d.OrdersAddr()), nil)
	hc := gatewaytest.HTTP1Client(t)
	post := func(body string) (int, string) {
		t.Helper()
		resp, b := gatewaytest.Do(t, hc, "POST", g.URL()+"/v1/orders", body, nil)
		return resp.StatusCode, string(b)
	}
	st, body := post(`{"customerId":"c-7","items":[{"sku":"SKU-1","quantity":2,"unitPriceCents":150}]}`)
	var order struct {
		OrderID    string `json:"orderId"`
		TotalCents string `json:"totalCents"`
		CreateTime time.Time
	}
	if st != 200 || json.Unmarshal([]byte(body), &order) != nil || !strings.HasPrefix(order.OrderID, "o-") || order.TotalCents != "300" || order.CreateTime.IsZero() {
		t.Fatalf("POST /v1/orders: %d %s", st, body)
	}
	// An unknown JSON field is the caller's error, not the server's.
	if st, body := post(`{"customerId":"c-7","nope":1}`); st != 400 {
		t.Errorf("unknown field: %d %s, want 400", st, body)
	}
	if st, body := post(`{"customerId":`); st != 400 {
		t.Errorf("malformed JSON: %d %s, want 400", st, body)
	}
	// The backend's InvalidArgument maps to 400.
	if st, body := post(`{"customerId":"c-7"}`); st != 400 {
		t.Errorf("no items: %d %s, want 400", st, body)
	}
}

// TestRPCStreams runs the demo's server stream over Connect and gRPC-Web,
// and its bidi stream over Connect (HTTP/2).
func TestRPCStreams(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, rpcSnapshot(t, d.OrdersAddr()), nil)
	hc := gatewaytest.H2CClient(t)
	for name, opts := range map[string][]connect.ClientOption{"connect": nil, "grpc-web": {connect.WithGRPCWeb()}} {
		c := demov1connect.NewOrdersServiceClient(hc, g.URL(), opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, err := c.WatchOrders(ctx, connect.NewRequest(&demov1.WatchOrdersRequest{CustomerId: "c-42", MaxEvents: 3}))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := 0
		for stream.Receive() {
			n++
		}
		if err := stream.Err(); err != nil || n != 3 {
			t.Errorf("%s: %d events, %v; want 3", name, n, err)
		}
		_ = stream.Close()
		cancel()
	}

	c := demov1connect.NewOrdersServiceClient(hc, g.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bidi := c.SyncOrders(ctx)
	if err := bidi.Send(&demov1.SyncOrdersRequest{OrderId: "o-1001", Status: demov1.OrderStatus_ORDER_STATUS_SHIPPED}); err != nil {
		t.Fatal(err)
	}
	got, err := bidi.Receive()
	if err != nil || got.GetEvent().GetOrderId() != "o-1001" {
		t.Fatalf("bidi: %v, %v", got, err)
	}
	_ = bidi.CloseRequest()
	if _, err := bidi.Receive(); !errors.Is(err, io.EOF) {
		t.Errorf("bidi end: %v, want EOF", err)
	}
	_ = bidi.CloseResponse()
}

// badRequestOf returns the field violations of err's google.rpc.BadRequest
// detail as "field rule" strings, nil if it has none.
func badRequestOf(err error) []string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	var out []string
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			continue
		}
		if br, ok := v.(*errdetails.BadRequest); ok {
			for _, fv := range br.GetFieldViolations() {
				out = append(out, fv.GetField()+" "+fv.GetReason())
			}
		}
	}
	return out
}

// TestRPCValidation: a request that breaks the service's buf.validate
// rules is refused at the edge, with the violations, in every protocol.
// The demo backend checks order ids too, but without a BadRequest detail:
// the detail shows who answered.
func TestRPCValidation(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, rpcSnapshot(t, d.OrdersAddr()), nil)
	hc := gatewaytest.H2CClient(t)
	for name, opts := range map[string][]connect.ClientOption{
		"connect-json": {connect.WithProtoJSON()}, "connect-proto": nil,
		"grpc-web": {connect.WithGRPCWeb()}, "grpc": {connect.WithGRPC()},
		"grpc-json": {connect.WithGRPC(), connect.WithProtoJSON()},
	} {
		c := demov1connect.NewOrdersServiceClient(hc, g.URL(), opts...)
		if name == "grpc-json" {
			// gRPC in JSON goes through the transcoder to reach the
			// validation; the refusal's details do not survive it
			// (vanguard v0.4.0): the code and the message do.
			if _, err := c.GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-1001"})); err != nil {
				t.Errorf("%s: a valid call: %v", name, err)
			}
			_, err := c.GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "bad id"}))
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "order_id: does not match regex pattern") {
				t.Errorf("%s: %v; want invalid_argument naming order_id's pattern", name, err)
			}
			continue
		}
		_, err := c.GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "bad id"}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !slices.Equal(badRequestOf(err), []string{"order_id string.pattern"}) {
			t.Errorf("%s: %v, details %v; want invalid_argument with order_id string.pattern", name, err, badRequestOf(err))
		}
		_, err = c.CreateOrder(context.Background(), connect.NewRequest(&demov1.CreateOrderRequest{Order: &demov1.Order{
			CustomerId: "c-1", Items: []*demov1.LineItem{{Sku: "x", Quantity: 0}},
		}}))
		if got := badRequestOf(err); !slices.Equal(got, []string{"order.items[0].sku string.pattern", "order.items[0].quantity int32.gt_lte"}) {
			t.Errorf("%s: CreateOrder violations %v (%v)", name, got, err)
		}
	}

	// Streams: the first message passes, the second does not; the stream
	// fails with the refusal, the backend never sees the message.
	for name, opts := range map[string][]connect.ClientOption{
		"connect": nil, "grpc-web": {connect.WithGRPCWeb()}, "grpc": {connect.WithGRPC()},
		"grpc-json": {connect.WithGRPC(), connect.WithProtoJSON()},
	} {
		c := demov1connect.NewOrdersServiceClient(hc, g.URL(), opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		bidi := c.SyncOrders(ctx)
		if err := bidi.Send(&demov1.SyncOrdersRequest{OrderId: "o-1001", Status: demov1.OrderStatus_ORDER_STATUS_SHIPPED}); err != nil {
			t.Fatal(err)
		}
		if _, err := bidi.Receive(); err != nil {
			t.Fatalf("%s: first message: %v", name, err)
		}
		_ = bidi.Send(&demov1.SyncOrdersRequest{OrderId: "o-1001"}) // status unspecified
		_, err := bidi.Receive()
		if name == "grpc-json" {
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "status: must not be in list") {
				t.Errorf("%s: bidi, second message invalid: %v; want invalid_argument naming status", name, err)
			}
		} else if connect.CodeOf(err) != connect.CodeInvalidArgument || !slices.Equal(badRequestOf(err), []string{"status enum.not_in"}) {
			t.Errorf("%s: bidi, second message invalid: %v, details %v; want invalid_argument with status enum.not_in", name, err, badRequestOf(err))
		}
		_ = bidi.CloseResponse()

		// A client stream: the refusal comes before any response.
		cs := c.ImportOrders(ctx)
		_ = cs.Send(&demov1.ImportOrdersRequest{Order: &demov1.Order{CustomerId: "c-1", Items: []*demov1.LineItem{{Sku: "SKU-1", Quantity: 1}}}})
		_ = cs.Send(&demov1.ImportOrdersRequest{})
		_, err = cs.CloseAndReceive()
		if name == "grpc-json" {
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "order: value is required") {
				t.Errorf("%s: client stream, second message invalid: %v; want invalid_argument naming order", name, err)
			}
		} else if connect.CodeOf(err) != connect.CodeInvalidArgument || !slices.Equal(badRequestOf(err), []string{"order required"}) {
			t.Errorf("%s: client stream, second message invalid: %v, details %v; want invalid_argument with order required", name, err, badRequestOf(err))
		}
		cancel()
	}
}

// TestRPCValidationLimits: messages over the validation buffer are
// refused, and a service can turn validation off.
func TestRPCValidationLimits(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	cfg := rpcSnapshot(t, d.OrdersAddr())
	cfg.Services[0].MaxValidatedMessageBytes = 16
	g := gatewaytest.Start(t, cfg, nil)
	c := demov1connect.NewOrdersServiceClient(gatewaytest.H2CClient(t), g.URL(), connect.WithGRPC())
	_, err := c.GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-" + strings.Repeat("1", 30)}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("message over the validation buffer: %v, want resource_exhausted", err)
	}

	cfg = rpcSnapshot(t, d.OrdersAddr())
	cfg.Services[0].DisableValidation = true
	g = gatewaytest.Start(t, cfg, nil)
	c = demov1connect.NewOrdersServiceClient(gatewaytest.H2CClient(t), g.URL(), connect.WithGRPC())
	_, err = c.GetOrder(context.Background(), connect.NewRequest(&demov1.GetOrderRequest{OrderId: "bad id"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || badRequestOf(err) != nil {
		t.Errorf("validation off: %v, details %v; want the backend's own invalid_argument, no BadRequest", err, badRequestOf(err))
	}
}

// TestRPCRESTProblems: REST callers get errors as Problem Details, with
// the violations of a request that breaks the rules and the status
// details of a backend's error.
func TestRPCRESTProblems(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, rpcSnapshot(t, d.OrdersAddr()), nil)
	hc := gatewaytest.HTTP1Client(t)
	get := func(path string) (int, string, map[string]any) {
		t.Helper()
		resp, b := gatewaytest.Do(t, hc, "GET", g.URL()+path, "", nil)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return resp.StatusCode, resp.Header.Get("Content-Type"), m
	}
	st, ct, p := get("/v1/orders/bad%20id")
	if st != 400 || ct != "application/problem+json" || p["error"] != "invalid_argument" || p["request_id"] == "" {
		t.Fatalf("invalid id: %d %s %v", st, ct, p)
	}
	vs, _ := p["violations"].([]any)
	if len(vs) != 1 || vs[0].(map[string]any)["field"] != "order_id" || vs[0].(map[string]any)["rule"] != "string.pattern" {
		t.Errorf("violations %v, want order_id string.pattern", p["violations"])
	}
	st, ct, p = get("/v1/orders/o-9999")
	if st != 404 || ct != "application/problem+json" || p["error"] != "not_found" || p["title"] != "Not Found" || p["detail"] == "" {
		t.Errorf("unknown order: %d %s %v", st, ct, p)
	}
	// An unknown query parameter is the caller's error.
	st, _, p = get("/v1/orders/o-1001?nope=1")
	if st != 400 {
		t.Errorf("unknown query parameter: %d %v, want 400", st, p)
	}
}

// TestRPCGRPCWebText calls GetOrder in gRPC-Web's text mode, its request
// in two padded base64 segments, as browsers' clients may send it.
func TestRPCGRPCWebText(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, rpcSnapshot(t, d.OrdersAddr()), nil)
	msg, err := proto.Marshal(&demov1.GetOrderRequest{OrderId: "o-1001"})
	if err != nil {
		t.Fatal(err)
	}
	frame := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	body := base64.StdEncoding.EncodeToString(frame[:4]) + base64.StdEncoding.EncodeToString(frame[4:])
	req, _ := http.NewRequest("POST", g.URL()+"/portico.demo.v1.OrdersService/GetOrder", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/grpc-web-text")
	req.Header.Set("X-Grpc-Web", "1")
	resp, err := gatewaytest.HTTP1Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/grpc-web-text+proto" {
		t.Fatalf("%d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	// The answer: base64 segments of a message frame and a trailer frame.
	var raw []byte
	for s := string(b); s != ""; {
		end := strings.Index(s, "=")
		seg := s
		if end >= 0 {
			for end < len(s) && s[end] == '=' {
				end++
			}
			seg, s = s[:end], s[end:]
		} else {
			s = ""
		}
		dec, err := base64.StdEncoding.DecodeString(seg)
		if err != nil {
			t.Fatalf("segment %q: %v", seg, err)
		}
		raw = append(raw, dec...)
	}
	if len(raw) < 5 || raw[0] != 0 {
		t.Fatalf("decoded answer %q", raw)
	}
	n := int(raw[1])<<24 | int(raw[2])<<16 | int(raw[3])<<8 | int(raw[4])
	var got demov1.GetOrderResponse
	if err := proto.Unmarshal(raw[5:5+n], &got); err != nil || got.GetOrder().GetOrderId() != "o-1001" {
		t.Fatalf("message: %v %v", &got, err)
	}
	if trailer := string(raw[5+n:]); raw[5+n] != 0x80 || !strings.Contains(trailer, "grpc-status: 0") {
		t.Errorf("trailer frame %q, want grpc-status 0", trailer)
	}
}

// TestRPCRESTServerStream: a REST binding of a server-streaming method
// streams newline-delimited JSON, or server-sent events on request, each
// response message as it comes; errors before the first message are
// Problem Details.
func TestRPCRESTServerStream(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, rpcSnapshot(t, d.OrdersAddr()), nil)
	hc := gatewaytest.H2CClient(t)
	call := func(path, accept string) (*http.Response, string) {
		t.Helper()
		var h map[string]string
		if accept != "" {
			h = map[string]string{"Accept": accept}
		}
		resp, b := gatewaytest.Do(t, hc, "GET", g.URL()+path, "", h)
		return resp, string(b)
	}
	resp, body := call("/v1/customers/c-42/orders:watch?maxEvents=3", "")
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" || len(lines) != 3 {
		t.Fatalf("NDJSON: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	for i, l := range lines {
		var ev map[string]any // response_body "event": each line is an OrderEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev["orderId"] == nil || ev["sequence"] != strconv.Itoa(i+1) {
			t.Errorf("line %d: %s (%v)", i, l, err)
		}
	}
	resp, body = call("/v1/customers/c-42/orders:watch?max_events=2", "text/event-stream")
	if resp.Header.Get("Content-Type") != "text/event-stream" || strings.Count(body, "data: ") != 2 || !strings.HasSuffix(body, "\n\n") {
		t.Errorf("SSE: %q %q", resp.Header.Get("Content-Type"), body)
	}
	// A request that breaks the rules: refused before any event, as
	// Problem Details.
	resp, body = call("/v1/customers/bad/orders:watch", "")
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, "customer_id") {
		t.Errorf("bad customer: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	resp, _ = call("/v1/customers/c-42/orders:watch?nope=1", "")
	if resp.StatusCode != 400 {
		t.Errorf("unknown query parameter: %d, want 400", resp.StatusCode)
	}
}

// TestRPCDeadlines: the caller's deadline, in any protocol's form, and the
// route's timeout bound the call together; the smallest wins.
func TestRPCDeadlines(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	cfg := rpcSnapshot(t, d.OrdersAddr())
	g := gatewaytest.Start(t, cfg, nil)
	cfg2 := rpcSnapshot(t, d.OrdersAddr())
	cfg2.Services[0].Timeout = durationpb.New(300 * time.Millisecond)
	g2 := gatewaytest.Start(t, cfg2, nil)
	hc := gatewaytest.H2CClient(t)

	watch := func(url string, header func(http.Header)) (time.Duration, error) {
		c := demov1connect.NewOrdersServiceClient(hc, url)
		req := connect.NewRequest(&demov1.WatchOrdersRequest{CustomerId: "c-42"}) // never ends by itself
		header(req.Header())
		start := time.Now()
		stream, err := c.WatchOrders(context.Background(), req)
		if err != nil {
			return time.Since(start), err
		}
		defer stream.Close()
		for stream.Receive() {
		}
		return time.Since(start), stream.Err()
	}
	for name, tc := range map[string]struct {
		url    string
		header func(http.Header)
	}{
		"connect-timeout-ms": {g.URL(), func(h http.Header) { h.Set("Connect-Timeout-Ms", "300") }},
		"route timeout":      {g2.URL(), func(http.Header) {}},
		"smaller of both":    {g2.URL(), func(h http.Header) { h.Set("Connect-Timeout-Ms", "5000") }},
	} {
		took, err := watch(tc.url, tc.header)
		if connect.CodeOf(err) != connect.CodeDeadlineExceeded || took < 250*time.Millisecond || took > 5*time.Second {
			t.Errorf("%s: ended after %v with %v, want deadline_exceeded after about 300 ms", name, took, err)
		}
	}
}

// TestRPCConnectWithoutHeader: a plain JSON POST to a method's path is a
// Connect unary call, with Connect's answers, even without the
// Connect-Protocol-Version header.
func TestRPCConnectWithoutHeader(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, rpcSnapshot(t, d.OrdersAddr()), nil)
	hc := gatewaytest.HTTP1Client(t)
	post := func(body string) (int, string, map[string]any) {
		resp, b := gatewaytest.Do(t, hc, "POST", g.URL()+"/portico.demo.v1.OrdersService/GetOrder", body, nil)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return resp.StatusCode, resp.Header.Get("Content-Type"), m
	}
	if st, _, m := post(`{"order_id":"o-1001"}`); st != 200 || m["order"] == nil {
		t.Errorf("GetOrder: %d %v", st, m)
	}
	if st, ct, m := post(`{"order_id":"o-9999"}`); st != 404 || ct != "application/json" || m["code"] != "not_found" {
		t.Errorf("unknown order: %d %s %v, want a Connect not_found", st, ct, m)
	}
}

// TestRPCRESTTooLarge: a REST body over the validation buffer is 413, as
// on any route, though gRPC itself can only say ResourceExhausted.
func TestRPCRESTTooLarge(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	cfg := rpcSnapshot(t, d.OrdersAddr())
	cfg.Services[0].MaxValidatedMessageBytes = 64
	g := gatewaytest.Start(t, cfg, nil)
	resp, b := gatewaytest.Do(t, gatewaytest.HTTP1Client(t), "POST", g.URL()+"/v1/orders",
		`{"customerId":"c-7","items":[`+strings.Repeat(`{"sku":"SKU-1","quantity":2},`, 20)+`{"sku":"SKU-2","quantity":2}]}`, nil)
	if resp.StatusCode != 413 || !strings.Contains(string(b), `"error":"payload_too_large"`) {
		t.Errorf("%d %s, want 413 payload_too_large", resp.StatusCode, b)
	}
}

// TestRPCConnectRefusalsWithoutHeader: a plain JSON POST to a method's
// path is served as Connect, and so are the chain's refusals before the
// call (401, 403, 429, 413): Connect error JSON with the Connect code,
// the challenge and rate limit headers kept. A body that is neither JSON
// nor proto is no Connect call, and a REST path no method's: Problem
// Details for both.
func TestRPCConnectRefusalsWithoutHeader(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	cfg := rpcSnapshot(t, d.OrdersAddr())
	cfg.Scopes = []*configv1.Scope{{Name: "orders:read"}}
	cfg.Plans = []*configv1.Plan{{Name: "pro"}}
	svc := cfg.Services[0]
	svc.Auth = &configv1.RouteAuth{Scopes: []string{"orders:read"}}
	svc.MaxRequestBytes = 64
	svc.RateLimits = []*configv1.RateLimit{{Name: "tiny", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_CALLER, Rate: 0.001, Burst: 1}}
	reader, readerRec := gatewaytest.NewKey(t, "key-reader", "app-1", "tenant-1", "pro", "orders:read")
	noScope, noScopeRec := gatewaytest.NewKey(t, "key-none", "app-2", "tenant-1", "pro")
	other, otherRec := gatewaytest.NewKey(t, "key-other", "app-3", "tenant-1", "pro", "orders:read")
	cfg.Keys = []*configv1.KeyRecord{readerRec, noScopeRec, otherRec}
	g := gatewaytest.Start(t, cfg, nil)
	hc := gatewaytest.HTTP1Client(t)

	const getOrder = "/portico.demo.v1.OrdersService/GetOrder"
	post := func(path, ct, body string, header map[string]string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", g.URL()+path, strings.NewReader(body))
		req.Header.Set("Content-Type", ct)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("POST %s: %d %q is not JSON", path, resp.StatusCode, b)
		}
		return resp, m
	}
	isConnect := func(t *testing.T, what string, resp *http.Response, m map[string]any, status int, code string) {
		t.Helper()
		if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/json" || m["code"] != code || m["type"] != nil {
			t.Errorf("%s: %d %s %v, want %d and a Connect error %s", what, resp.StatusCode, resp.Header.Get("Content-Type"), m, status, code)
		}
	}
	const order = `{"order_id":"o-1001"}`

	resp, m := post(getOrder, "application/json", order, nil)
	isConnect(t, "no credential", resp, m, 401, "unauthenticated")
	if !strings.HasPrefix(resp.Header.Get("Www-Authenticate"), `Bearer realm="portico"`) {
		t.Errorf("no credential: WWW-Authenticate %q, want the Bearer challenge", resp.Header.Get("Www-Authenticate"))
	}
	resp, m = post(getOrder, "application/json; charset=utf-8", order, map[string]string{"X-Api-Key": noScope})
	isConnect(t, "no scope", resp, m, 403, "permission_denied")
	if !strings.Contains(resp.Header.Get("Www-Authenticate"), `error="insufficient_scope"`) {
		t.Errorf("no scope: WWW-Authenticate %q, want insufficient_scope", resp.Header.Get("Www-Authenticate"))
	}
	resp, m = post(getOrder, "application/json", `{"order_id":"`+strings.Repeat("x", 100)+`"}`, map[string]string{"X-Api-Key": reader})
	isConnect(t, "too large", resp, m, 429, "resource_exhausted")
	resp, m = post(getOrder, "application/json", order, map[string]string{"X-Api-Key": reader})
	if resp.StatusCode != 200 || m["order"] == nil {
		t.Fatalf("first call: %d %v", resp.StatusCode, m)
	}
	resp, m = post(getOrder, "application/json", order, map[string]string{"X-Api-Key": reader})
	isConnect(t, "rate limited", resp, m, 429, "resource_exhausted")
	if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Ratelimit") == "" || resp.Header.Get("Ratelimit-Policy") == "" {
		t.Errorf("rate limited: Retry-After %q, RateLimit %q, RateLimit-Policy %q, want all three",
			resp.Header.Get("Retry-After"), resp.Header.Get("Ratelimit"), resp.Header.Get("Ratelimit-Policy"))
	}
	if details, _ := m["details"].([]any); len(details) != 1 {
		t.Errorf("rate limited: details %v, want a RetryInfo", m["details"])
	}

	// The transcoder's own refusals before the call speak Connect too.
	resp, m = post(getOrder, "application/json", order, map[string]string{"X-Api-Key": other, "Content-Encoding": "zstd"})
	isConnect(t, "zstd", resp, m, 501, "unimplemented")
	if resp.Header.Get("Accept-Encoding") != "gzip" {
		t.Errorf("zstd: Accept-Encoding %q, want gzip", resp.Header.Get("Accept-Encoding"))
	}

	// Not Connect calls: Problem Details, as before.
	resp, m = post(getOrder, "text/plain", order, nil)
	if resp.StatusCode != 401 || resp.Header.Get("Content-Type") != "application/problem+json" || m["error"] != "unauthenticated" {
		t.Errorf("text/plain: %d %s %v, want a 401 problem", resp.StatusCode, resp.Header.Get("Content-Type"), m)
	}
	resp, m = post("/v1/orders", "application/json", `{"customerId":"c-7"}`, nil)
	if resp.StatusCode != 401 || resp.Header.Get("Content-Type") != "application/problem+json" || m["error"] != "unauthenticated" {
		t.Errorf("REST POST: %d %s %v, want a 401 problem", resp.StatusCode, resp.Header.Get("Content-Type"), m)
	}
}
