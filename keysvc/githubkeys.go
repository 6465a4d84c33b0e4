package keysvc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"
)

// DefaultGitHubKeysURL is GitHub's published document of the public keys
// that sign its secret scanning reports.
const DefaultGitHubKeysURL = "https://api.github.com/meta/public_keys/secret_scanning"

// Limits and pace of GitHub's public keys.
const (
	// githubRefetchEvery is the least time between two loads of the
	// keys: an unknown identifier, which anyone can send, costs GitHub's
	// API at most one request a minute.
	githubRefetchEvery = time.Minute
	// githubKeysMaxAge is how long loaded keys are used without asking
	// again, so that a key GitHub withdraws stops verifying.
	githubKeysMaxAge = 24 * time.Hour
	// maxGitHubKeysDoc bounds the keys document.
	maxGitHubKeysDoc = 1 << 20
)

// Errors of GitHub's public keys; a report they refuse changes nothing.
var (
	// ErrGitHubKeyUnknown: the report names a key identifier that is not
	// in GitHub's document, even after loading it again (at most once a
	// minute).
	ErrGitHubKeyUnknown = errors.New("keysvc: unknown GitHub public key identifier")
	// ErrGitHubKeysUnavailable: GitHub's keys could not be loaded (the
	// fetch failed, timed out or brought no usable key), so a report
	// cannot be verified now; GitHub sends it again.
	ErrGitHubKeysUnavailable = errors.New("keysvc: GitHub's public keys are unavailable")
)

// GitHubOptions configure GitHub's secret scanning partner protocol.
type GitHubOptions struct {
	// KeysURL serves GitHub's public keys document (JSON, public_keys[]
	// of key_identifier, key, is_current); empty: DefaultGitHubKeysURL.
	KeysURL string
	// KeysFile, if set, holds the document instead, for a key service
	// that cannot reach GitHub; KeysURL is then not used. New reads it
	// and fails if it holds no usable key; it is read again, as the URL
	// would be fetched, when a report names an identifier it lacks.
	KeysFile string
	// HTTPClient fetches KeysURL; nil: http.DefaultClient.
	HTTPClient *http.Client
	// FetchTimeout bounds one fetch of KeysURL; zero means 10 s.
	FetchTimeout time.Duration
}

// githubKeys is GitHub's public keys by identifier, loaded when a report
// needs them: at the first report, when a report names an identifier
// they lack (at most once a minute), and when they are a day old. One
// load runs at a time; reports that need it wait for it. It is safe for
// concurrent use.
type githubKeys struct {
	opts GitHubOptions
	now  func() time.Time
	log  *slog.Logger

	mu sync.Mutex
	// byID holds every usable key of the last document loaded; several
	// keys may share an identifier.
	byID map[string][]*ecdsa.PublicKey
	// loaded is when byID was loaded, tried when a load last started;
	// lastErr is that load's failure, or nil.
	loaded, tried time.Time
	lastErr       error
	// loading is closed when the running load ends; nil when none runs.
	loading chan struct{}
}

func newGitHubKeys(opts GitHubOptions, now func() time.Time, log *slog.Logger) (*githubKeys, error) {
	if opts.KeysURL == "" {
		opts.KeysURL = DefaultGitHubKeysURL
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = http.DefaultClient
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = 10 * time.Second
	}
	g := &githubKeys{opts: opts, now: now, log: log}
	if opts.KeysFile != "" {
		// An operator's file is checked at start: a typo must not wait
		// for GitHub's first report to show.
		byID, err := g.load(context.Background())
		if err != nil {
			return nil, err
		}
		g.byID, g.loaded, g.tried = byID, now(), now()
	}
	return g, nil
}

// source names where the keys come from, for logs and errors.
func (g *githubKeys) source() string {
	if g.opts.KeysFile != "" {
		return g.opts.KeysFile
	}
	return g.opts.KeysURL
}

