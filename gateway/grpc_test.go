package gateway_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/cmd/portico/demo"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/testca"
)

func ordersClient(t *testing.T) (demov1.OrdersServiceClient, *gatewaytest.Gateway) {
	t.Helper()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), nil)
	return demov1.NewOrdersServiceClient(g.GRPCConn(t)), g
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestGRPCUnary(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t)
	ctx := testContext(t)

	var header, trailer metadata.MD
	ctx2 := metadata.AppendToOutgoingContext(ctx,
		"x-demo-trailer", "t-value",
		"x-demo-echo-md", "x-auth-subject,x-request-id,traceparent,x-forwarded-for",
		"x-auth-subject", "forged",
	)
	resp, err := client.GetOrder(ctx2, &demov1.GetOrderRequest{OrderId: "o-1001"}, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatalf("GetOrder: %v", err)
	}
	if resp.GetOrder().GetOrderId() != "o-1001" || resp.GetOrder().GetCustomerId() != "c-42" {
		t.Errorf("GetOrder = %v", resp)
	}
	if got := trailer.Get("x-demo-trailer"); len(got) != 1 || got[0] != "t-value" {
		t.Errorf("trailer x-demo-trailer = %v, want [t-value]", got)
	}
	if got := header.Get("x-demo-echo-x-auth-subject"); len(got) != 0 {
		t.Errorf("backend received client-sent x-auth-subject %v", got)
	}
	rid := header.Get("x-request-id")
	if len(rid) != 1 || header.Get("x-demo-echo-x-request-id")[0] != rid[0] {
		t.Errorf("x-request-id: response %v, backend saw %v; want the same id", rid, header.Get("x-demo-echo-x-request-id"))
	}
	if len(header.Get("x-demo-echo-traceparent")) != 1 || len(header.Get("x-demo-echo-x-forwarded-for")) != 1 {
		t.Errorf("backend did not get traceparent/x-forwarded-for: %v", header)
	}

	created, err := client.CreateOrder(ctx, &demov1.CreateOrderRequest{Order: &demov1.Order{
		CustomerId: "c-9",
		Items:      []*demov1.LineItem{{Sku: "WIDGET-1", Quantity: 2, UnitPriceCents: 150}},
	}})
	if err != nil || created.GetOrder().GetTotalCents() != 300 {
		t.Fatalf("CreateOrder = %v, %v; want total 300", created, err)
	}
}

func TestGRPCStatusPassThrough(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t)
	ctx := testContext(t)
	for _, code := range []codes.Code{codes.NotFound, codes.PermissionDenied, codes.Unavailable, codes.ResourceExhausted, codes.Internal} {
		ctx2 := metadata.AppendToOutgoingContext(ctx, "x-demo-fail", fmt.Sprint(int(code)))
		_, err := client.GetOrder(ctx2, &demov1.GetOrderRequest{OrderId: "o-1001"})
		if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), "x-demo-fail") {
			t.Errorf("x-demo-fail %v: got %v, want the backend's status intact", code, err)
		}
	}
	_, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-404404"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("unknown order: %v, want NotFound", err)
	}
}

func TestGRPCServerStreaming(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t)
	stream, err := client.WatchOrders(testContext(t), &demov1.WatchOrdersRequest{CustomerId: "c-42", MaxEvents: 25})
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv after %d events: %v", n, err)
		}
		n++
		if ev.GetEvent().GetSequence() != n {
			t.Fatalf("event %d has sequence %d", n, ev.GetEvent().GetSequence())
		}
	}
	if n != 25 {
		t.Errorf("got %d events, want 25", n)
	}
}

