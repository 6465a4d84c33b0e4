// Command portico-load measures the gateway against a bare Go reverse proxy
// (and nginx, where installed) in one run and prints medians over
// interleaved rounds, the ratios of DESIGN.md's targets, the memory of idle
// connections and the handling of slow request heads. See package load.
//
//	go run ./testing/cmd/portico-load [-rounds 3] [-duration 5s] [-json out.json]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/portico-gw/portico/testing/load"
)

func main() {
	load.MaybeRunChild()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "portico-load: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	var o load.Options
	flag.IntVar(&o.Rounds, "rounds", 3, "interleaved rounds of every target and mode")
	flag.DurationVar(&o.Duration, "duration", 5*time.Second, "length of each measured phase")
	flag.DurationVar(&o.Warmup, "warmup", time.Second, "unmeasured full-load run of each target before the first round")
	flag.IntVar(&o.Conns, "conns", 64, "keep-alive client connections")
	flag.IntVar(&o.Rate, "rate", 5000, "open-loop requests per second")
	flag.IntVar(&o.Routes, "routes", 5000, "generated gateway routes besides the bench route")
	flag.BoolVar(&o.NoRateLimit, "no-rate-limit", false, "skip the gateway-rl target (gateway-auth plus a per-caller rate limit)")
	flag.BoolVar(&o.NoUsage, "no-usage", false, "skip the gateway-usage target (gateway-rl counting usage into a spool)")
	flag.IntVar(&o.AuthKeys, "auth-keys", 100000, "API keys in the gateway-auth target's table (negative: skip that target)")
	flag.IntVar(&o.IdleConns, "idle-conns", 10000, "idle connections opened to each proxy (negative: skip)")
	flag.IntVar(&o.SlowClients, "slow-clients", 500, "clients trickling their request head (negative: skip)")
	flag.IntVar(&o.SlowRate, "slow-rate", 1000, "normal req/s while the slow clients run")
	flag.DurationVar(&o.ReadHeaderTimeout, "read-header-timeout", time.Second, "the gateway's -read-header-timeout")
	flag.DurationVar(&o.Timeout, "timeout", 3*time.Minute, "bound on the whole run, the gateway's build included")
	flag.StringVar(&o.Gateway, "gateway", "", "built portico binary (default: go build ./cmd/portico)")
	flag.StringVar(&o.ModuleDir, "module", "", "module root to build the gateway in (default: around the working directory)")
	flag.StringVar(&o.Nginx, "nginx", "", `nginx binary to compare with (default /usr/sbin/nginx if present; "none" to skip)`)
	flag.BoolVar(&o.NoPin, "no-pin", false, "do not pin processes to CPUs")
	flag.BoolVar(&o.BaselineBufferPool, "baseline-buffer-pool", false, "give the baseline ReverseProxy a pooled copy buffer")
	jsonPath := flag.String("json", "", "also write the report as JSON to this file")
	quiet := flag.Bool("q", false, "no progress lines on stderr")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	o.Log = os.Stderr
	if *quiet {
		o.Log = io.Discard
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := load.Run(ctx, o)
	if err != nil {
		return err
	}
	if err := rep.WriteText(os.Stdout); err != nil {
		return err
	}
	if *jsonPath != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonPath, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}
