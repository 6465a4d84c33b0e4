package demo

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
)

// maxWatchEvents is the largest max_events a watch accepts, as in orders.proto.
const maxWatchEvents = 10_000

// NewOrdersServer returns a gRPC server with OrdersService, grpc health
// (SERVING for "" and "portico.demo.v1.OrdersService") and server reflection
// v1 and v1alpha registered, and the test hooks installed. The caller serves
// it on a listener of its own and stops it. The zero Options work.
//
// Watches on this server end only when their client cancels or max_events is
// reached; Stop ends them too, GracefulStop waits for them.
func NewOrdersServer(opts Options) *grpc.Server {
	srv, _ := newOrdersServer(opts, nil)
	return srv
}

// newOrdersServer is NewOrdersServer for Start: closing stopping ends the
// watches, so that a graceful stop does not wait for them, and the returned
// health server lets Start report NOT_SERVING while stopping.
func newOrdersServer(opts Options, stopping <-chan struct{}) (*grpc.Server, *health.Server) {
	opts = opts.withDefaults()
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(logUnary(opts.Logger), unaryHooks),
		grpc.ChainStreamInterceptor(logStream(opts.Logger), streamHooks),
		// A gateway in front keeps its upstream connections alive with
		// pings; the default policy would answer those with GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             5 * time.Second,
			PermitWithoutStream: true,
		}),
	)
	demov1.RegisterOrdersServiceServer(srv, &orders{
		store:    newStore(time.Now()),
		interval: opts.WatchInterval,
		stopping: stopping,
	})
	hs := health.NewServer()
	hs.SetServingStatus("", healthgrpc.HealthCheckResponse_SERVING)
	hs.SetServingStatus(demov1.OrdersService_ServiceDesc.ServiceName, healthgrpc.HealthCheckResponse_SERVING)
	healthgrpc.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv, hs
}

// orders implements OrdersService over a store.
type orders struct {
	demov1.UnimplementedOrdersServiceServer

	store    *store
	interval time.Duration
	stopping <-chan struct{} // nil: never
}

func (o *orders) GetOrder(_ context.Context, req *demov1.GetOrderRequest) (*demov1.GetOrderResponse, error) {
	if !validID("o-", req.GetOrderId()) {
		return nil, status.Errorf(codes.InvalidArgument, "order_id %q does not match o-[0-9a-z]{1,32}", req.GetOrderId())
	}
	ord, err := o.store.get(req.GetOrderId())
	if err != nil {
		return nil, storeError(err)
	}
	return &demov1.GetOrderResponse{Order: ord}, nil
}

func (o *orders) ListOrders(_ context.Context, req *demov1.ListOrdersRequest) (*demov1.ListOrdersResponse, error) {
	if !validID("c-", req.GetCustomerId()) {
		return nil, status.Errorf(codes.InvalidArgument, "customer_id %q does not match c-[0-9a-z]{1,32}", req.GetCustomerId())
	}
	if req.GetPageSize() < 0 || req.GetPageSize() > 100 {
		return nil, status.Errorf(codes.InvalidArgument, "page_size must be in [0, 100], got %d", req.GetPageSize())
	}
	f := req.GetFilter()
	now := time.Now()
	resp := &demov1.ListOrdersResponse{}
	for _, ord := range o.store.customerOrderCopies(req.GetCustomerId()) {
		switch {
		case len(req.GetStatuses()) > 0 && !slices.Contains(req.GetStatuses(), ord.GetStatus()):
		case f.GetCreatedAfter() != nil && !ord.GetCreateTime().AsTime().After(f.GetCreatedAfter().AsTime()):
		case f.GetMaxAge() != nil && now.Sub(ord.GetCreateTime().AsTime()) > f.GetMaxAge().AsDuration():
		case f.GetMinTotalCents() != nil && ord.GetTotalCents() < f.GetMinTotalCents().GetValue():
		case f.GetSku() != "" && !slices.ContainsFunc(ord.GetItems(), func(it *demov1.LineItem) bool { return it.GetSku() == f.GetSku() }):
		default:
			resp.Matched++
			if req.GetPageSize() == 0 || len(resp.Orders) < int(req.GetPageSize()) {
				resp.Orders = append(resp.Orders, ord)
			}
		}
	}
	return resp, nil
}

