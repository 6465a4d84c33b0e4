package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/configfile"
)

func runGateway(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("portico gateway", flag.ContinueOnError)
	var (
		configPath = fs.String("config", "", "snapshot config file (YAML or JSON); reloaded on change and on SIGHUP")
		plain      listenFlag
		secure     listenFlag
		trusted    prefixFlag
		certFile   = fs.String("tls-cert", "", "PEM certificate (chain) for -tls-listen")
		keyFile    = fs.String("tls-key", "", "PEM private key for -tls-listen")
		maxHeader  = fs.Int("max-header-bytes", 64<<10, "request line and header limit (431 beyond)")
		readHeader = fs.Duration("read-header-timeout", 10*time.Second, "time a client may take to send its headers")
		idle       = fs.Duration("idle-timeout", 2*time.Minute, "close keep-alive connections idle this long")
		drain      = fs.Duration("drain-timeout", 30*time.Second, "time in-flight requests get to finish on shutdown")
		logLevel   = fs.String("log-level", "info", "debug, info, warn or error")
		debugAddr  = fs.String("debug-listen", "", "addr to serve /debug/pprof/ on (off when empty; keep it on loopback)")
		headroom   = fs.Int("gc-headroom-mib", defaultGCHeadroomMiB, "heap growth allowed between garbage collections, in MiB (0: Go's default pacing; GOGC in the environment wins)")
	)
	fs.Var(&plain, "listen", "pool=addr to serve cleartext HTTP/1.1 and h2c on (repeatable; default public=:8080)")
	fs.Var(&secure, "tls-listen", "pool=addr to serve HTTP/2 and HTTP/1.1 over TLS on (repeatable)")
	fs.Var(&trusted, "trusted-proxy", "CIDR of a proxy in front of the gateway whose X-Forwarded-For is kept (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *configPath == "" {
		return fmt.Errorf("gateway: -config is required")
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	go tuneGC(ctx, uint64(*headroom)<<20, log)
	if *debugAddr != "" {
		if err := serveDebug(ctx, *debugAddr, log); err != nil {
			return fmt.Errorf("gateway: -debug-listen: %w", err)
		}
	}
	var cert *tls.Certificate
	if *certFile != "" || *keyFile != "" {
		c, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return fmt.Errorf("gateway: loading TLS certificate: %w", err)
		}
		cert = &c
	}
	if len(plain) == 0 && len(secure) == 0 {
		plain = listenFlag{{Pool: "public", Addr: ":8080"}}
	}
	ls, err := listeners(plain, secure, cert)
	if err != nil {
		return err
	}

	reload := make(chan struct{}, 1)
	w := &configfile.Watcher{Path: *configPath, Reload: reload, Logger: log}
	// A bad file at start is fatal: there is nothing older to keep serving.
	cfg, err := w.Load()
	if err != nil {
		return err
	}
	node, err := gateway.New(gateway.Options{
		Listeners:         ls,
		Logger:            log,
		MaxHeaderBytes:    *maxHeader,
		ReadHeaderTimeout: *readHeader,
		IdleTimeout:       *idle,
		DrainTimeout:      *drain,
		TrustedProxies:    trusted,
	})
	if err != nil {
		return err
	}
	if err := node.Apply(cfg); err != nil {
		node.Close()
		return err
	}

	w.Apply = node.Apply
	go w.Run(ctx)
	go forwardSIGHUP(ctx, reload)

	for i, a := range node.Addrs() {
		log.Info("listening", "pool", ls[i].Pool, "addr", a.String(), "tls", ls[i].TLS != nil)
	}
	return node.Run(ctx)
}

// forwardSIGHUP turns SIGHUP into a forced reload until ctx is done.
func forwardSIGHUP(ctx context.Context, reload chan<- struct{}) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			select {
			case reload <- struct{}{}:
			default:
			}
		}
	}
}
