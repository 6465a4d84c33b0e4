package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/keysvc"
)

// runKeys is `portico keys`: its flags become keysvc.Options.
func runKeys(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("portico keys", flag.ContinueOnError)
	var (
		listen        = fs.String("listen", keysvc.DefaultListen, "addr to serve the key and token APIs, the scanners' endpoint and the signed snapshot on")
		dsn           = fs.String("store", keysvc.DefaultStoreDSN, "the key store: postgres://user@host/db or sqlite:PATH")
		controlURL    = fs.String("control", "", "the control plane whose fast lane carries the changes (http://host:7000); empty: nodes learn changes from the signed snapshot only")
		controlToken  = fs.String("control-token-file", "", "file holding the publisher token the control plane requires (its -publisher-token-file)")
		platformToken = fs.String("token-file", "", "file holding the platform token callers of the key API present (required)")
		identityToken = fs.String("identity-token-file", "", "file holding the identity service's token: deny entries and issuers' keys only")
		identityOf    = fs.String("identity-issuers", "", "with -identity-token-file: comma-separated issuer names whose tokens it may deny and whose keys it may publish (empty: every issuer)")
		signingKey    = fs.String("signing-key-file", keysvc.DefaultSigningKeyFile, "PEM PKCS #8 Ed25519 private key that signs the key snapshot; created (mode 0600) if missing, with its public key beside it (.pub.pem) for the nodes' -keys-public-key")
		snapToken     = fs.String("snapshot-token-file", "", "file holding the token nodes present to fetch the signed snapshot (their -keys-snapshot-token-file); empty: anyone may fetch it")
		waitTimeout   = fs.Duration("wait-timeout", keysvc.DefaultWaitTimeout, "how long CreateKey and RotateKey wait for every node to have the new key")
		overlap       = fs.Duration("rotate-overlap", keysvc.DefaultOverlap, "how long a rotated key keeps working beside its successor, unless the call says")
		certFile      = fs.String("tls-cert", "", "PEM certificate (chain) to serve TLS with")
		keyFile       = fs.String("tls-key", "", "PEM private key for -tls-cert")
		logLevel      = fs.String("log-level", "info", "debug, info, warn or error")
		github        = fs.Bool("github-secret-scanning", false, "take GitHub's secret scanning partner reports at "+keysvc.GitHubLeakPath+" (register that URL with GitHub)")
		githubURL     = fs.String("github-keys-url", keysvc.DefaultGitHubKeysURL, "with -github-secret-scanning: GitHub's secret scanning public keys document")
		githubFile    = fs.String("github-keys-file", "", "with -github-secret-scanning: a copy of GitHub's public keys document to use instead of -github-keys-url (offline)")
		scanners      scannerFlag
	)
	fs.Var(&scanners, "scanner", "id=FILE: a secret scanner other than GitHub allowed to report leaked keys at "+keysvc.LeakPath+", with its ECDSA P-256 public key (PEM) (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	opts := keysvc.Options{StoreDSN: *dsn, Listen: *listen, TLSCertFile: *certFile, TLSKeyFile: *keyFile,
		ControlURL: *controlURL, WaitTimeout: *waitTimeout, Overlap: *overlap, Scanners: scanners.list, Logger: log}
	if opts.GitHub, err = githubOptions(fs, *github, *githubURL, *githubFile); err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	if *platformToken == "" {
		return errors.New("keys: -token-file is required: the key API is never open")
	}
	var issuers []string
	if *identityOf != "" {
		issuers = strings.Split(*identityOf, ",")
	}
	for _, t := range []struct {
		file    string
		role    keysvc.Role
		issuers []string
	}{{*platformToken, keysvc.RolePlatform, nil}, {*identityToken, keysvc.RoleIdentity, issuers}} {
		if t.file == "" {
			continue
		}
		tok, err := readToken(t.file)
		if err != nil {
			return fmt.Errorf("keys: %w", err)
		}
		opts.Tokens = append(opts.Tokens, keysvc.Token{Name: string(t.role), Role: t.role, SHA256: svcauth.Hash(tok), Issuers: t.issuers})
	}
	if *controlToken != "" {
		if opts.ControlToken, err = readToken(*controlToken); err != nil {
			return fmt.Errorf("keys: %w", err)
		}
	}
	if *snapToken != "" {
		tok, err := readToken(*snapToken)
		if err != nil {
			return fmt.Errorf("keys: %w", err)
		}
		opts.SnapshotTokenHash = svcauth.Hash(tok)
	}
	if opts.SigningKey, err = keysvc.LoadSigningKey(*signingKey, log); err != nil {
		return fmt.Errorf("keys: -signing-key-file: %w", err)
	}
	if err := keysvc.Run(ctx, opts); err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	return nil
}

// githubOptions is GitHub's secret scanning protocol as the flags set it:
// nil when off. A -github-keys-* flag without -github-secret-scanning is
// an error, not silently ignored.
func githubOptions(fs *flag.FlagSet, on bool, url, file string) (*keysvc.GitHubOptions, error) {
	if !on {
		var set []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "github-keys-url" || f.Name == "github-keys-file" {
				set = append(set, "-"+f.Name)
			}
		})
		if len(set) > 0 {
			return nil, fmt.Errorf("%s needs -github-secret-scanning", strings.Join(set, " and "))
		}
		return nil, nil
	}
	if file == "" && !strings.HasPrefix(url, "https://") && !strings.HasPrefix(url, "http://") {
		return nil, fmt.Errorf("-github-keys-url %q: want an http(s) URL", url)
	}
	return &keysvc.GitHubOptions{KeysURL: url, KeysFile: file}, nil
}

// readPublicKey reads a PEM PKIX public key.
func readPublicKey(path string) (any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: not PEM", path)
	}
	return x509.ParsePKIXPublicKey(blk.Bytes)
}

// scannerFlag collects -scanner id=FILE.
type scannerFlag struct{ list []keysvc.Scanner }

func (f *scannerFlag) String() string {
	ids := make([]string, len(f.list))
	for i, s := range f.list {
		ids[i] = s.ID
	}
	return strings.Join(ids, ",")
}

func (f *scannerFlag) Set(v string) error {
	id, file, ok := strings.Cut(v, "=")
	if !ok || id == "" || file == "" {
		return fmt.Errorf("want id=FILE, got %q", v)
	}
	k, err := readPublicKey(file)
	if err != nil {
		return err
	}
	pub, ok := k.(*ecdsa.PublicKey)
	if !ok || pub.Curve.Params().Name != "P-256" {
		return fmt.Errorf("%s: want an ECDSA P-256 public key", file)
	}
	f.list = append(f.list, keysvc.Scanner{ID: id, Key: pub})
	return nil
}