func TestGRPCClientStreaming(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t)
	stream, err := client.ImportOrders(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	for i := range n {
		err := stream.Send(&demov1.ImportOrdersRequest{Order: &demov1.Order{
			CustomerId: "c-1",
			Items:      []*demov1.LineItem{{Sku: "BULK-" + fmt.Sprint(i%10), Quantity: 1, UnitPriceCents: 10}},
		}})
		if err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetImported() != n || resp.GetTotalCents() != n*10 {
		t.Errorf("ImportOrders = %v, want %d imported, %d cents", resp, n, n*10)
	}
}

func TestGRPCBidi(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t)
	stream, err := client.SyncOrders(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	statuses := []demov1.OrderStatus{demov1.OrderStatus_ORDER_STATUS_PAID, demov1.OrderStatus_ORDER_STATUS_SHIPPED, demov1.OrderStatus_ORDER_STATUS_DELIVERED}
	// Interleaved: each response arrives before the next request is sent,
	// which only works if both directions stream through the gateway.
	for i := range 200 {
		st := statuses[i%len(statuses)]
		if err := stream.Send(&demov1.SyncOrdersRequest{OrderId: "o-1002", Status: st}); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		if resp.GetEvent().GetStatus() != st {
			t.Fatalf("event %d status %v, want %v", i, resp.GetEvent().GetStatus(), st)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("after CloseSend: %v, want EOF", err)
	}
}

// TestGRPCBidiBackendClosesFirst: the backend ends the stream while the
// client is still sending. The client must see the status promptly, not
// hang until its deadline.
func TestGRPCBidiBackendClosesFirst(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-demo-close-first", "1", "x-demo-trailer", "bye")
	stream, err := client.SyncOrders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&demov1.SyncOrdersRequest{OrderId: "o-1002", Status: demov1.OrderStatus_ORDER_STATUS_PAID}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("first Recv: %v", err)
	}
	start := time.Now()
	// Keep sending; the server has already finished.
	go func() {
		for i := 0; i < 1000; i++ {
			if stream.Send(&demov1.SyncOrdersRequest{OrderId: "o-1002", Status: demov1.OrderStatus_ORDER_STATUS_SHIPPED}) != nil {
				return
			}
		}
	}()
	_, err = stream.Recv()
	if err != io.EOF {
		t.Fatalf("Recv after the server finished: %v, want EOF (status OK)", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("stream end took %v", el)
	}
	if got := stream.Trailer().Get("x-demo-trailer"); len(got) != 1 || got[0] != "bye" {
		t.Errorf("trailer = %v, want [bye]", got)
	}
}

func TestGRPCDeadlines(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t)

	// The client's deadline is shorter than the route's: it travels as
	// grpc-timeout and the backend gives up in time.
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-demo-delay-ms", "5000"), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1001"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("GetOrder with 200ms deadline: %v, want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("deadline took %v to fire", el)
	}

}

// TestGRPCRouteTimeout: a client without a deadline is still bound by the
// route's timeout, which the gateway enforces (the backend is not told of
// a deadline the client did not set).
func TestGRPCRouteTimeout(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	cfg := gatewaytest.DemoSnapshot(d)
	cfg.Routes[0].Timeout = durationpb.New(300 * time.Millisecond)
	g := gatewaytest.Start(t, cfg, nil)
	client := demov1.NewOrdersServiceClient(g.GRPCConn(t))

	start := time.Now()
	ctx := metadata.AppendToOutgoingContext(testContext(t), "x-demo-delay-ms", "5000")
	_, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1001"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("slow backend behind a 300ms route: %v, want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("route timeout took %v to fire", el)
	}
}

