package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/quota"
)

// runQuota is `portico quota`: its flags become quota.Options.
func runQuota(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("portico quota", flag.ContinueOnError)
	var (
		listen       = fs.String("listen", quota.DefaultListen, "addr to serve the quota API on")
		dsn          = fs.String("store", quota.DefaultStoreDSN, "the quota store: postgres://user@host/db or sqlite:PATH")
		brokers      = fs.String("kafka", "", "comma-separated Kafka bootstrap brokers (host:port) of the usage topic; empty: no Kafka (windows arrive only in-process, as in portico dev)")
		topic        = fs.String("kafka-topic", quota.DefaultTopic, "the usage topic")
		group        = fs.String("kafka-group", quota.DefaultGroup, "the consumer group; every quota service on one store joins the same")
		controlURL   = fs.String("control", "", "the control plane (http://host:7000) whose fast lane carries the usage marks nodes trim their spools at, and whose usage relay asks nodes to re-send; empty: none")
		controlToken = fs.String("control-token-file", "", "file holding the token the control plane requires of the quota service: its -usage-token-file (or its -publisher-token-file when it has none)")
		tokenFile    = fs.String("token-file", "", "file holding the platform token callers of the quota API present (required)")
		interval     = fs.Duration("reconcile-interval", quota.DefaultInterval, "how often the reconciler runs over the current billing period (and the previous one until it is final)")
		grace        = fs.Duration("reconcile-grace", quota.DefaultGrace, "how long after a billing period's end its windows may still arrive before it is closed")
		writeOff     = fs.String("write-off", "", "comma-separated node ids whose missing windows are given up on: they no longer keep a period from closing")
		certFile     = fs.String("tls-cert", "", "PEM certificate (chain) to serve TLS with")
		keyFile      = fs.String("tls-key", "", "PEM private key for -tls-cert")
		logLevel     = fs.String("log-level", "info", "debug, info, warn or error")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("quota: unexpected arguments %q", fs.Args())
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	if *tokenFile == "" {
		return errors.New("quota: -token-file is required: the quota API is never open")
	}
	tok, err := readToken(*tokenFile)
	if err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	opts := quota.Options{
		StoreDSN: *dsn, Listen: *listen, TLSCertFile: *certFile, TLSKeyFile: *keyFile,
		TokenHashes: []string{svcauth.Hash(tok)},
		Brokers:     splitList(*brokers), Topic: *topic, Group: *group,
		ControlURL: *controlURL, Interval: *interval, Grace: *grace, WriteOff: splitList(*writeOff),
		Logger: log,
	}
	if *controlToken != "" {
		if opts.ControlToken, err = readToken(*controlToken); err != nil {
			return fmt.Errorf("quota: %w", err)
		}
	}
	if err := quota.Run(ctx, opts); err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	return nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
