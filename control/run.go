package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/internal/svchttp"
)

// ErrOpenPublisher is Run's refusal to serve the fast lane's publishers
// beyond loopback without a PublisherToken.
var ErrOpenPublisher = errors.New("control: a publisher token is required unless the control plane listens on a loopback address only: without it any caller could put API keys on every node")

// Run is the `portico control` role: it opens opts.StoreDSN (unless
// opts.Store is set), builds the Plane, serves it and opts.Handlers on
// opts.Listener or opts.Listen until ctx ends, then drains and closes
// everything it opened. It returns nil after a drain, or the error that
// stopped it.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
		opts.Logger = log
	}
	ln := opts.Listener
	addr := cmp.Or(opts.Listen, DefaultListen)
	if ln != nil {
		addr = ln.Addr().String()
	}
	if opts.PublisherToken == "" && !svchttp.LoopbackOnly(addr) {
		if ln != nil {
			_ = ln.Close()
		}
		return ErrOpenPublisher
	}
	serve := svchttp.ServeOptions{CertFile: opts.TLSCertFile, KeyFile: opts.TLSKeyFile}
	if err := serve.Check(); err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		return fmt.Errorf("control: %w", err)
	}
	if opts.NodeToken == "" {
		log.Warn("nodes are not authenticated: any caller may take snapshots and report as a node (set -node-token-file)")
	}
	if opts.PublisherToken == "" {
		log.Warn("fast-lane publishers are not authenticated (loopback only): any local caller may publish keys (set -publisher-token-file)")
	}
	if opts.Store == nil {
		st, err := store.Open(ctx, cmp.Or(opts.StoreDSN, DefaultStoreDSN))
		if err != nil {
			if ln != nil {
				_ = ln.Close()
			}
			return fmt.Errorf("control: %w", err)
		}
		defer st.Close()
		opts.Store = st
	}
	plane, err := New(ctx, opts)
	if err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		return err
	}
	defer plane.Close()
	if ln == nil {
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("control: %w", err)
		}
	}
	var h http.Handler = plane.Handler
	if len(opts.Handlers) > 0 {
		mux := http.NewServeMux()
		mux.Handle("/", plane.Handler)
		for pattern, extra := range opts.Handlers {
			mux.Handle(pattern, extra)
		}
		h = mux
	}
	if opts.OnServe != nil {
		opts.OnServe(plane)
	}
	log.Info("control plane listening", "addr", ln.Addr().String(), "store", opts.Store.Driver())
	return svchttp.Serve(ctx, ln, h, serve)
}
