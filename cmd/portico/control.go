package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/portico-gw/portico/control"
	"github.com/portico-gw/portico/control/distribution"
)

// runControl is `portico control`: its flags become control.Options.
func runControl(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("portico control", flag.ContinueOnError)
	var (
		listen    = fs.String("listen", control.DefaultListen, "addr to serve the admin API and the nodes' streams on (cleartext HTTP/1.1 and h2c, or TLS with -tls-cert)")
		dsn       = fs.String("store", control.DefaultStoreDSN, "the store: postgres://user@host/db or sqlite:PATH")
		bootstrap = fs.String("bootstrap-token-file", "", "file holding a platform-admin token (ptk_...) to create if missing: how the first admin gets in")
		nodeToken = fs.String("node-token-file", "", "file holding the token gateway nodes must present (their -control-token-file); without it any caller may take snapshots")
		pubToken  = fs.String("publisher-token-file", "", "file holding the token the key service presents to publish on the fast lane (its -control-token-file); required unless -listen is a loopback address")
		usageTok  = fs.String("usage-token-file", "", "file holding the token the quota service presents to publish usage marks and reach the usage relay (its -control-token-file); the publisher token then can do neither. Without it the publisher token does both")
		certFile  = fs.String("tls-cert", "", "PEM certificate (chain) to serve TLS with")
		keyFile   = fs.String("tls-key", "", "PEM private key for -tls-cert")
		logLevel  = fs.String("log-level", "info", "debug, info, warn or error")
		bake      = fs.Duration("rollout-bake", distribution.DefaultBake, "how long each rollout stage (canaries, 10 %, a region, all) runs before the changed routes are compared with nodes on the old version; 0 sends every version to every node at once")
		minCalls  = fs.Uint64("rollout-min-requests", distribution.DefaultMinRequests, "calls of a changed route the new version must serve in a stage to be judged on them; with fewer it is judged on the canaries' synthetic probes")
		minProbes = fs.Uint64("rollout-min-probes", distribution.DefaultMinProbes, "synthetic probes of a changed route the canaries must send in a stage to judge it on them")
		probeInt  = fs.Duration("rollout-probe-interval", 0, "how often each canary probes each changed route (default a tenth of -rollout-bake, between 100ms and 1s)")
		maxBake   = fs.Duration("rollout-max-bake", 0, "how long a stage may bake on while a changed route has neither -rollout-min-requests calls nor -rollout-min-probes probes (default 5 × -rollout-bake); then the rollout pauses until resumed")
		maxErrInc = fs.Float64("rollout-max-error-increase", distribution.DefaultMaxErrorRateIncrease, "how much higher the new version's share of failed calls of a changed route may be (0.05: five points)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	opts := control.Options{
		StoreDSN: *dsn, Listen: *listen, TLSCertFile: *certFile, TLSKeyFile: *keyFile, Logger: log,
		Rollout: distribution.RolloutOptions{Bake: *bake, MinRequests: *minCalls, MinProbes: *minProbes, ProbeInterval: *probeInt,
			MaxBake: *maxBake, MaxErrorRateIncrease: *maxErrInc},
	}
	for _, f := range []struct {
		flag, file string
		into       *string
		read       func(string) (string, error)
	}{
		{"-bootstrap-token-file", *bootstrap, &opts.BootstrapToken, readSecret},
		{"-node-token-file", *nodeToken, &opts.NodeToken, readToken},
		{"-publisher-token-file", *pubToken, &opts.PublisherToken, readToken},
		{"-usage-token-file", *usageTok, &opts.UsageToken, readToken},
	} {
		if f.file == "" {
			continue
		}
		if *f.into, err = f.read(f.file); err != nil {
			return fmt.Errorf("control: %s: %w", f.flag, err)
		}
	}
	err = control.Run(ctx, opts)
	if errors.Is(err, control.ErrOpenPublisher) {
		return errors.New("control: -publisher-token-file is required unless -listen is a loopback address: without it any caller could put API keys on every node")
	}
	return err
}
