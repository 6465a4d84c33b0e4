package demo_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/google/go-cmp/cmp"

	"github.com/portico-gw/portico/cmd/portico/demo"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
)

const ordersService = "portico.demo.v1.OrdersService"

// ordersClient starts the demo backends and returns a client of Orders and
// its connection.
func ordersClient(t *testing.T, opts demo.Options) (demov1.OrdersServiceClient, *grpc.ClientConn) {
	t.Helper()
	s := startServers(t, opts)
	conn := dial(t, s.OrdersAddr())
	return demov1.NewOrdersServiceClient(conn), conn
}

func newOrder(customer string, items ...*demov1.LineItem) *demov1.Order {
	return &demov1.Order{CustomerId: customer, Items: items}
}

func TestGetOrder(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t, demo.Options{})
	tests := []struct {
		id       string
		want     *demov1.Order // compared without create_time
		wantCode codes.Code
	}{
		{id: "o-1001", want: &demov1.Order{
			OrderId:    "o-1001",
			CustomerId: "c-42",
			Items: []*demov1.LineItem{
				{Sku: "WIDGET-1", Quantity: 2, UnitPriceCents: 1250},
				{Sku: "GADGET-2", Quantity: 1, UnitPriceCents: 4999},
			},
			Status:     demov1.OrderStatus_ORDER_STATUS_PENDING,
			TotalCents: 7499,
		}},
		{id: "o-1003", want: &demov1.Order{
			OrderId:    "o-1003",
			CustomerId: "c-7",
			Items:      []*demov1.LineItem{{Sku: "WIDGET-1", Quantity: 10, UnitPriceCents: 1100}},
			Status:     demov1.OrderStatus_ORDER_STATUS_SHIPPED,
			TotalCents: 11000,
		}},
		{id: "o-999999", wantCode: codes.NotFound},
		{id: "", wantCode: codes.InvalidArgument},
		{id: "order-1", wantCode: codes.InvalidArgument},
	}
	for _, tt := range tests {
		resp, err := client.GetOrder(testContext(t), &demov1.GetOrderRequest{OrderId: tt.id})
		if code := status.Code(err); code != tt.wantCode {
			t.Errorf("GetOrder(%q) = %v, want code %v", tt.id, err, tt.wantCode)
			continue
		}
		if tt.want == nil {
			continue
		}
		if resp.GetOrder().GetCreateTime() == nil {
			t.Errorf("GetOrder(%q) create_time is unset", tt.id)
		}
		diff := cmp.Diff(tt.want, resp.GetOrder(), protocmp.Transform(), protocmp.IgnoreFields(&demov1.Order{}, "create_time"))
		if diff != "" {
			t.Errorf("GetOrder(%q) order mismatch (-want +got):\n%s", tt.id, diff)
		}
	}
	_, err := client.GetOrder(testContext(t), &demov1.GetOrderRequest{OrderId: "o-999999"})
	if msg := status.Convert(err).Message(); msg != `order "o-999999": not found` {
		t.Errorf("GetOrder(o-999999) message = %q, want it to name the order", msg)
	}
}

