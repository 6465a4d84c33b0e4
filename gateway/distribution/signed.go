package distribution

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/portico-gw/portico/gateway/fastlane"
	"github.com/portico-gw/portico/gateway/keysnapshot"
)

// The signed snapshot is the fast lane's fallback: the key service
// publishes its whole state (keys, deny entries, issuers' keys), signed
// with Ed25519, and every node polls it, so that a revocation lands
// within one poll period even when no stream to the control plane is up.

// ErrTooOld: a polled snapshot was generated longer ago than MaxAge; a
// replayed snapshot cannot hold a node on old keys. The Poller's other
// refusals are keysnapshot's errors and fastlane.ErrStale.
var ErrTooOld = errors.New("signed snapshot: generated too long ago")

// PollerOptions configure a Poller.
type PollerOptions struct {
	// URL serves the key service's SignedKeySnapshot
	// ("http://keys:7100/v1/key-snapshot").
	URL        string
	HTTPClient *http.Client
	// Trusted are the key service's signing keys; a snapshot signed by
	// another is refused.
	Trusted []ed25519.PublicKey
	// Interval between polls; zero means 60 s. Each wait is jittered by
	// up to a tenth, so nodes do not poll in step.
	Interval time.Duration
	// MaxBytes bounds a snapshot; zero means 1 GiB.
	MaxBytes int64
	// MaxAge refuses a polled snapshot generated longer ago (the key
	// service builds a new one at least every minute); zero means the
	// larger of 10 minutes and 5 intervals. The cached snapshot applied
	// at Boot is exempt.
	MaxAge time.Duration
	// Now is the clock for MaxAge; nil means time.Now.
	Now func() time.Time
	// CacheFile keeps the last snapshot applied, signature and all; Boot
	// applies it again (verified again), so that a node restarted while
	// the key service and the control plane are both unreachable still
	// knows its keys. Empty: none.
	CacheFile string
	Lane      *fastlane.Lane
	Logger    *slog.Logger
}

// Poller polls the signed snapshot and applies each newer one to a Lane.
type Poller struct {
	opts PollerOptions
	log  *slog.Logger

	mu      sync.Mutex
	etag    string
	lastErr error
	polls   int
}

// NewPoller checks opts and returns a Poller.
func NewPoller(opts PollerOptions) (*Poller, error) {
	if opts.URL == "" || opts.Lane == nil {
		return nil, errors.New("distribution: a snapshot poller needs a URL and a Lane")
	}
	if len(opts.Trusted) == 0 {
		return nil, errors.New("distribution: a snapshot poller needs the key service's public key")
	}
	if opts.Interval <= 0 {
		opts.Interval = 60 * time.Second
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 1 << 30
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = max(10*time.Minute, 5*opts.Interval)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	p := &Poller{opts: opts, log: opts.Logger}
	if p.log == nil {
		p.log = slog.Default()
	}
	return p, nil
}

// Boot applies the cached snapshot, if there is one and it verifies: before
// the node serves. It reports whether it applied one.
func (p *Poller) Boot() (bool, error) {
	if p.opts.CacheFile == "" {
		return false, nil
	}
	data, err := os.ReadFile(p.opts.CacheFile)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("distribution: reading the cached key snapshot: %w", err)
	}
	snap, err := keysnapshot.Verify(data, p.opts.Trusted)
	if err != nil {
		return false, fmt.Errorf("distribution: the cached key snapshot %s: %w", p.opts.CacheFile, err)
	}
	err = p.opts.Lane.ApplySigned(snap.GetSeq(), snap.GetEntries())
	if err != nil && !fastlane.Refused(err) {
		return false, fmt.Errorf("distribution: the cached key snapshot %s: %w", p.opts.CacheFile, err)
	}
	p.log.Info("cached key snapshot applied", "seq", snap.GetSeq(), "entries", len(snap.GetEntries()))
	return true, nil
}

// Run polls at once, then every Interval, until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	for {
		if err := p.Poll(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("polling the signed key snapshot failed", "url", p.opts.URL, "err", err)
		}
		jitter := time.Duration(rand.Int64N(int64(p.opts.Interval)/10 + 1))
		t := time.NewTimer(p.opts.Interval - jitter)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Status returns how many polls ran and the last one's error.
func (p *Poller) Status() (polls int, lastErr error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.polls, p.lastErr
}

// Poll fetches the snapshot once and applies it if it is newer than the
// one the Lane holds. A snapshot the node refuses (bad signature, unknown
// signer, older) changes nothing.
func (p *Poller) Poll(ctx context.Context) error {
	err := p.poll(ctx)
	p.mu.Lock()
	p.polls++
	p.lastErr = err
	p.mu.Unlock()
	return err
}

func (p *Poller) poll(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.opts.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/x-protobuf")
	p.mu.Lock()
	if p.etag != "" {
		req.Header.Set("If-None-Match", p.etag)
	}
	p.mu.Unlock()
	resp, err := p.opts.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		return nil
	case http.StatusOK:
	default:
		return fmt.Errorf("signed snapshot: %s", resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, p.opts.MaxBytes+1))
	if err != nil {
		return fmt.Errorf("signed snapshot: reading: %w", err)
	}
	if int64(len(data)) > p.opts.MaxBytes {
		return fmt.Errorf("%w: larger than %d bytes", keysnapshot.ErrMalformed, p.opts.MaxBytes)
	}
	snap, err := keysnapshot.Verify(data, p.opts.Trusted)
	if err != nil {
		return err
	}
	if g := snap.GetGenerated(); !g.IsValid() || p.opts.Now().Sub(g.AsTime()) > p.opts.MaxAge {
		return fmt.Errorf("%w: generated %v, more than %s ago", ErrTooOld, g.AsTime().UTC(), p.opts.MaxAge)
	}
	if snap.GetSeq() == p.opts.Lane.SignedSeq() {
		return nil // the one the node has (a server that ignores If-None-Match)
	}
	// An older one is refused by the Lane (fastlane.ErrStale).
	err = p.opts.Lane.ApplySigned(snap.GetSeq(), snap.GetEntries())
	if err != nil && !fastlane.Refused(err) {
		return err
	}
	if et := resp.Header.Get("ETag"); et != "" && strings.Contains(et, strconv.FormatUint(snap.GetSeq(), 10)) {
		p.mu.Lock()
		p.etag = et
		p.mu.Unlock()
	}
	if p.opts.CacheFile != "" {
		if werr := writeFile(p.opts.CacheFile, data); werr != nil {
			p.log.Error("caching the key snapshot failed", "file", p.opts.CacheFile, "err", werr)
		}
	}
	p.log.Info("signed key snapshot applied", "seq", snap.GetSeq(), "entries", len(snap.GetEntries()))
	return err
}