// TestGRPCTimeoutHeader: what a gRPC backend receives: a grpc-timeout
// only when the client set a deadline, no larger than the route's timeout
// or the client's, and TE: trailers.
func TestGRPCTimeoutHeader(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 2)
	backend := gatewaytest.Listen(t)
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "5")
		w.Header().Set("Grpc-Message", "nothing here")
	})}
	go srv.Serve(backend)
	t.Cleanup(func() { srv.Close() })

	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{{Name: "g", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: backend.Addr().String()}}}},
		Routes:   []*configv1.Route{{Id: "g", Team: "t", Path: "/x.v1.X/*", Cluster: "g", Timeout: durationpb.New(2 * time.Second), Auth: public}},
	}
	g := gatewaytest.Start(t, cfg, nil)
	cc := g.GRPCConn(t)

	for _, tc := range []struct {
		clientDeadline time.Duration
		max            time.Duration
	}{
		{0, 0},
		{500 * time.Millisecond, 500 * time.Millisecond},
		{time.Hour, 2 * time.Second},
	} {
		ctx := context.Background() // no deadline
		if tc.clientDeadline > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.Background(), tc.clientDeadline)
			defer cancel()
		}
		err := cc.Invoke(ctx, "/x.v1.X/Y", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
		if status.Code(err) != codes.NotFound || status.Convert(err).Message() != "nothing here" {
			t.Errorf("trailers-only status: %v, want NotFound \"nothing here\"", err)
		}
		h := <-got
		if tc.max == 0 {
			if v, ok := h["Grpc-Timeout"]; ok {
				t.Errorf("no client deadline: backend grpc-timeout %q, want none", v)
			}
			continue
		}
		d, err := parseGRPCTimeout(h.Get("Grpc-Timeout"))
		if err != nil || d > tc.max || d < tc.max/2 {
			t.Errorf("client deadline %v: backend grpc-timeout %q (%v), want about %v and no more", tc.clientDeadline, h.Get("Grpc-Timeout"), d, tc.max)
		}
		if h.Get("Te") != "trailers" {
			t.Errorf("backend TE = %q, want trailers", h.Get("Te"))
		}
	}
}

// TestGRPCUpstreamEndsWhileClientSends: when the upstream exchange ends
// before an answer while the client is still sending (its stream open),
// the answer says why the upstream ended, not that the client's body was
// malformed: the transport closes the request body then, and the read it
// was blocked in fails with that close.
func TestGRPCUpstreamEndsWhileClientSends(t *testing.T) {
	t.Parallel()
	backend := gatewaytest.Listen(t)
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/x.v1.X/Reset":
			// Read the first message, then reset the stream.
			_, _ = io.ReadFull(r.Body, make([]byte, 5))
			panic(http.ErrAbortHandler)
		default:
			<-r.Context().Done() // never answer
		}
	})}
	go srv.Serve(backend)
	t.Cleanup(func() { srv.Close() })

	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{{Name: "g", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: backend.Addr().String()}}}},
		Routes:   []*configv1.Route{{Id: "g", Team: "t", Path: "/x.v1.X/*", Cluster: "g", Timeout: durationpb.New(300 * time.Millisecond), Auth: public}},
	}
	g := gatewaytest.Start(t, cfg, nil)
	cc := g.GRPCConn(t)
	for _, tc := range []struct {
		method string
		want   codes.Code
	}{
		{"/x.v1.X/Slow", codes.DeadlineExceeded}, // the route's timeout
		{"/x.v1.X/Reset", codes.Unavailable},     // upstream_error
	} {
		stream, err := cc.NewStream(testContext(t), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, tc.method)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.SendMsg(&healthpb.HealthCheckRequest{Service: "s"}); err != nil {
			t.Fatal(err)
		}
		// No CloseSend: the request stays open.
		err = stream.RecvMsg(&healthpb.HealthCheckResponse{})
		if status.Code(err) != tc.want {
			t.Errorf("%s with the request still open: %v, want %v", tc.method, err, tc.want)
		}
	}
}