func TestCreateOrder(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t, demo.Options{})
	ctx := testContext(t)
	before := time.Now()
	in := newOrder("c-99",
		&demov1.LineItem{Sku: "WIDGET-1", Quantity: 3, UnitPriceCents: 1250},
		&demov1.LineItem{Sku: "GIZMO-3", Quantity: 1, UnitPriceCents: 300},
	)
	in.OrderId = "o-chosen" // the server assigns ids
	in.Status = demov1.OrderStatus_ORDER_STATUS_DELIVERED
	in.TotalCents = 1
	created, err := client.CreateOrder(ctx, &demov1.CreateOrderRequest{Order: in})
	if err != nil {
		t.Fatalf("CreateOrder() = %v", err)
	}
	got := created.GetOrder()
	if got.GetOrderId() != "o-1004" || got.GetTotalCents() != 4050 || got.GetStatus() != demov1.OrderStatus_ORDER_STATUS_PENDING {
		t.Errorf("CreateOrder() = id %q total %d status %v, want o-1004 4050 PENDING", got.GetOrderId(), got.GetTotalCents(), got.GetStatus())
	}
	if ct := got.GetCreateTime().AsTime(); ct.Before(before.Add(-time.Second)) || ct.After(time.Now().Add(time.Second)) {
		t.Errorf("CreateOrder() create_time = %v, want about %v", ct, before)
	}
	fetched, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: got.GetOrderId()})
	if err != nil || !proto.Equal(fetched.GetOrder(), got) {
		t.Errorf("GetOrder(%q) = %v, %v; want the created order %v", got.GetOrderId(), fetched.GetOrder(), err, got)
	}
	next, err := client.CreateOrder(ctx, &demov1.CreateOrderRequest{Order: newOrder("c-99", &demov1.LineItem{Sku: "ABC", Quantity: 1})})
	if err != nil || next.GetOrder().GetOrderId() != "o-1005" {
		t.Errorf("second CreateOrder() = %v, %v; want o-1005", next.GetOrder().GetOrderId(), err)
	}

	invalid := map[string]*demov1.Order{
		"no order":       nil,
		"no customer":    newOrder("", &demov1.LineItem{Sku: "ABC", Quantity: 1}),
		"bad customer":   newOrder("42", &demov1.LineItem{Sku: "ABC", Quantity: 1}),
		"no items":       newOrder("c-1"),
		"zero quantity":  newOrder("c-1", &demov1.LineItem{Sku: "ABC", Quantity: 0}),
		"huge quantity":  newOrder("c-1", &demov1.LineItem{Sku: "ABC", Quantity: 1001}),
		"negative price": newOrder("c-1", &demov1.LineItem{Sku: "ABC", Quantity: 1, UnitPriceCents: -1}),
		"bad sku":        newOrder("c-1", &demov1.LineItem{Sku: "a", Quantity: 1}),
	}
	for name, o := range invalid {
		_, err := client.CreateOrder(ctx, &demov1.CreateOrderRequest{Order: o})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("CreateOrder(%s) = %v, want InvalidArgument", name, err)
		}
	}
}

func TestWatchOrders(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t, demo.Options{WatchInterval: 5 * time.Millisecond})
	ctx := testContext(t)
	watch, err := client.WatchOrders(ctx, &demov1.WatchOrdersRequest{CustomerId: "c-42", MaxEvents: 6})
	if err != nil {
		t.Fatalf("WatchOrders() = %v", err)
	}
	type event struct {
		id     string
		status demov1.OrderStatus
		seq    uint64
	}
	var got []event
	for {
		resp, err := watch.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("WatchOrders Recv() = %v", err)
		}
		e := resp.GetEvent()
		if e.GetEventTime() == nil {
			t.Errorf("event %d has no event_time", e.GetSequence())
		}
		got = append(got, event{e.GetOrderId(), e.GetStatus(), e.GetSequence()})
	}
	// The seeds as they are, then each in turn one status further.
	want := []event{
		{"o-1001", demov1.OrderStatus_ORDER_STATUS_PENDING, 1},
		{"o-1002", demov1.OrderStatus_ORDER_STATUS_PAID, 2},
		{"o-1001", demov1.OrderStatus_ORDER_STATUS_PAID, 3},
		{"o-1002", demov1.OrderStatus_ORDER_STATUS_SHIPPED, 4},
		{"o-1001", demov1.OrderStatus_ORDER_STATUS_SHIPPED, 5},
		{"o-1002", demov1.OrderStatus_ORDER_STATUS_DELIVERED, 6},
	}
	if !slices.Equal(got, want) {
		t.Errorf("WatchOrders(c-42, max 6) events = %v, want %v", got, want)
	}

	// The watch makes events up; the store keeps its statuses.
	resp, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1001"})
	if err != nil || resp.GetOrder().GetStatus() != demov1.OrderStatus_ORDER_STATUS_PENDING {
		t.Errorf("GetOrder(o-1001) after a watch = %v, %v; want PENDING", resp.GetOrder().GetStatus(), err)
	}

	for _, req := range []*demov1.WatchOrdersRequest{
		{CustomerId: ""},
		{CustomerId: "c-42", MaxEvents: 10001},
	} {
		watch, err := client.WatchOrders(ctx, req)
		if err == nil {
			_, err = watch.Recv()
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("WatchOrders(%v) = %v, want InvalidArgument", req, err)
		}
	}
}

