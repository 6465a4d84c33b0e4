package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/portico-gw/portico/gateway"
)

// keySnapshotOptions are the -keys-snapshot* flags as a node's
// KeySnapshotOptions: the public keys and the token read from their
// files.
func keySnapshotOptions(url, tokenFile string, pubFiles []string, every time.Duration, cacheFile string) (*gateway.KeySnapshotOptions, error) {
	if len(pubFiles) == 0 {
		return nil, errors.New("-keys-snapshot needs -keys-public-key: a snapshot is trusted only by its signature")
	}
	o := &gateway.KeySnapshotOptions{URL: url, Interval: every, CacheFile: cacheFile}
	for _, f := range pubFiles {
		k, err := readPublicKey(f)
		if err != nil {
			return nil, fmt.Errorf("-keys-public-key: %w", err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("-keys-public-key %s: not an Ed25519 key", f)
		}
		o.Trusted = append(o.Trusted, pub)
	}
	if tokenFile != "" {
		tok, err := readToken(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("-keys-snapshot-token-file: %w", err)
		}
		o.Token = tok
	}
	return o, nil
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
