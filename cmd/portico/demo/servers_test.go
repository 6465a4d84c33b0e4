package demo_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/portico-gw/portico/cmd/portico/demo"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
)

// testTimeout bounds every wait of a test.
const testTimeout = 10 * time.Second

// startServers starts the demo backends and closes them when the test ends.
func startServers(t *testing.T, opts demo.Options) *demo.Servers {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	s, err := demo.Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return s
}

// dial returns a client connection to a gRPC address, closed when the test
// ends.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient(%q) = %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestStartListensOnLoopback(t *testing.T) {
	t.Parallel()
	s := startServers(t, demo.Options{})
	for name, addr := range map[string]string{"orders": s.OrdersAddr(), "inventory": s.InventoryAddr()} {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Errorf("%s address %q: host %q, %v; want 127.0.0.1", name, addr, host, err)
		}
	}
	if s.OrdersAddr() == s.InventoryAddr() {
		t.Errorf("OrdersAddr() = InventoryAddr() = %q, want two servers", s.OrdersAddr())
	}
}

func TestCloseEndsWatchesAndStopsServing(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, err := demo.Start(ctx, demo.Options{WatchInterval: time.Hour})
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	conn := dial(t, s.OrdersAddr())
	watch, err := demov1.NewOrdersServiceClient(conn).WatchOrders(ctx, &demov1.WatchOrdersRequest{CustomerId: "c-42"})
	if err != nil {
		t.Fatalf("WatchOrders() = %v", err)
	}
	for range 2 { // the seed orders of c-42
		if _, err := watch.Recv(); err != nil {
			t.Fatalf("WatchOrders Recv() = %v", err)
		}
	}

	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	// Close cuts calls off after five seconds; a watch must not need that.
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close() took %v with a watch open, want it to end the watch at once", d)
	}
	if _, err := watch.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("WatchOrders Recv() after Close = %v, want Unavailable", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}

	_, err = healthgrpc.NewHealthClient(conn).Check(ctx, &healthgrpc.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("health Check() after Close = %v, want Unavailable", err)
	}
	resp, err := http.Get("http://" + s.InventoryAddr() + "/healthz")
	if err == nil {
		resp.Body.Close()
		t.Errorf("GET /healthz after Close = %s, want a connection error", resp.Status)
	}
}

// TestOwnListener serves NewOrdersServer and NewInventoryHandler on listeners
// of the test, as gateway tests do.
func TestOwnListener(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := demo.NewOrdersServer(demo.Options{WatchInterval: time.Hour})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	client := demov1.NewOrdersServiceClient(dial(t, lis.Addr().String()))
	if _, err := client.GetOrder(ctx, &demov1.GetOrderRequest{OrderId: "o-1001"}); err != nil {
		t.Fatalf("GetOrder(o-1001) = %v", err)
	}

	// A watch whose client cancels must end at once: GracefulStop waits
	// for it.
	watchCtx, cancelWatch := context.WithCancel(ctx)
	watch, err := client.WatchOrders(watchCtx, &demov1.WatchOrdersRequest{CustomerId: "c-42"})
	if err != nil {
		t.Fatalf("WatchOrders() = %v", err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatalf("WatchOrders Recv() = %v", err)
	}
	cancelWatch()
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("GracefulStop() did not return: the cancelled watch is still running")
	}
	if err := <-served; err != nil {
		t.Errorf("Serve() = %v, want nil after GracefulStop", err)
	}

	hs := &http.Server{Handler: demo.NewInventoryHandler(demo.Options{})}
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(hlis)
	t.Cleanup(func() { hs.Close() })
	resp, err := http.Get("http://" + hlis.Addr().String() + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz = %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("GET /healthz = %s %q, %v; want 200 \"ok\"", resp.Status, body, err)
	}
}