func TestWatchOrdersUntilCancel(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t, demo.Options{WatchInterval: time.Millisecond})
	ctx, cancel := context.WithCancel(testContext(t))
	watch, err := client.WatchOrders(ctx, &demov1.WatchOrdersRequest{CustomerId: "c-7"})
	if err != nil {
		t.Fatalf("WatchOrders() = %v", err)
	}
	for i := range 20 {
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("WatchOrders Recv() #%d = %v", i+1, err)
		}
		if seq := resp.GetEvent().GetSequence(); seq != uint64(i+1) {
			t.Fatalf("event #%d sequence = %d, want %d", i+1, seq, i+1)
		}
	}
	cancel()
	for {
		_, err := watch.Recv()
		if err == nil {
			continue // events already on the way
		}
		if status.Code(err) != codes.Canceled {
			t.Errorf("WatchOrders Recv() after cancel = %v, want Canceled", err)
		}
		break
	}
}

func TestImportOrders(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t, demo.Options{})
	ctx := testContext(t)
	imp, err := client.ImportOrders(ctx)
	if err != nil {
		t.Fatalf("ImportOrders() = %v", err)
	}
	kept := newOrder("c-5", &demov1.LineItem{Sku: "WIDGET-1", Quantity: 1, UnitPriceCents: 100})
	kept.OrderId = "o-imported1"
	kept.Status = demov1.OrderStatus_ORDER_STATUS_SHIPPED
	for _, o := range []*demov1.Order{
		kept,
		newOrder("c-5", &demov1.LineItem{Sku: "WIDGET-1", Quantity: 2, UnitPriceCents: 1000}),
		newOrder("c-6", &demov1.LineItem{Sku: "GADGET-2", Quantity: 3, UnitPriceCents: 10}),
	} {
		if err := imp.Send(&demov1.ImportOrdersRequest{Order: o}); err != nil {
			t.Fatalf("ImportOrders Send() = %v", err)
		}
	}
	resp, err := imp.CloseAndRecv()
	if err != nil {
		t.Fatalf("ImportOrders CloseAndRecv() = %v", err)
	}
	if resp.GetImported() != 3 || resp.GetTotalCents() != 2130 {
		t.Errorf("ImportOrders() = %v, want 3 imported, 2130 cents", resp)
	}
	got, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-imported1"})
	if err != nil || got.GetOrder().GetStatus() != demov1.OrderStatus_ORDER_STATUS_SHIPPED || got.GetOrder().GetTotalCents() != 100 {
		t.Errorf("GetOrder(o-imported1) = %v, %v; want the imported order, SHIPPED, 100 cents", got.GetOrder(), err)
	}
	got, err = client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1005"})
	if err != nil || got.GetOrder().GetCustomerId() != "c-6" || got.GetOrder().GetStatus() != demov1.OrderStatus_ORDER_STATUS_PENDING {
		t.Errorf("GetOrder(o-1005) = %v, %v; want the third imported order, PENDING", got.GetOrder(), err)
	}

	tests := []struct {
		name  string
		order *demov1.Order
		want  codes.Code
	}{
		{"taken id", &demov1.Order{OrderId: "o-1001", CustomerId: "c-1", Items: []*demov1.LineItem{{Sku: "ABC", Quantity: 1}}}, codes.AlreadyExists},
		{"no items", newOrder("c-1"), codes.InvalidArgument},
		{"no order", nil, codes.InvalidArgument},
	}
	for _, tt := range tests {
		imp, err := client.ImportOrders(ctx)
		if err != nil {
			t.Fatalf("ImportOrders() = %v", err)
		}
		// Send may see the server's early end as io.EOF; CloseAndRecv
		// reports the status either way.
		_ = imp.Send(&demov1.ImportOrdersRequest{Order: tt.order})
		if _, err := imp.CloseAndRecv(); status.Code(err) != tt.want {
			t.Errorf("ImportOrders(%s) = %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestSyncOrders(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t, demo.Options{})
	ctx := testContext(t)
	sync, err := client.SyncOrders(ctx)
	if err != nil {
		t.Fatalf("SyncOrders() = %v", err)
	}
	updates := []*demov1.SyncOrdersRequest{
		{OrderId: "o-1001", Status: demov1.OrderStatus_ORDER_STATUS_PAID},
		{OrderId: "o-1003", Status: demov1.OrderStatus_ORDER_STATUS_DELIVERED},
		{OrderId: "o-1001", Status: demov1.OrderStatus_ORDER_STATUS_CANCELLED},
	}
	for i, u := range updates {
		if err := sync.Send(u); err != nil {
			t.Fatalf("SyncOrders Send() = %v", err)
		}
		resp, err := sync.Recv()
		if err != nil {
			t.Fatalf("SyncOrders Recv() = %v", err)
		}
		e := resp.GetEvent()
		if e.GetOrderId() != u.GetOrderId() || e.GetStatus() != u.GetStatus() || e.GetSequence() != uint64(i+1) {
			t.Errorf("SyncOrders(%v) event = %v, want that order and status, sequence %d", u, e, i+1)
		}
	}
	if err := sync.CloseSend(); err != nil {
		t.Fatalf("SyncOrders CloseSend() = %v", err)
	}
	if _, err := sync.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("SyncOrders Recv() after CloseSend = %v, want io.EOF", err)
	}
	got, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1001"})
	if err != nil || got.GetOrder().GetStatus() != demov1.OrderStatus_ORDER_STATUS_CANCELLED {
		t.Errorf("GetOrder(o-1001) after sync = %v, %v; want CANCELLED", got.GetOrder().GetStatus(), err)
	}

	tests := []struct {
		req  *demov1.SyncOrdersRequest
		want codes.Code
	}{
		{&demov1.SyncOrdersRequest{OrderId: "o-424242", Status: demov1.OrderStatus_ORDER_STATUS_PAID}, codes.NotFound},
		{&demov1.SyncOrdersRequest{OrderId: "o-1001"}, codes.InvalidArgument},
		{&demov1.SyncOrdersRequest{OrderId: "o-1001", Status: 99}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		sync, err := client.SyncOrders(ctx)
		if err != nil {
			t.Fatalf("SyncOrders() = %v", err)
		}
		_ = sync.Send(tt.req)
		if _, err := sync.Recv(); status.Code(err) != tt.want {
			t.Errorf("SyncOrders(%v) = %v, want %v", tt.req, err, tt.want)
		}
	}
}

// TestSyncOrdersCloseFirst checks x-demo-close-first: the server ends the
// stream with OK after one answer while the client goes on sending.
func TestSyncOrdersCloseFirst(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t, demo.Options{})
	ctx := metadata.AppendToOutgoingContext(testContext(t), "x-demo-close-first", "1")
	sync, err := client.SyncOrders(ctx)
	if err != nil {
		t.Fatalf("SyncOrders() = %v", err)
	}
	first := &demov1.SyncOrdersRequest{OrderId: "o-1002", Status: demov1.OrderStatus_ORDER_STATUS_SHIPPED}
	if err := sync.Send(first); err != nil {
		t.Fatalf("SyncOrders Send() = %v", err)
	}
	if _, err := sync.Recv(); err != nil {
		t.Fatalf("SyncOrders Recv() = %v", err)
	}
	// Keep sending without half-closing, until the finished stream refuses.
	sent := make(chan error, 1)
	go func() {
		for {
			err := sync.Send(&demov1.SyncOrdersRequest{OrderId: "o-1002", Status: demov1.OrderStatus_ORDER_STATUS_CANCELLED})
			if err != nil {
				sent <- err
				return
			}
			time.Sleep(time.Millisecond) // pace the sender; not a wait for a condition
		}
	}()
	if _, err := sync.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("SyncOrders Recv() after the first answer = %v, want io.EOF (status OK)", err)
	}
	select {
	case err := <-sent:
		if !errors.Is(err, io.EOF) {
			t.Errorf("SyncOrders Send() after the end = %v, want io.EOF", err)
		}
	case <-ctx.Done():
		t.Fatal("SyncOrders Send() never saw the stream end")
	}
	got, err := client.GetOrder(testContext(t), &demov1.GetOrderRequest{OrderId: "o-1002"})
	if err != nil || got.GetOrder().GetStatus() != demov1.OrderStatus_ORDER_STATUS_SHIPPED {
		t.Errorf("GetOrder(o-1002) = %v, %v; want SHIPPED, only the first update applied", got.GetOrder().GetStatus(), err)
	}
}

