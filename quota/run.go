package quota

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/portico-gw/portico/internal/svchttp"
)

// Run is the `portico quota` role: Open, serve Handler on opts.Listener
// or opts.Listen, and consume, publish and reconcile until ctx ends;
// then stop those before the store closes. It returns nil after a
// drain, or the error that stopped it.
func Run(ctx context.Context, opts Options) error {
	serve := svchttp.ServeOptions{CertFile: opts.TLSCertFile, KeyFile: opts.TLSKeyFile}
	if err := serve.Check(); err != nil {
		closeListener(opts.Listener)
		return fmt.Errorf("quota: %w", err)
	}
	s, err := Open(ctx, opts)
	if err != nil {
		closeListener(opts.Listener)
		return err
	}
	defer s.Close()
	ln := opts.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cmp.Or(opts.Listen, DefaultListen)); err != nil {
			return fmt.Errorf("quota: %w", err)
		}
	}
	// The consumer, the publisher and the reconciler stop before the
	// store closes.
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); s.Run(runCtx) }()
	defer func() { stopRun(); <-ran }()
	if len(opts.Brokers) == 0 {
		s.log.Warn("no Kafka brokers (-kafka): windows arrive only in-process; a production quota service consumes the usage topic")
	}
	if opts.ControlURL == "" {
		s.log.Warn("no control plane (-control): nodes are not told what to trim from their spools, and gaps are not asked to be re-sent")
	}
	s.log.Info("quota service listening", "addr", ln.Addr().String(), "store", s.store.Driver(),
		"kafka", strings.Join(opts.Brokers, ","), "topic", cmp.Or(opts.Topic, DefaultTopic), "group", cmp.Or(opts.Group, DefaultGroup))
	return svchttp.Serve(ctx, ln, s.Handler(), serve)
}

func closeListener(ln net.Listener) {
	if ln != nil {
		_ = ln.Close()
	}
}
