package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/portico-gw/portico/gateway/internal/framing"
)

// newServer configures the http.Server of one listener.
func (n *Node) newServer(p *pool, l Listener) *http.Server {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: n.opts.ReadHeaderTimeout,
		IdleTimeout:       n.opts.IdleTimeout,
		// net/http's HTTP/2 announces and enforces MaxHeaderBytes plus
		// h2HeaderListPadding as its header list limit, which makes
		// that the node's limit exactly. HTTP/1 heads are held to the
		// node's limit by the framing guard; net/http's own HTTP/1
		// limit (this plus 4 KiB) lies beyond it.
		MaxHeaderBytes: n.opts.MaxHeaderBytes - h2HeaderListPadding,
		ConnContext:    framing.ConnContext,
		Protocols:      protocols,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: 250,
			// The header list limit is the same for both protocols.
			MaxDecoderHeaderTableSize: 4096,
		},
		ErrorLog: log.New(serverErrorWriter{n.log}, "", 0),
	}
	if l.TLS != nil {
		cfg := l.TLS.Clone()
		cfg.NextProtos = []string{"h2", "http/1.1"}
		if cfg.MinVersion == 0 {
			cfg.MinVersion = tls.VersionTLS12
		}
		srv.TLSConfig = cfg
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	return srv
}

// h2HeaderListPadding is what net/http adds to MaxHeaderBytes for its
// HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE (http2adjustHTTP1MaxHeaderSize: 32
// bytes of per-field overhead for ten fields). TestHeaderLimit checks it.
const h2HeaderListPadding = 10 * 32

// serverErrorWriter routes net/http's own log lines (bad requests it
// rejected, handshake errors) to the structured logger at debug level: they
// are the client's fault and would otherwise let any client flood the log.
type serverErrorWriter struct{ log *slog.Logger }

func (w serverErrorWriter) Write(p []byte) (int, error) {
	w.log.Debug("http server", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}

// tlsListener does the TLS handshake itself, off the accept loop, so it can
// hand each connection to net/http in the right form: HTTP/2 connections as
// the *tls.Conn net/http needs for ALPN, HTTP/1.1 connections wrapped by the
// framing guard, which must see the decrypted bytes.
type tlsListener struct {
	inner   net.Listener
	config  *tls.Config
	timeout time.Duration
	framing framing.Options // for HTTP/1.1 connections
	log     *slog.Logger

	conns chan net.Conn
	done  chan struct{}
	// shaking counts the handshakes in progress, which the accept loop
	// lets finish when the inner listener closes.
	shaking   sync.WaitGroup
	closeOnce sync.Once
	mu        sync.Mutex
	pending   map[net.Conn]struct{} // handshakes in progress
	err       error
}

func newTLSListener(inner net.Listener, cfg *tls.Config, timeout time.Duration, fo framing.Options, log *slog.Logger) *tlsListener {
	l := &tlsListener{
		inner:   inner,
		config:  cfg,
		timeout: timeout,
		framing: fo,
		log:     log,
		conns:   make(chan net.Conn),
		done:    make(chan struct{}),
		pending: map[net.Conn]struct{}{},
	}
	go l.acceptLoop()
	return l
}

func (l *tlsListener) acceptLoop() {
	var backoff time.Duration
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		c, err := l.inner.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Temporary (EMFILE and the like): back off as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				retry.Reset(backoff)
				select {
				case <-retry.C:
					continue
				case <-l.done:
				}
			}
			// The inner listener is closed (a drain) or broken: the
			// connections accepted already still complete their
			// handshakes and are served, unless Close comes first.
			l.shaking.Wait()
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.Close()
			return
		}
		backoff = 0
		l.mu.Lock()
		l.pending[c] = struct{}{}
		l.mu.Unlock()
		l.shaking.Add(1)
		go func() {
			defer l.shaking.Done()
			l.handshake(c)
		}()
	}
}

func (l *tlsListener) handshake(raw net.Conn) {
	defer func() {
		l.mu.Lock()
		delete(l.pending, raw)
		l.mu.Unlock()
	}()
	tc := tls.Server(raw, l.config)
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		l.log.Debug("tls handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
		_ = raw.Close()
		return
	}
	var c net.Conn = tc
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		c = framing.Wrap(tc, l.framing)
	}
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *tlsListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

func (l *tlsListener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.inner.Close()
		l.mu.Lock()
		for c := range l.pending {
			_ = c.Close()
		}
		l.mu.Unlock()
	})
	return err
}

func (l *tlsListener) Addr() net.Addr { return l.inner.Addr() }