// callEach calls every OrdersService method once with ctx and returns the
// error of each, with the header and trailer of the unary calls.
func callEach(ctx context.Context, client demov1.OrdersServiceClient) map[string]error {
	errs := make(map[string]error)
	_, errs["GetOrder"] = client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1001"})
	_, errs["CreateOrder"] = client.CreateOrder(ctx, &demov1.CreateOrderRequest{Order: newOrder("c-1", &demov1.LineItem{Sku: "ABC", Quantity: 1})})
	if watch, err := client.WatchOrders(ctx, &demov1.WatchOrdersRequest{CustomerId: "c-42", MaxEvents: 1}); err != nil {
		errs["WatchOrders"] = err
	} else {
		_, errs["WatchOrders"] = watch.Recv()
	}
	if imp, err := client.ImportOrders(ctx); err != nil {
		errs["ImportOrders"] = err
	} else {
		_, errs["ImportOrders"] = imp.CloseAndRecv()
	}
	if sync, err := client.SyncOrders(ctx); err != nil {
		errs["SyncOrders"] = err
	} else {
		_ = sync.Send(&demov1.SyncOrdersRequest{OrderId: "o-1001", Status: demov1.OrderStatus_ORDER_STATUS_PAID})
		_, errs["SyncOrders"] = sync.Recv()
	}
	return errs
}

