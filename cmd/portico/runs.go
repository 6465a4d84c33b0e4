package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"
)

// runs are the goroutines of one portico process: each role's Run, the
// collector's tuning, the debug listener. run starts them all, and when
// one fails it stops the others; it returns once every one has returned,
// with the first error. Nothing a role starts outlives it unowned.
type runs struct {
	fns []func(context.Context) error
	// closers release what was set up before run, if run never comes.
	closers []func()
	// metrics, if set before run, is served at /metrics on the debug
	// listener.
	metrics http.Handler
}

func (r *runs) add(fn func(context.Context) error) { r.fns = append(r.fns, fn) }

// close releases what was set up for a run that will not happen.
func (r *runs) close() {
	for _, c := range r.closers {
		c()
	}
}

func (r *runs) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, fn := range r.fns {
		wg.Go(func() {
			if err := fn(ctx); err != nil {
				once.Do(func() { first = err })
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}

// processRuns are the runs every role's process has: the collector's
// pacing (see tuneGC) and, with debugAddr, Go's profiling endpoints. The
// debug listener is bound here, so a busy port fails at start.
func processRuns(headroomMiB int, debugAddr string, log *slog.Logger) (*runs, error) {
	r := &runs{}
	r.add(func(ctx context.Context) error {
		tuneGC(ctx, uint64(headroomMiB)<<20, log)
		return nil
	})
	if debugAddr != "" {
		ln, err := net.Listen("tcp", debugAddr)
		if err != nil {
			return nil, fmt.Errorf("-debug-listen: %w", err)
		}
		r.closers = append(r.closers, func() { _ = ln.Close() })
		log.Info("debug listener", "addr", ln.Addr().String())
		r.add(func(ctx context.Context) error { return serveDebug(ctx, ln, r.metrics) })
	}
	return r, nil
}

// serveDebug serves Go's profiling endpoints (/debug/pprof/), and the
// role's metrics at /metrics when it has any, on ln until ctx is done.
// Bind it to loopback or an operations network only: profiles reveal
// internals and cost CPU.
func serveDebug(ctx context.Context, ln net.Listener, metrics http.Handler) error {
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("debug listener: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("debug listener: %w", err)
	}
	return nil
}
