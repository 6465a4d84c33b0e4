package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/distribution"
	"github.com/portico-gw/portico/internal/svcauth"
)

// followControl makes node run the snapshots the control plane at url
// sends: first the cached one, if any, then the stream, held until ctx
// ends.
func followControl(ctx context.Context, node *gateway.Node, url, tokenFile, cacheFile, nodeID string, ls []gateway.Listener, region string, labels labelFlag, log *slog.Logger) error {
	var token string
	if tokenFile != "" {
		var err error
		if token, err = readSecret(tokenFile); err != nil {
			return fmt.Errorf("gateway: -control-token-file: %w", err)
		}
	}
	if nodeID == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("gateway: -node-id is needed with -control: %w", err)
		}
		nodeID = host
	}
	// The node's pool, for rollouts: its listeners' (the first's).
	pool := ""
	if len(ls) > 0 {
		pool = ls[0].Pool
	}
	client := distribution.New(distribution.Options{
		URL: url, HTTPClient: streamClient(url),
		Token: token, NodeID: nodeID, Pool: pool, Region: region, Labels: labels,
		CacheFile: cacheFile, Apply: node.Apply, Logger: log, Stats: node.RouteStats, Lane: node.FastLane(), Node: node,
	})
	booted, err := client.Boot()
	if err != nil {
		// A cache that cannot be run is no reason not to start: the
		// control plane sends the current snapshot.
		log.Warn("not serving the cached snapshot", "err", err)
	}
	if booted {
		// Apply logged the snapshot, with its sha256.
		log.Info("serving the cached snapshot until the control plane answers", "file", cacheFile)
	}
	go func() { _ = client.Run(ctx) }()
	return nil
}

// pollKeySnapshot applies the cached signed key snapshot, if any, then
// polls the key service's into node's fast lane until ctx ends.
func pollKeySnapshot(ctx context.Context, node *gateway.Node, url, tokenFile string, pubFiles []string, every time.Duration, cacheFile string, log *slog.Logger) error {
	if len(pubFiles) == 0 {
		return errors.New("-keys-snapshot needs -keys-public-key: a snapshot is trusted only by its signature")
	}
	var trusted []ed25519.PublicKey
	for _, f := range pubFiles {
		k, err := readPublicKey(f)
		if err != nil {
			return fmt.Errorf("-keys-public-key: %w", err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return fmt.Errorf("-keys-public-key %s: not an Ed25519 key", f)
		}
		trusted = append(trusted, pub)
	}
	client := &http.Client{Timeout: 60 * time.Second}
	if tokenFile != "" {
		tok, err := readToken(tokenFile)
		if err != nil {
			return fmt.Errorf("-keys-snapshot-token-file: %w", err)
		}
		client.Transport = svcauth.Transport(tok, nil)
	}
	p, err := distribution.NewPoller(distribution.PollerOptions{URL: url, HTTPClient: client, Trusted: trusted, Interval: every,
		CacheFile: cacheFile, Lane: node.FastLane(), Logger: log})
	if err != nil {
		return err
	}
	if _, err := p.Boot(); err != nil {
		// The key service sends the current state at the first poll.
		log.Warn("not applying the cached key snapshot", "err", err)
	}
	go p.Run(ctx)
	return nil
}

// streamClient is the HTTP client of a node's stream to the control plane
// at url. The stream needs HTTP/2: h2c with prior knowledge for an http
// URL (with HTTP/1.1 allowed, the transport would use it), else TLS.
func streamClient(url string) *http.Client {
	protocols := new(http.Protocols)
	if strings.HasPrefix(url, "http://") {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP2(true)
	}
	return &http.Client{Transport: &http.Transport{Protocols: protocols, IdleConnTimeout: time.Minute}}
}

// labelFlag collects key=value labels.
type labelFlag map[string]string

func (f *labelFlag) String() string {
	var parts []string
	for k, v := range *f {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (f *labelFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	if *f == nil {
		*f = labelFlag{}
	}
	(*f)[k] = val
	return nil
}
