package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/telemetry/metrics"
	"github.com/portico-gw/portico/gateway/upstream"
	usagekafka "github.com/portico-gw/portico/gateway/usage/kafka"
)

// runGateway is `portico gateway`: its flags become gateway.Options.
func runGateway(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("portico gateway", flag.ContinueOnError)
	var (
		configPath = fs.String("config", "", "snapshot config file (YAML or JSON); reloaded on change and on SIGHUP (or -control)")
		controlURL = fs.String("control", "", "the control plane's URL (http://host:7000) to take snapshots from (or -config)")
		ctlToken   = fs.String("control-token-file", "", "with -control: file holding the node token the control plane requires (its -node-token-file)")
		cacheFile  = fs.String("snapshot-cache", "portico-snapshot.binpb", "with -control: the last snapshot run, served at start when the control plane is unreachable")
		region     = fs.String("region", "", "with -control: this node's region, for staged rollouts")
		labels     labelFlag
		plain      listenFlag
		secure     listenFlag
		trusted    prefixFlag
		certFile   = fs.String("tls-cert", "", "PEM certificate (chain) for -tls-listen")
		keyFile    = fs.String("tls-key", "", "PEM private key for -tls-listen")
		maxHeader  = fs.Int("max-header-bytes", gateway.DefaultMaxHeaderBytes, "request line and header limit (431 beyond)")
		readHeader = fs.Duration("read-header-timeout", gateway.DefaultReadHeaderTimeout, "time a client may take to send its headers")
		idle       = fs.Duration("idle-timeout", gateway.DefaultIdleTimeout, "close keep-alive connections idle this long")
		drain      = fs.Duration("drain-timeout", gateway.DefaultDrainTimeout, "time in-flight requests get to finish on shutdown")
		upTimeout  = fs.Duration("upgrade-timeout", defaultUpgradeTimeout, "on SIGUSR2 (upgrade in place): time the new process has to be ready before this one gives up on it and serves on")
		logLevel   = fs.String("log-level", "info", "debug, info, warn or error")
		debugAddr  = fs.String("debug-listen", "", "addr to serve /debug/pprof/ and /metrics (Prometheus) on (off when empty; keep it on loopback)")
		headroom   = fs.Int("gc-headroom-mib", defaultGCHeadroomMiB, "heap growth allowed between garbage collections, in MiB (0: Go's default pacing; GOGC in the environment wins)")
		redisAddrs = fs.String("redis", "", "Redis for the rate limit sync: host:port, or several comma-separated seed addresses of a Redis Cluster (empty: this node's buckets are the whole truth)")
		redisPass  = fs.String("redis-password-file", "", "file holding the Redis password (AUTH), if any")
		keysSnap   = fs.String("keys-snapshot", "", "the key service's signed key snapshot URL (http://keys:7100/v1/key-snapshot), polled as the fast lane's fallback")
		keysToken  = fs.String("keys-snapshot-token-file", "", "with -keys-snapshot: file holding the token the key service requires (its -snapshot-token-file)")
		keysPoll   = fs.Duration("keys-poll-interval", gateway.DefaultKeySnapshotInterval, "with -keys-snapshot: time between polls")
		keysCache  = fs.String("keys-snapshot-cache", "portico-keys.binpb", "with -keys-snapshot: the last signed key snapshot applied, applied again at start (verified) when nothing answers")
		keysPubs   stringsFlag
		nodeID     = fs.String("node-id", "", "this node's id in the rate limit sync (default: hostname and process id) and, stable across restarts, to the control plane and in its usage windows (default: hostname)")
		usageDir   = fs.String("usage-dir", "", "directory of the usage windows and their spool, on local disk, one node each (empty: the node counts no usage)")
		usageKafka = fs.String("usage-kafka", "", "with -usage-dir: Kafka brokers (comma-separated host:port) to ship the usage windows to (empty: they wait in the spool)")
		usageTopic = fs.String("usage-topic", usagekafka.DefaultTopic, "with -usage-kafka: the usage topic")
		usageBytes = fs.Int64("usage-spool-bytes", 1<<30, "with -usage-dir: bound on the spool's size, at least 64 MiB; when full the node keeps counting and windows wait")
		usageWin   = fs.Duration("usage-window", 10*time.Second, "with -usage-dir: length of a usage window, dividing a day, at most 1h")
	)
	fs.Var(&plain, "listen", "pool=addr to serve cleartext HTTP/1.1 and h2c on (repeatable; default public=:8080)")
	fs.Var(&secure, "tls-listen", "pool=addr to serve HTTP/2 and HTTP/1.1 over TLS on (repeatable)")
	fs.Var(&labels, "label", "with -control: key=value describing this node to rollouts (repeatable)")
	fs.Var(&keysPubs, "keys-public-key", "with -keys-snapshot: PEM Ed25519 public key the snapshot must be signed with (the key service's .pub.pem; repeatable, for rotation)")
	fs.Var(&trusted, "trusted-proxy", "CIDR of a proxy in front of the gateway whose X-Forwarded-For is kept (repeatable)")
	var identities identityFlag
	fs.Var(&identities, "upstream-identity", "NAME=CERT_FILE,KEY_FILE: a client certificate (PEM files, re-read when they change) that clusters naming NAME in tls.identity present to their backends over mTLS (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*configPath == "") == (*controlURL == "") {
		return fmt.Errorf("gateway: one of -config and -control is required")
	}
	if *usageKafka != "" && *usageDir == "" {
		return fmt.Errorf("gateway: -usage-kafka ships the windows of -usage-dir, which is required with it")
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	var cert *tls.Certificate
	if *certFile != "" || *keyFile != "" {
		c, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return fmt.Errorf("gateway: loading TLS certificate: %w", err)
		}
		cert = &c
	}
	// No listener flag: the node's default listener (gateway.DefaultListen).
	ls, err := listeners(plain, secure, cert)
	if err != nil {
		return err
	}
	if len(ls) == 0 {
		// Named here too, so that an upgrade can hand it over.
		ls = []gateway.Listener{{Pool: "public", Addr: gateway.DefaultListen}}
	}
	handed, err := inherit(ls, log)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	ids, err := upstream.LoadIdentities(identities, nil, log)
	if err != nil {
		return fmt.Errorf("gateway: -upstream-identity: %w", err)
	}
	opts := gateway.Options{
		Upstream:          upstream.Options{Identities: ids},
		RateLimit:         gateway.RateLimitOptions{NodeID: *nodeID},
		Listeners:         ls,
		Logger:            log,
		MaxHeaderBytes:    *maxHeader,
		ReadHeaderTimeout: *readHeader,
		IdleTimeout:       *idle,
		DrainTimeout:      *drain,
		TrustedProxies:    trusted,
	}
	if *redisAddrs != "" {
		opts.RateLimit.RedisAddrs = strings.Split(*redisAddrs, ",")
		if *redisPass != "" {
			if opts.RateLimit.RedisPassword, err = readSecret(*redisPass); err != nil {
				return fmt.Errorf("gateway: -redis-password-file: %w", err)
			}
		}
	}
	if *keysSnap != "" {
		if opts.KeySnapshot, err = keySnapshotOptions(*keysSnap, *keysToken, keysPubs, *keysPoll, *keysCache); err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
	}
	reload := make(chan struct{}, 1)
	if *controlURL != "" {
		opts.Control = &gateway.ControlOptions{URL: *controlURL, NodeID: *nodeID, Region: *region, Labels: labels, CacheFile: *cacheFile}
		if *ctlToken != "" {
			if opts.Control.Token, err = readSecret(*ctlToken); err != nil {
				return fmt.Errorf("gateway: -control-token-file: %w", err)
			}
		}
	} else {
		opts.ConfigFile = &gateway.ConfigFileOptions{Path: *configPath, Reload: reload}
	}
	if *usageDir != "" {
		opts.Usage = &gateway.UsageOptions{Dir: *usageDir, NodeID: *nodeID, Window: *usageWin, SpoolBytes: *usageBytes}
		if *usageKafka != "" {
			sender, err := usagekafka.New(usagekafka.Options{Brokers: strings.Split(*usageKafka, ","), Topic: *usageTopic, Logger: log})
			if err != nil {
				return fmt.Errorf("gateway: -usage-kafka: %w", err)
			}
			// After the node: its shipper has stopped by then.
			defer sender.Close()
			opts.Usage.Sender = sender
		}
	}
	runs, err := processRuns(*headroom, *debugAddr, log)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	node, err := gateway.New(opts)
	if err != nil {
		runs.close()
		for _, l := range ls {
			if l.Listener != nil {
				_ = l.Listener.Close()
			}
		}
		return err
	}
	runs.metrics = metrics.Handler(node.UsageStats)
	// The signals are subscribed to before anything serves: one sent as
	// soon as the node says it listens must not be lost (Go ignores a
	// SIGUSR2 nobody subscribed to, and a SIGHUP ends the process).
	if opts.ConfigFile != nil {
		hup := subscribe(syscall.SIGHUP)
		runs.add(func(ctx context.Context) error { return forwardSIGHUP(ctx, hup, reload) })
	}
	if handed.ready != nil {
		runs.add(func(ctx context.Context) error { return handed.reportReady(ctx, node, log) })
	}
	usr2 := subscribe(syscall.SIGUSR2)
	runs.add(func(ctx context.Context) error { return upgradeOnSIGUSR2(ctx, usr2, node, ls, *upTimeout, log) })
	runs.add(node.Run)
	if err := runs.run(ctx); !errors.Is(err, errUpgraded) {
		return err
	}
	return nil
}

// defaultUpgradeTimeout is how long a new process has to be ready.
const defaultUpgradeTimeout = 30 * time.Second

// forwardSIGHUP turns each SIGHUP into a forced reload until ctx is done;
// a reload already pending absorbs the next. hup is subscribed to
// SIGHUP (subscribe); forwardSIGHUP unsubscribes it when it returns.
func forwardSIGHUP(ctx context.Context, hup chan os.Signal, reload chan<- struct{}) error {
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			select {
			case reload <- struct{}{}:
			default:
			}
		}
	}
}

// subscribe returns a channel that receives sig from now on.
func subscribe(sig os.Signal) chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, sig)
	return c
}