func TestHookFail(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t, demo.Options{})
	tests := []struct {
		value string
		want  codes.Code
	}{
		{"14", codes.Unavailable},
		{"UNAVAILABLE", codes.Unavailable},
		{"permission_denied", codes.PermissionDenied},
		{"ResourceExhausted", codes.ResourceExhausted},
		{"16", codes.Unauthenticated},
		{"0", codes.InvalidArgument},
		{"17", codes.InvalidArgument},
		{"nope", codes.InvalidArgument},
	}
	for _, tt := range tests {
		ctx := metadata.AppendToOutgoingContext(testContext(t), "x-demo-fail", tt.value)
		for method, err := range callEach(ctx, client) {
			if status.Code(err) != tt.want {
				t.Errorf("%s with x-demo-fail: %s = %v, want %v", method, tt.value, err, tt.want)
			}
			if tt.want != codes.InvalidArgument && status.Convert(err).Message() != "demo: failure requested by x-demo-fail" {
				t.Errorf("%s with x-demo-fail: %s message = %q, want it to name the hook", method, tt.value, status.Convert(err).Message())
			}
		}
	}
	// Without the hook every call succeeds, so the failures above are the
	// hook's doing.
	for method, err := range callEach(testContext(t), client) {
		if err != nil {
			t.Errorf("%s without hooks = %v, want success", method, err)
		}
	}
}

