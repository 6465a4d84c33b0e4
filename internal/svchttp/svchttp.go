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
	"errors"
	"net"
	"net/http"
	"strings"
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

// Serve serves h on ln until ctx ends, then drains for opts.Grace and
// closes what is left. It returns nil after a drain, or the error that
// stopped the server. Serve owns ln.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, opts ServeOptions) error {
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
	srv := &http.Server{Handler: h, Protocols: protocols, ReadHeaderTimeout: opts.ReadHeaderTimeout}
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
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
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
