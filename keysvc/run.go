package keysvc

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/portico-gw/portico/gateway/keysnapshot"
	"github.com/portico-gw/portico/internal/svchttp"
	"github.com/portico-gw/portico/keysvc/store"
)

// ErrNoTokens is Open's and Run's refusal to serve a key API no token
// can call: the key API is never open.
var ErrNoTokens = errors.New("keysvc: a platform token is required: the key API is never open")

// Open returns a Service like New, opening what opts names that New
// would take ready: the store at opts.StoreDSN when opts.Store is nil,
// the signing key in opts.SigningKeyFile when opts.SigningKey is nil, and
// an HTTP/2 client for opts.ControlURL when opts.HTTPClient is nil. Close
// closes the store it opened.
func Open(ctx context.Context, opts Options) (*Service, error) {
	if len(opts.Tokens) == 0 {
		return nil, ErrNoTokens
	}
	log := cmp.Or(opts.Logger, slog.Default())
	if opts.SigningKey == nil {
		k, err := LoadSigningKey(cmp.Or(opts.SigningKeyFile, DefaultSigningKeyFile), log)
		if err != nil {
			return nil, fmt.Errorf("keysvc: signing key: %w", err)
		}
		opts.SigningKey = k
	}
	if opts.HTTPClient == nil && opts.ControlURL != "" {
		opts.HTTPClient = svchttp.Client(opts.ControlURL)
	}
	own := opts.Store == nil
	if own {
		st, err := store.Open(ctx, cmp.Or(opts.StoreDSN, DefaultStoreDSN))
		if err != nil {
			return nil, fmt.Errorf("keysvc: %w", err)
		}
		opts.Store = st
	}
	s, err := New(opts)
	if err != nil {
		if own {
			_ = opts.Store.Close()
		}
		return nil, err
	}
	s.ownStore = own
	return s, nil
}

// Close closes the store Open opened; a Service from New has nothing to
// close. Stop Run first.
func (s *Service) Close() error {
	if s.ownStore {
		return s.store.Close()
	}
	return nil
}

// Run is the `portico keys` role: Open, serve Handler on opts.Listener or
// opts.Listen and publish to the control plane until ctx ends, then stop
// the publisher before the store closes. It returns nil after a drain, or
// the error that stopped it.
func Run(ctx context.Context, opts Options) error {
	serve := svchttp.ServeOptions{CertFile: opts.TLSCertFile, KeyFile: opts.TLSKeyFile}
	if err := serve.Check(); err != nil {
		if opts.Listener != nil {
			_ = opts.Listener.Close()
		}
		return fmt.Errorf("keysvc: %w", err)
	}
	s, err := Open(ctx, opts)
	if err != nil {
		if opts.Listener != nil {
			_ = opts.Listener.Close()
		}
		return err
	}
	defer s.Close()
	ln := opts.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cmp.Or(opts.Listen, DefaultListen)); err != nil {
			return fmt.Errorf("keysvc: %w", err)
		}
	}
	// The publisher stops before the store closes.
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); s.Run(runCtx) }()
	defer func() { stopRun(); <-ran }()
	if opts.ControlURL == "" {
		s.log.Warn("no control plane (-control): changes reach nodes only through the signed snapshot they poll")
	}
	if s.opts.SnapshotTokenHash == "" {
		s.log.Warn("the signed key snapshot (every key's hash and metadata) is open to any caller (set -snapshot-token-file)")
	}
	if g := s.opts.GitHub; g != nil {
		s.log.Info("taking GitHub's secret scanning reports", "path", GitHubLeakPath, "keys", cmp.Or(g.KeysFile, g.KeysURL))
	}
	s.log.Info("key service listening", "addr", ln.Addr().String(), "store", s.store.Driver(), "signer", keysnapshot.SignerID(s.opts.SigningKey.Public().(ed25519.PublicKey)))
	return svchttp.Serve(ctx, ln, s.Handler(), serve)
}

// LoadSigningKey reads the snapshot's Ed25519 signing key from path (PEM
// PKCS #8), or makes one there (mode 0600) and writes its public key
// beside it (PATH.pub.pem for PATH.pem), for the nodes. It logs a key
// it made to log (nil: slog.Default()).
func LoadSigningKey(path string, log *slog.Logger) (ed25519.PrivateKey, error) {
	log = cmp.Or(log, slog.Default())
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return nil, err
		}
		pubFile := strings.TrimSuffix(path, ".pem") + ".pub.pem"
		pubDER, err := x509.MarshalPKIXPublicKey(priv.Public())
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
			return nil, err
		}
		log.Info("made a snapshot signing key; give nodes its public key (-keys-public-key)", "key", path, "public", pubFile)
		return priv, nil
	}
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: not PEM", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an Ed25519 key", path)
	}
	return priv, nil
}