func TestHookTrailerAndEcho(t *testing.T) {
	t.Parallel()
	client, conn := ordersClient(t, demo.Options{})
	ctx := metadata.AppendToOutgoingContext(testContext(t),
		"x-demo-trailer", "t-value",
		"x-demo-echo-md", "x-forwarded-by, :authority",
		"x-demo-echo-md", "x-missing,user-agent",
		"x-forwarded-by", "one",
		"x-forwarded-by", "two",
	)
	var header, trailer metadata.MD
	if _, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1001"}, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatalf("GetOrder() = %v", err)
	}
	check := func(call string, header, trailer metadata.MD) {
		t.Helper()
		if got := trailer.Get("x-demo-trailer"); !slices.Equal(got, []string{"t-value"}) {
			t.Errorf("%s trailer x-demo-trailer = %q, want [t-value]", call, got)
		}
		if got := header.Get("x-demo-echo-x-forwarded-by"); !slices.Equal(got, []string{"one", "two"}) {
			t.Errorf("%s header x-demo-echo-x-forwarded-by = %q, want [one two]", call, got)
		}
		if got := header.Get("x-demo-echo-authority"); !slices.Equal(got, []string{conn.Target()}) {
			t.Errorf("%s header x-demo-echo-authority = %q, want [%s]", call, got, conn.Target())
		}
		if got := header.Get("x-demo-echo-user-agent"); len(got) != 1 || got[0] == "" {
			t.Errorf("%s header x-demo-echo-user-agent = %q, want the client's user agent", call, got)
		}
		if got := header.Get("x-demo-echo-x-missing"); got != nil {
			t.Errorf("%s header x-demo-echo-x-missing = %q, want none for a key the request lacks", call, got)
		}
	}
	check("GetOrder", header, trailer)

	watch, err := client.WatchOrders(ctx, &demov1.WatchOrdersRequest{CustomerId: "c-42", MaxEvents: 1})
	if err != nil {
		t.Fatalf("WatchOrders() = %v", err)
	}
	for {
		if _, err := watch.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("WatchOrders Recv() = %v", err)
			}
			break
		}
	}
	header, err = watch.Header()
	if err != nil {
		t.Fatalf("WatchOrders Header() = %v", err)
	}
	check("WatchOrders", header, watch.Trailer())

	// A failed call still carries them, as a trailers-only answer would.
	failCtx := metadata.AppendToOutgoingContext(ctx, "x-demo-fail", "INTERNAL")
	header, trailer = nil, nil
	_, err = client.GetOrder(failCtx, &demov1.GetOrderRequest{OrderId: "o-1001"}, grpc.Header(&header), grpc.Trailer(&trailer))
	if status.Code(err) != codes.Internal {
		t.Fatalf("GetOrder() with x-demo-fail = %v, want Internal", err)
	}
	check("failed GetOrder", header, trailer)

	// Health and reflection ignore the hooks.
	if _, err := healthgrpc.NewHealthClient(conn).Check(failCtx, &healthgrpc.HealthCheckRequest{}); err != nil {
		t.Errorf("health Check() with x-demo-fail = %v, want success", err)
	}
}

func TestHookDelay(t *testing.T) {
	t.Parallel()
	s := startServers(t, demo.Options{})
	client := demov1.NewOrdersServiceClient(dial(t, s.OrdersAddr()))
	ctx := metadata.AppendToOutgoingContext(testContext(t), "x-demo-delay-ms", "50")
	start := time.Now()
	if _, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1001"}); err != nil {
		t.Fatalf("GetOrder() with x-demo-delay-ms: 50 = %v", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("GetOrder() with x-demo-delay-ms: 50 took %v, want at least 50ms", d)
	}

	ctx = metadata.AppendToOutgoingContext(testContext(t), "x-demo-delay-ms", "600000")
	ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	for method, err := range callEach(ctx, client) {
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%s with a long delay and a short deadline = %v, want DeadlineExceeded", method, err)
		}
	}

	// The delays above were cut short by the deadline: had they gone on
	// sleeping, Close would wait for them until it cut them off.
	start = time.Now()
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close() took %v, want the expired delays to have ended", d)
	}
}

