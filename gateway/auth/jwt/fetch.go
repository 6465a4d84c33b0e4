package jwt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"
)

const (
	// maxJWKSBytes bounds a fetched key set, as the config bounds a pushed
	// one.
	maxJWKSBytes = 1 << 20
	// fetchTimeout bounds one fetch, whatever the HTTP client allows.
	fetchTimeout = 10 * time.Second
)

// fetchConfig is what a fetcher is made of. An issuer whose fetchConfig is
// unchanged keeps its fetcher, and the keys it fetched, across Updates.
type fetchConfig struct {
	issuer     string // the configured name, for logs
	url        string
	refresh    time.Duration
	minRefresh time.Duration
	algs       algSet
}

// fetcher keeps an issuer's keys from its jwks_url: it fetches when
// started, every refresh (with jitter) and, at most once per minRefresh,
// when Verify meets a kid it does not know. It is a goroutine owned by the
// Verifier, started by Update and stopped by Update or Close.
type fetcher struct {
	cfg    fetchConfig
	client *http.Client
	log    *slog.Logger
	// keys are the last fetched keys, nil until a fetch succeeds. A failed
	// fetch leaves them as they are.
	keys atomic.Pointer[keySet]
	// kicks asks for an early fetch; buffered, so a flood of unknown kids
	// coalesces into one request.
	kicks  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

func startFetcher(cfg fetchConfig, client *http.Client, log *slog.Logger) *fetcher {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fetcher{
		cfg:    cfg,
		client: client,
		log:    log.With("issuer", cfg.issuer, "jwks_url", redact(cfg.url)),
		kicks:  make(chan struct{}, 1),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	go f.run(ctx)
	return f
}

// kick asks for a fetch as soon as minRefresh allows. It never blocks, so
// Verify can call it.
func (f *fetcher) kick() {
	select {
	case f.kicks <- struct{}{}:
	default:
	}
}

// stop ends the goroutine, aborting a fetch in flight, and waits for it.
func (f *fetcher) stop() {
	f.cancel()
	<-f.done
}

func (f *fetcher) run(ctx context.Context) {
	defer close(f.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var last time.Time // start of the last fetch
	next := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.kicks:
			if soon := last.Add(f.cfg.minRefresh); soon.Before(next) {
				next = soon
				timer.Reset(time.Until(next))
			}
			continue
		case <-timer.C:
		}
		last = time.Now()
		f.fetch(ctx)
		// ±10 % so that a fleet of nodes does not fetch in step.
		next = last.Add(time.Duration(float64(f.cfg.refresh) * (0.9 + 0.2*rand.Float64())))
		timer.Reset(time.Until(next))
	}
}

func (f *fetcher) fetch(ctx context.Context) {
	keys, skipped, err := f.get(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return // stopped
		}
		f.log.Warn("jwt: jwks fetch failed; keeping the keys fetched before", "error", err)
		return
	}
	if old := f.keys.Load(); old != nil {
		keys.reuse(*old)
	}
	f.keys.Store(&keys)
	f.log.Debug("jwt: jwks fetched", "keys", len(keys), "skipped", skipped)
}

func (f *fetcher) get(ctx context.Context) (keySet, int, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.cfg.url, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		// The error would repeat the URL, query and all; the fetcher's
		// logger already has it, redacted.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, 0, fmt.Errorf("reading body: %w", err)
	}
	if len(body) > maxJWKSBytes {
		return nil, 0, fmt.Errorf("body larger than %d bytes", maxJWKSBytes)
	}
	keys, skipped, err := parseJWKS(body, f.cfg.algs, false)
	if err != nil {
		return nil, 0, fmt.Errorf("invalid JWKS: %w", err)
	}
	if len(keys) == 0 {
		return nil, 0, fmt.Errorf("no usable signing keys (%d skipped)", skipped)
	}
	return keys, skipped, nil
}

// redact keeps a URL's scheme, host and path: user info and query may hold
// secrets.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// httpClient is the client fetchers use: the caller's or one with sane
// timeouts, and never following redirects, so a key set comes from the
// configured https URL and nowhere else.
func httpClient(c *http.Client) *http.Client {
	if c == nil {
		t, ok := http.DefaultTransport.(*http.Transport)
		if ok {
			t = t.Clone()
		} else {
			t = &http.Transport{Proxy: http.ProxyFromEnvironment}
		}
		t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		t.TLSHandshakeTimeout = 5 * time.Second
		t.ResponseHeaderTimeout = 5 * time.Second
		c = &http.Client{Transport: t, Timeout: 5 * time.Second}
	} else {
		copied := *c
		c = &copied
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}