func (o *orders) CreateOrder(_ context.Context, req *demov1.CreateOrderRequest) (*demov1.CreateOrderResponse, error) {
	ord := req.GetOrder()
	if ord == nil {
		return nil, status.Error(codes.InvalidArgument, "order is required")
	}
	// The server owns these fields; what the client sent is ignored.
	ord.OrderId = ""
	ord.Status = demov1.OrderStatus_ORDER_STATUS_PENDING
	if err := validateOrder(ord); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "order: %v", err)
	}
	ord.TotalCents = total(ord.Items)
	ord.CreateTime = timestamppb.Now()
	ord, err := o.store.add(ord)
	if err != nil {
		return nil, storeError(err)
	}
	return &demov1.CreateOrderResponse{Order: ord}, nil
}

// WatchOrders sends an event for each of the customer's orders, then one
// every interval for the next order in turn with its status advanced. The
// events are made up for this stream and do not change the store.
func (o *orders) WatchOrders(req *demov1.WatchOrdersRequest, stream grpc.ServerStreamingServer[demov1.WatchOrdersResponse]) error {
	customer := req.GetCustomerId()
	if !validID("c-", customer) {
		return status.Errorf(codes.InvalidArgument, "customer_id %q does not match c-[0-9a-z]{1,32}", customer)
	}
	if req.GetMaxEvents() > maxWatchEvents {
		return status.Errorf(codes.InvalidArgument, "max_events must be at most %d, got %d", maxWatchEvents, req.GetMaxEvents())
	}
	var seq uint64
	limit := uint64(req.GetMaxEvents())
	// send sends the next event and reports whether it was the last one.
	send := func(id string, st demov1.OrderStatus) (bool, error) {
		seq++
		err := stream.Send(&demov1.WatchOrdersResponse{Event: &demov1.OrderEvent{
			OrderId:   id,
			Status:    st,
			EventTime: timestamppb.Now(),
			Sequence:  seq,
		}})
		return limit != 0 && seq >= limit, err
	}

	// last holds the status this stream last reported for each order, so
	// that each order walks the cycle on its own.
	last := make(map[string]demov1.OrderStatus)
	for _, s := range o.store.customerOrders(customer) {
		last[s.id] = s.status
		if done, err := send(s.id, s.status); done || err != nil {
			return err
		}
	}
	ctx := stream.Context()
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for turn := uint64(0); ; {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-o.stopping:
			return status.Error(codes.Unavailable, "server is shutting down")
		case <-tick.C:
		}
		s, ok := o.store.customerOrder(customer, turn)
		if !ok {
			continue
		}
		turn++
		st, ok := last[s.id]
		if !ok {
			st = s.status
		}
		st = nextStatus(st)
		last[s.id] = st
		if done, err := send(s.id, st); done || err != nil {
			return err
		}
	}
}

// ImportOrders stores every order the client sends. An order keeps its id if
// it has one not in use (AlreadyExists if it is in use), its status unless
// unspecified, and its create_time if set; the server computes total_cents.
// An invalid order ends the call with InvalidArgument; the orders before it
// stay imported.
func (o *orders) ImportOrders(stream grpc.ClientStreamingServer[demov1.ImportOrdersRequest, demov1.ImportOrdersResponse]) error {
	var (
		imported uint32
		sum      int64
	)
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&demov1.ImportOrdersResponse{Imported: imported, TotalCents: sum})
		}
		if err != nil {
			return err
		}
		ord := req.GetOrder()
		if ord == nil {
			return status.Errorf(codes.InvalidArgument, "orders[%d]: order is required", imported)
		}
		if err := validateOrder(ord); err != nil {
			return status.Errorf(codes.InvalidArgument, "orders[%d]: %v", imported, err)
		}
		ord.TotalCents = total(ord.Items)
		if sum > math.MaxInt64-ord.TotalCents || imported == math.MaxUint32 {
			return status.Errorf(codes.OutOfRange, "orders[%d]: the import summary would overflow", imported)
		}
		if ord.Status == demov1.OrderStatus_ORDER_STATUS_UNSPECIFIED {
			ord.Status = demov1.OrderStatus_ORDER_STATUS_PENDING
		}
		if ord.CreateTime == nil {
			ord.CreateTime = timestamppb.Now()
		}
		if _, err := o.store.add(ord); err != nil {
			return storeError(err)
		}
		imported++
		sum += ord.TotalCents
	}
}