func TestHookInvalid(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t, demo.Options{})
	for _, v := range []string{"-1", "soon", "600001"} {
		ctx := metadata.AppendToOutgoingContext(testContext(t), "x-demo-delay-ms", v)
		if _, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1001"}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("GetOrder() with x-demo-delay-ms: %s = %v, want InvalidArgument", v, err)
		}
	}
	ctx := metadata.AppendToOutgoingContext(testContext(t), "x-demo-close-first", "maybe")
	sync, err := client.SyncOrders(ctx)
	if err == nil {
		_, err = sync.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("SyncOrders() with x-demo-close-first: maybe = %v, want InvalidArgument", err)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	_, conn := ordersClient(t, demo.Options{})
	health := healthgrpc.NewHealthClient(conn)
	for _, service := range []string{"", ordersService} {
		resp, err := health.Check(testContext(t), &healthgrpc.HealthCheckRequest{Service: service})
		if err != nil || resp.GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) = %v, %v; want SERVING", service, resp.GetStatus(), err)
		}
	}
	if _, err := health.Check(testContext(t), &healthgrpc.HealthCheckRequest{Service: "no.Such"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check(no.Such) = %v, want NotFound", err)
	}
}

// reflect sends one request on a reflection stream of the given method and
// returns the answer. Version v1alpha has the messages of v1, so one set of
// types serves both, as for clients built against either.
func reflect(ctx context.Context, t *testing.T, conn *grpc.ClientConn, method string, req *reflectionv1.ServerReflectionRequest) *reflectionv1.ServerReflectionResponse {
	t.Helper()
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method)
	if err != nil {
		t.Fatalf("NewStream(%s) = %v", method, err)
	}
	if err := stream.SendMsg(req); err != nil {
		t.Fatalf("%s SendMsg() = %v", method, err)
	}
	resp := new(reflectionv1.ServerReflectionResponse)
	if err := stream.RecvMsg(resp); err != nil {
		t.Fatalf("%s RecvMsg() = %v", method, err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatalf("%s CloseSend() = %v", method, err)
	}
	return resp
}

func TestReflection(t *testing.T) {
	t.Parallel()
	_, conn := ordersClient(t, demo.Options{})
	ctx := testContext(t)
	listServices := &reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{ListServices: "*"},
	}
	fileOfService := &reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: ordersService},
	}
	for _, method := range []string{
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
	} {
		var names []string
		for _, s := range reflect(ctx, t, conn, method, listServices).GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		for _, want := range []string{ordersService, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} {
			if !slices.Contains(names, want) {
				t.Errorf("%s list services = %q, want it to hold %s", method, names, want)
			}
		}
		// grpcurl needs the file of the service and the files it imports.
		resp := reflect(ctx, t, conn, method, fileOfService)
		if files := resp.GetFileDescriptorResponse().GetFileDescriptorProto(); len(files) < 4 {
			t.Errorf("%s file containing %s = %d files (error %v), want orders.proto and its imports", method, ordersService, len(files), resp.GetErrorResponse())
		}
	}
}

