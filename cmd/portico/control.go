package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/portico-gw/portico/control"
	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/store"
)

func runControl(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("portico control", flag.ContinueOnError)
	var (
		listen    = fs.String("listen", ":7000", "addr to serve the admin API and the nodes' streams on (cleartext HTTP/1.1 and h2c, or TLS with -tls-cert)")
		dsn       = fs.String("store", "sqlite:portico-control.db", "the store: postgres://user@host/db or sqlite:PATH")
		bootstrap = fs.String("bootstrap-token-file", "", "file holding a platform-admin token (ptk_...) to create if missing: how the first admin gets in")
		nodeToken = fs.String("node-token-file", "", "file holding the token gateway nodes must present (their -control-token-file); without it any caller may take snapshots")
		pubToken  = fs.String("publisher-token-file", "", "file holding the token the key service presents to publish on the fast lane (its -control-token-file); without it any caller may publish")
		certFile  = fs.String("tls-cert", "", "PEM certificate (chain) to serve TLS with")
		keyFile   = fs.String("tls-key", "", "PEM private key for -tls-cert")
		logLevel  = fs.String("log-level", "info", "debug, info, warn or error")
		bake      = fs.Duration("rollout-bake", time.Minute, "how long each rollout stage (canaries, 10 %, a region, all) runs before the changed routes are compared with nodes on the old version; 0 sends every version to every node at once")
		minCalls  = fs.Uint64("rollout-min-requests", 20, "calls of a changed route the new version must serve in a stage to be judged")
		maxBake   = fs.Duration("rollout-max-bake", 0, "how long a stage may bake on while its changed routes have fewer calls than -rollout-min-requests (default 5 × -rollout-bake); then it is judged on what it has")
		maxErrInc = fs.Float64("rollout-max-error-increase", 0.05, "how much higher the new version's share of failed calls of a changed route may be (0.05: five points)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	var token string
	if *bootstrap != "" {
		if token, err = readSecret(*bootstrap); err != nil {
			return fmt.Errorf("control: -bootstrap-token-file: %w", err)
		}
	}
	var ntoken string
	if *nodeToken != "" {
		if ntoken, err = readToken(*nodeToken); err != nil {
			return fmt.Errorf("control: -node-token-file: %w", err)
		}
	} else {
		log.Warn("nodes are not authenticated: any caller may take snapshots and report as a node (set -node-token-file)")
	}
	var ptoken string
	if *pubToken != "" {
		if ptoken, err = readToken(*pubToken); err != nil {
			return fmt.Errorf("control: -publisher-token-file: %w", err)
		}
	} else if !loopbackOnly(*listen) {
		// A publisher can put any key on every node: never open beyond
		// this machine.
		return errors.New("control: -publisher-token-file is required unless -listen is a loopback address: without it any caller could put API keys on every node")
	} else {
		log.Warn("fast-lane publishers are not authenticated (loopback only): any local caller may publish keys (set -publisher-token-file)")
	}
	st, err := store.Open(ctx, *dsn)
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	defer st.Close()
	plane, err := control.New(ctx, control.Options{Store: st, BootstrapToken: token, NodeToken: ntoken, PublisherToken: ptoken, Logger: log, Rollout: distribution.RolloutOptions{
		Bake: *bake, MinRequests: *minCalls, MaxBake: *maxBake, MaxErrorRateIncrease: *maxErrInc,
	}})
	if err != nil {
		return err
	}
	defer plane.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	log.Info("control plane listening", "addr", ln.Addr().String(), "store", st.Driver())
	return serveControl(ctx, ln, plane.Handler, *certFile, *keyFile)
}

// loopbackOnly reports whether addr (host:port) listens on a loopback
// address only; an empty host listens everywhere.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveControl serves h on ln until ctx ends: TLS (HTTP/2 and 1.1) with a
// certificate, else cleartext HTTP/1.1 and h2c, which the nodes' streams
// need.
func serveControl(ctx context.Context, ln net.Listener, h http.Handler, certFile, keyFile string) error {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	if certFile != "" {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	srv := &http.Server{Handler: h, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() {
		if certFile != "" {
			errc <- srv.ServeTLS(ln, certFile, keyFile)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// The nodes' streams never end by themselves: close them after a
	// short grace; nodes reconnect to the next control plane.
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	_ = srv.Close()
	return nil
}