// lookup returns the keys of identifier id, loading the document first
// when it lacks id or is a day old, unless a load started less than a
// minute ago. Its errors are ErrGitHubKeyUnknown, ErrGitHubKeysUnavailable
// (wrapping the load's failure) and ctx's.
func (g *githubKeys) lookup(ctx context.Context, id string) ([]*ecdsa.PublicKey, error) {
	// A call that saw a load end answers from it: one load per call at
	// most, whatever the clock does.
	sawLoad := false
	for {
		g.mu.Lock()
		keys, known := g.byID[id]
		now := g.now()
		fresh := !g.loaded.IsZero() && now.Sub(g.loaded) < githubKeysMaxAge
		mayLoad := g.tried.IsZero() || now.Sub(g.tried) >= githubRefetchEvery
		if (known && fresh) || (g.loading == nil && (sawLoad || !mayLoad)) {
			lastErr := g.lastErr
			g.mu.Unlock()
			switch {
			case known:
				return keys, nil
			case lastErr != nil:
				return nil, fmt.Errorf("%w: %w", ErrGitHubKeysUnavailable, lastErr)
			}
			return nil, ErrGitHubKeyUnknown
		}
		if wait := g.loading; wait != nil {
			g.mu.Unlock()
			select {
			case <-wait:
				sawLoad = true
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		g.loading, g.tried = done, now
		g.mu.Unlock()

		// The load is every waiting report's: the first one's caller
		// going away must not cut it short.
		byID, err := g.load(context.WithoutCancel(ctx))
		g.mu.Lock()
		g.lastErr = err
		if err == nil {
			g.byID, g.loaded = byID, g.now()
		}
		g.loading = nil
		g.mu.Unlock()
		close(done)
		sawLoad = true
		if err != nil {
			g.log.Error("loading GitHub's secret scanning public keys failed", "source", g.source(), "err", err)
		} else {
			g.log.Info("GitHub's secret scanning public keys loaded", "source", g.source(), "identifiers", len(byID))
		}
	}
}

// load reads the document from the file or the URL and returns its
// usable keys.
func (g *githubKeys) load(ctx context.Context) (map[string][]*ecdsa.PublicKey, error) {
	var doc []byte
	if g.opts.KeysFile != "" {
		f, err := os.Open(g.opts.KeysFile)
		if err != nil {
			return nil, fmt.Errorf("GitHub's public keys: %w", err)
		}
		defer f.Close()
		if doc, err = io.ReadAll(io.LimitReader(f, maxGitHubKeysDoc+1)); err != nil {
			return nil, fmt.Errorf("GitHub's public keys %s: %w", g.opts.KeysFile, err)
		}
	} else {
		var err error
		if doc, err = g.fetch(ctx); err != nil {
			return nil, err
		}
	}
	if len(doc) > maxGitHubKeysDoc {
		return nil, fmt.Errorf("GitHub's public keys %s: larger than %d bytes", g.source(), maxGitHubKeysDoc)
	}
	byID, skipped, err := parseGitHubKeys(doc)
	if err != nil {
		return nil, fmt.Errorf("GitHub's public keys %s: %w", g.source(), err)
	}
	for _, s := range skipped {
		g.log.Warn("a GitHub public key is not usable; ignored", "source", g.source(), "why", s)
	}
	return byID, nil
}

func (g *githubKeys) fetch(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, g.opts.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.opts.KeysURL, nil)
	if err != nil {
		return nil, fmt.Errorf("GitHub's public keys: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := g.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GitHub's public keys: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GitHub's public keys %s: %s", g.opts.KeysURL, resp.Status)
	}
	doc, err := io.ReadAll(io.LimitReader(resp.Body, maxGitHubKeysDoc+1))
	if err != nil {
		return nil, fmt.Errorf("GitHub's public keys %s: %w", g.opts.KeysURL, err)
	}
	return doc, nil
}

// gitHubKeysDoc is GitHub's public keys document.
type gitHubKeysDoc struct {
	PublicKeys []struct {
		KeyIdentifier string `json:"key_identifier"`
		Key           string `json:"key"`
		// IsCurrent says which key GitHub signs with now; the others
		// still verify, as GitHub may send reports signed before a
		// rotation.
		IsCurrent bool `json:"is_current"`
	} `json:"public_keys"`
}

// parseGitHubKeys returns the ECDSA P-256 keys of a document by
// identifier, and why it skipped the others (a key of a kind GitHub may
// add later must not stop the ones that verify today). A document that
// is not one, or has no usable key, is an error.
func parseGitHubKeys(doc []byte) (map[string][]*ecdsa.PublicKey, []string, error) {
	var d gitHubKeysDoc
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, nil, fmt.Errorf("not a public keys document: %w", err)
	}
	byID := map[string][]*ecdsa.PublicKey{}
	var skipped []string
	for i, k := range d.PublicKeys {
		pub, err := parseGitHubKey(k.Key)
		switch {
		case k.KeyIdentifier == "":
			skipped = append(skipped, fmt.Sprintf("public_keys[%d]: no key_identifier", i))
		case err != nil:
			skipped = append(skipped, fmt.Sprintf("public_keys[%d] (%s): %v", i, k.KeyIdentifier, err))
		default:
			byID[k.KeyIdentifier] = append(byID[k.KeyIdentifier], pub)
		}
	}
	if len(byID) == 0 {
		return nil, skipped, fmt.Errorf("no usable key in %d public_keys", len(d.PublicKeys))
	}
	return byID, skipped, nil
}

// parseGitHubKey reads a PEM PKIX ECDSA P-256 public key.
func parseGitHubKey(s string) (*ecdsa.PublicKey, error) {
	blk, _ := pem.Decode([]byte(s))
	if blk == nil {
		return nil, errors.New("key is not PEM")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	pub, ok := k.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, errors.New("not an ECDSA P-256 key")
	}
	return pub, nil
}