// TestStoreForgetsOldestAddedOrders imports one order more than the store
// keeps besides its seeds: the oldest added one goes, the seeds stay, and a
// watch still walks the customer's orders in order.
func TestStoreForgetsOldestAddedOrders(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t, demo.Options{WatchInterval: time.Hour})
	// Ten thousand messages are slow under the race detector on a busy
	// machine; give them time.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const kept = 10_000
	imp, err := client.ImportOrders(ctx)
	if err != nil {
		t.Fatalf("ImportOrders() = %v", err)
	}
	req := &demov1.ImportOrdersRequest{Order: newOrder("c-42", &demov1.LineItem{Sku: "ABC", Quantity: 1, UnitPriceCents: 1})}
	for range kept + 1 {
		if err := imp.Send(req); err != nil {
			t.Fatalf("ImportOrders Send() = %v", err)
		}
	}
	if resp, err := imp.CloseAndRecv(); err != nil || resp.GetImported() != kept+1 {
		t.Fatalf("ImportOrders() = %v, %v; want %d imported", resp, err, kept+1)
	}
	tests := []struct {
		id   string
		want codes.Code
	}{
		{"o-1001", codes.OK},
		{"o-1003", codes.OK},
		{"o-1004", codes.NotFound}, // the first import
		{"o-1005", codes.OK},
		{"o-11004", codes.OK}, // the last import
	}
	for _, tt := range tests {
		if _, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: tt.id}); status.Code(err) != tt.want {
			t.Errorf("GetOrder(%s) = %v, want %v", tt.id, err, tt.want)
		}
	}
	watch, err := client.WatchOrders(ctx, &demov1.WatchOrdersRequest{CustomerId: "c-42", MaxEvents: 3})
	if err != nil {
		t.Fatalf("WatchOrders() = %v", err)
	}
	var ids []string
	for {
		resp, err := watch.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("WatchOrders Recv() = %v", err)
		}
		ids = append(ids, resp.GetEvent().GetOrderId())
	}
	if want := []string{"o-1001", "o-1002", "o-1005"}; !slices.Equal(ids, want) {
		t.Errorf("WatchOrders(c-42) orders = %q, want %q", ids, want)
	}
}

func TestListOrders(t *testing.T) {
	t.Parallel()
	client, _ := ordersClient(t, demo.Options{})
	ctx := context.Background()
	ids := func(req *demov1.ListOrdersRequest) ([]string, int32) {
		t.Helper()
		resp, err := client.ListOrders(ctx, req)
		if err != nil {
			t.Fatalf("ListOrders(%v): %v", req, err)
		}
		var out []string
		for _, o := range resp.GetOrders() {
			out = append(out, o.GetOrderId())
		}
		return out, resp.GetMatched()
	}
	for _, tc := range []struct {
		req     *demov1.ListOrdersRequest
		want    []string
		matched int32
	}{
		{&demov1.ListOrdersRequest{CustomerId: "c-42"}, []string{"o-1001", "o-1002"}, 2},
		{&demov1.ListOrdersRequest{CustomerId: "c-42", PageSize: 1}, []string{"o-1001"}, 2},
		{&demov1.ListOrdersRequest{CustomerId: "c-42", Statuses: []demov1.OrderStatus{demov1.OrderStatus_ORDER_STATUS_PAID}}, []string{"o-1002"}, 1},
		{&demov1.ListOrdersRequest{CustomerId: "c-42", Filter: &demov1.OrderFilter{MinTotalCents: wrapperspb.Int64(5000)}}, []string{"o-1001"}, 1},
		{&demov1.ListOrdersRequest{CustomerId: "c-42", Filter: &demov1.OrderFilter{Sku: "GIZMO-3"}}, []string{"o-1002"}, 1},
		{&demov1.ListOrdersRequest{CustomerId: "c-42", Filter: &demov1.OrderFilter{CreatedAfter: timestamppb.New(time.Now().Add(-150 * time.Minute))}}, []string{"o-1002"}, 1},
		{&demov1.ListOrdersRequest{CustomerId: "c-42", Filter: &demov1.OrderFilter{MaxAge: durationpb.New(150 * time.Minute)}}, []string{"o-1002"}, 1},
		{&demov1.ListOrdersRequest{CustomerId: "c-404"}, nil, 0},
	} {
		got, matched := ids(tc.req)
		if !slices.Equal(got, tc.want) || matched != tc.matched {
			t.Errorf("ListOrders(%v) = %v (%d matched), want %v (%d)", tc.req, got, matched, tc.want, tc.matched)
		}
	}
	if _, err := client.ListOrders(ctx, &demov1.ListOrdersRequest{CustomerId: "bad"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad customer: %v", err)
	}
}
