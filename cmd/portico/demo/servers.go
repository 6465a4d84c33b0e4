package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
)

// closeTimeout bounds the graceful part of Servers.Close; calls still running
// then are cut off.
const closeTimeout = 5 * time.Second

// Options configure the demo backends. The zero value works.
type Options struct {
	// Logger receives the servers' errors, and every call at debug level.
	// Nil discards them.
	Logger *slog.Logger
	// WatchInterval is the time between the events WatchOrders makes up
	// after the first ones. Zero means one second.
	WatchInterval time.Duration
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.WatchInterval <= 0 {
		o.WatchInterval = time.Second
	}
	return o
}

// Servers is the running pair of demo backends. Its methods are safe for
// concurrent use.
//
// Its lifecycle:
//  1. Start binds a loopback port for each server and serves.
//  2. Clients dial OrdersAddr and InventoryAddr.
//  3. Close stops both: health turns NOT_SERVING, running WatchOrders
//     streams end with Unavailable, other calls get five seconds to finish
//     before they are cut off.
type Servers struct {
	orders        *grpc.Server
	health        *health.Server
	ordersAddr    string
	inventory     *http.Server
	inventoryAddr string
	log           *slog.Logger

	stopping  chan struct{}  // closed when Close starts
	serving   sync.WaitGroup // the Serve calls
	closeOnce sync.Once
	closeErr  error
}

// Start binds 127.0.0.1:0 for each server, loopback only, and serves until
// Close. Orders speaks gRPC over cleartext HTTP/2 (prior knowledge);
// Inventory speaks HTTP/1.1 and cleartext HTTP/2 (prior knowledge). ctx
// bounds only the start: cancelling it later does not stop the servers.
func Start(ctx context.Context, opts Options) (*Servers, error) {
	opts = opts.withDefaults()
	var lc net.ListenConfig
	ordersLis, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: listen for orders: %w", err)
	}
	inventoryLis, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		ordersLis.Close()
		return nil, fmt.Errorf("demo: listen for inventory: %w", err)
	}

	s := &Servers{
		ordersAddr:    ordersLis.Addr().String(),
		inventoryAddr: inventoryLis.Addr().String(),
		log:           opts.Logger,
		stopping:      make(chan struct{}),
	}
	s.orders, s.health = newOrdersServer(opts, s.stopping)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	s.inventory = &http.Server{
		Handler:           NewInventoryHandler(opts),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}

	s.serving.Go(func() {
		// Serve returns nil once Stop or GracefulStop is called.
		if err := s.orders.Serve(ordersLis); err != nil {
			s.log.Error("demo: orders server failed", slog.Any("error", err))
		}
	})
	s.serving.Go(func() {
		if err := s.inventory.Serve(inventoryLis); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("demo: inventory server failed", slog.Any("error", err))
		}
	})
	s.log.Info("demo: backends serving",
		slog.String("orders", s.ordersAddr),
		slog.String("inventory", s.inventoryAddr),
	)
	return s, nil
}

// OrdersAddr returns the host:port of the gRPC server.
func (s *Servers) OrdersAddr() string { return s.ordersAddr }

// InventoryAddr returns the host:port of the REST server.
func (s *Servers) InventoryAddr() string { return s.inventoryAddr }

// Close stops both servers gracefully, cuts off what still runs after five
// seconds, and returns once both have stopped and their handlers have
// returned, or with an error if a cut-off handler keeps running for another
// second. Calls after the first return the first result.
func (s *Servers) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Servers) close() error {
	close(s.stopping)
	s.health.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()

	var inventoryErr error
	inventoryDone := make(chan struct{})
	go func() {
		defer close(inventoryDone)
		if err := s.inventory.Shutdown(ctx); err != nil {
			s.log.Warn("demo: inventory did not stop in time, closing its connections", slog.Any("error", err))
			if err := s.inventory.Close(); err != nil {
				inventoryErr = fmt.Errorf("demo: close inventory: %w", err)
			}
		}
	}()
	// GracefulStop returns once every handler has, even if Stop cuts the
	// calls off meanwhile; it is how Close learns that they are over.
	ordersDone := make(chan struct{})
	go func() {
		s.orders.GracefulStop()
		close(ordersDone)
	}()
	select {
	case <-ordersDone:
	case <-ctx.Done():
		s.log.Warn("demo: orders did not stop in time, cutting calls off")
		s.orders.Stop()
	}
	<-inventoryDone // Shutdown gives up at the deadline, Close does not wait

	// Every handler has its call's context, which the stops above have
	// cancelled, so the rest is quick unless a handler ignores it.
	served := make(chan struct{})
	go func() {
		s.serving.Wait()
		<-ordersDone
		close(served)
	}()
	grace := time.NewTimer(time.Second)
	defer grace.Stop()
	select {
	case <-served:
		return inventoryErr
	case <-grace.C:
		return errors.Join(inventoryErr, errors.New("demo: close: handlers still running after the servers stopped"))
	}
}
