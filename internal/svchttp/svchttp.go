// Package svchttp is the HTTP of Portico's services: how the control
// plane, the key service and the quota service serve their Connect APIs
// and the nodes' streams (Serve), and how a client reaches one (Client).
//
// The nodes' streams are bidirectional, so they need HTTP/2: a service
// serves cleartext HTTP/1.1 and h2c on one port, or HTTP/2 and HTTP/1.1
// over TLS; a client of an http:// URL speaks h2c with prior knowledge.
package svchttp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ServeOptions configure Serve.
type ServeOptions struct {
	// CertFile and KeyFile, if set, serve TLS (HTTP/2 and HTTP/1.1 by
	// ALPN); empty serves cleartext HTTP/1.1 and h2c.
	CertFile, KeyFile string
	// ReadHeaderTimeout bounds how long a client may take to send its
	// request headers; zero means 10 s.
	ReadHeaderTimeout time.Duration
	// Grace is how long in-flight calls get to finish once ctx ends; the
	// nodes' streams never end by themselves, so they are cut after it
	// and the nodes reconnect to the next instance. Zero means 2 s.
	Grace time.Duration
}

// Check reports whether the TLS files, if any, make a certificate: both
// or neither must be set. Serve checks the same; a role checks first, so
// that a bad file fails before anything else starts.
func (o ServeOptions) Check() error {
	if o.CertFile == "" && o.KeyFile == "" {
		return nil
	}
	if o.CertFile == "" || o.KeyFile == "" {
		return errors.New("TLS needs both a certificate and its key")
	}
	if _, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile); err != nil {
		return fmt.Errorf("loading the TLS certificate: %w", err)
	}
	return nil
}

// closeWait bounds how long Serve waits, after closing the connections,
// for handlers still running: their contexts are canceled by then, so
// they only undo or record what they were doing.
const closeWait = 10 * time.Second

// Serve serves h on ln until ctx ends, then drains for opts.Grace and
// closes what is left. It returns once the handlers that were running
// have returned (or closeWait after the close), with nil after a drain,
// or the error that stopped the server. Serve owns ln.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, opts ServeOptions) error {
	if err := opts.Check(); err != nil {
		_ = ln.Close()
		return err
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = 10 * time.Second
	}
	if opts.Grace <= 0 {
		opts.Grace = 2 * time.Second
	}
	tlsOn := opts.CertFile != "" || opts.KeyFile != ""
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	if tlsOn {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	// Close does not wait for handlers: a key service's CreateKey may
	// still be withdrawing a key no one saw when its caller is cut off,
	// and the store must outlive it.
	var running inflight
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.add(1)
		defer running.add(-1)
		h.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: counted, Protocols: protocols, ReadHeaderTimeout: opts.ReadHeaderTimeout}
	errc := make(chan error, 1)
	go func() {
		if tlsOn {
			errc <- srv.ServeTLS(ln, opts.CertFile, opts.KeyFile)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), opts.Grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	_ = srv.Close()
	<-errc // http.ErrServerClosed: the serving goroutine is done
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-running.idle():
	case <-t.C:
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// inflight counts running handlers. Unlike a sync.WaitGroup, a handler
// may still start while idle is being waited for.
type inflight struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0; nil when no one waits
}

func (f *inflight) add(d int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n += d
	if f.n == 0 && f.zero != nil {
		close(f.zero)
		f.zero = nil
	}
}

// idle returns a channel closed once no handler runs.
func (f *inflight) idle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if f.zero == nil {
		f.zero = make(chan struct{})
	}
	return f.zero
}

// Client returns the HTTP client of a service at url: h2c with prior
// knowledge for an http:// URL (the streams need HTTP/2, and with
// HTTP/1.1 allowed the transport would use it), HTTP/2 over TLS
// otherwise. Unary calls work over it as well.
func Client(url string) *http.Client {
	protocols := new(http.Protocols)
	if strings.HasPrefix(url, "http://") {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP2(true)
	}
	return &http.Client{Transport: &http.Transport{Protocols: protocols, IdleConnTimeout: time.Minute}}
}

// LoopbackOnly reports whether addr (host:port) listens on a loopback
// address only; an empty host listens everywhere.
func LoopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