// SyncOrders sets the status of an order for each request and answers with
// the resulting event. It ends with OK when the client half-closes, or after
// the first answer if the call carries x-demo-close-first: 1. An invalid or
// unknown order ends it with InvalidArgument or NotFound.
func (o *orders) SyncOrders(stream grpc.BidiStreamingServer[demov1.SyncOrdersRequest, demov1.SyncOrdersResponse]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	first, err := closeFirst(md)
	if err != nil {
		return err
	}
	for seq := uint64(1); ; seq++ {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !validID("o-", req.GetOrderId()) {
			return status.Errorf(codes.InvalidArgument, "order_id %q does not match o-[0-9a-z]{1,32}", req.GetOrderId())
		}
		if st := req.GetStatus(); st == demov1.OrderStatus_ORDER_STATUS_UNSPECIFIED || !definedStatus(st) {
			return status.Errorf(codes.InvalidArgument, "status %d is unspecified or not defined", st)
		}
		ord, err := o.store.setStatus(req.GetOrderId(), req.GetStatus())
		if err != nil {
			return storeError(err)
		}
		err = stream.Send(&demov1.SyncOrdersResponse{Event: &demov1.OrderEvent{
			OrderId:   ord.OrderId,
			Status:    ord.Status,
			EventTime: timestamppb.Now(),
			Sequence:  seq,
		}})
		if err != nil {
			return err
		}
		if first {
			return nil
		}
	}
}

// storeError maps the errors of the store to statuses; it is the one place
// where the service does so.
func storeError(err error) error {
	switch {
	case errors.Is(err, errOrderNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, errOrderExists):
		return status.Error(codes.AlreadyExists, err.Error())
	}
	return status.Error(codes.Internal, "internal error")
}

// statusCycle is the order in which a watch advances statuses.
var statusCycle = map[demov1.OrderStatus]demov1.OrderStatus{
	demov1.OrderStatus_ORDER_STATUS_PENDING:   demov1.OrderStatus_ORDER_STATUS_PAID,
	demov1.OrderStatus_ORDER_STATUS_PAID:      demov1.OrderStatus_ORDER_STATUS_SHIPPED,
	demov1.OrderStatus_ORDER_STATUS_SHIPPED:   demov1.OrderStatus_ORDER_STATUS_DELIVERED,
	demov1.OrderStatus_ORDER_STATUS_DELIVERED: demov1.OrderStatus_ORDER_STATUS_PENDING,
}

// nextStatus returns the status after s in the watch cycle; a cancelled or
// unspecified order starts over at PENDING.
func nextStatus(s demov1.OrderStatus) demov1.OrderStatus {
	if next, ok := statusCycle[s]; ok {
		return next
	}
	return demov1.OrderStatus_ORDER_STATUS_PENDING
}

// logUnary logs every unary call at debug level.
func logUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		logCall(ctx, log, info.FullMethod, start, err)
		return resp, err
	}
}

// logStream logs every streaming call at debug level when it ends.
func logStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		logCall(ss.Context(), log, info.FullMethod, start, err)
		return err
	}
}

func logCall(ctx context.Context, log *slog.Logger, method string, start time.Time, err error) {
	log.LogAttrs(ctx, slog.LevelDebug, "demo: orders call",
		slog.String("method", method),
		slog.String("code", status.Code(err).String()),
		slog.Duration("duration", time.Since(start)),
	)
}