func parseGRPCTimeout(v string) (time.Duration, error) {
	if len(v) < 2 {
		return 0, fmt.Errorf("bad grpc-timeout %q", v)
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil {
		return 0, err
	}
	unit := map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second, 'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}[v[len(v)-1]]
	if unit == 0 {
		return 0, fmt.Errorf("bad grpc-timeout unit %q", v)
	}
	return time.Duration(n) * unit, nil
}

func TestGRPCErrorsFromGateway(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	cfg := gatewaytest.DemoSnapshot(d)
	dead := gatewaytest.Listen(t)
	deadAddr := dead.Addr().String()
	dead.Close()
	cfg.Clusters[0].Endpoints[0].Address = deadAddr // orders → nothing listening
	g := gatewaytest.Start(t, cfg, nil)
	cc := g.GRPCConn(t)
	ctx := testContext(t)

	_, err := demov1.NewOrdersServiceClient(cc).GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "upstream_unavailable") {
		t.Errorf("dead upstream: %v, want Unavailable upstream_unavailable", err)
	}

	// No route: Unimplemented, as a gRPC server says for an unknown method.
	err = cc.Invoke(ctx, "/acme.nothing.v1.Nothing/Call", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(status.Convert(err).Message(), "no_route") {
		t.Errorf("unknown method: %v, want Unimplemented no_route", err)
	}
}

func TestGRPCOverTLS(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), nil)
	cc, err := grpc.NewClient(g.TLSAddr, grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(g.CA, "")))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := healthpb.NewHealthClient(cc).Check(testContext(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health over TLS: %v, %v", resp, err)
	}
	_, err = demov1.NewOrdersServiceClient(cc).GetOrder(testContext(t), &demov1.GetOrderRequest{OrderId: "o-1003"})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGRPCUpstreamTLS: gRPC to a backend over TLS with a pinned CA, all four
// RPC kinds' framing carried over HTTP/2 with trailers.
func TestGRPCUpstreamTLS(t *testing.T) {
	t.Parallel()
	ca := testca.New(t, "backend CA")
	ln := tls.NewListener(gatewaytest.Listen(t), &tls.Config{
		Certificates: []tls.Certificate{ca.Issue(t, "orders.internal", false, "orders.internal").TLS},
		NextProtos:   []string{"h2"},
	})
	srv := demo.NewOrdersServer(demo.Options{WatchInterval: 10 * time.Millisecond})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)

	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{{
			Name: "orders", Protocol: configv1.Protocol_PROTOCOL_GRPC,
			Endpoints: []*configv1.Endpoint{{Address: ln.Addr().String()}},
			Tls:       &configv1.UpstreamTLS{ServerName: "orders.internal", CaPem: string(ca.PEM)},
		}},
		Routes: []*configv1.Route{{Id: "orders", Team: "demo", Methods: []string{"POST"}, Path: "/portico.demo.v1.OrdersService/*", Cluster: "orders", Auth: public}},
	}
	g := gatewaytest.Start(t, cfg, nil)
	client := demov1.NewOrdersServiceClient(g.GRPCConn(t))
	ctx := testContext(t)

	var trailer metadata.MD
	if _, err := client.GetOrder(metadata.AppendToOutgoingContext(ctx, "x-demo-trailer", "tls"), &demov1.GetOrderRequest{OrderId: "o-1001"}, grpc.Trailer(&trailer)); err != nil {
		t.Fatalf("GetOrder over an upstream TLS hop: %v", err)
	}
	if got := trailer.Get("x-demo-trailer"); len(got) != 1 || got[0] != "tls" {
		t.Errorf("trailer = %v, want [tls]", got)
	}
	stream, err := client.WatchOrders(ctx, &demov1.WatchOrdersRequest{CustomerId: "c-42", MaxEvents: 5})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if _, err := stream.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("WatchOrders: %v", err)
		}
		n++
	}
	if n != 5 {
		t.Errorf("WatchOrders over TLS: %d events, want 5", n)
	}
	bidi, err := client.SyncOrders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := bidi.Send(&demov1.SyncOrdersRequest{OrderId: "o-1003", Status: demov1.OrderStatus_ORDER_STATUS_DELIVERED}); err != nil {
		t.Fatal(err)
	}
	if resp, err := bidi.Recv(); err != nil || resp.GetEvent().GetStatus() != demov1.OrderStatus_ORDER_STATUS_DELIVERED {
		t.Fatalf("SyncOrders over TLS: %v, %v", resp, err)
	}
	_ = bidi.CloseSend()
	imp, err := client.ImportOrders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := imp.Send(&demov1.ImportOrdersRequest{Order: &demov1.Order{CustomerId: "c-5", Items: []*demov1.LineItem{{Sku: "TLS-1", Quantity: 1, UnitPriceCents: 7}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if resp, err := imp.CloseAndRecv(); err != nil || resp.GetImported() != 10 {
		t.Fatalf("ImportOrders over TLS: %v, %v", resp, err)
	}
}
