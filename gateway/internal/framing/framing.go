// Package framing watches the plaintext HTTP/1.x byte stream that net/http's
// server reads from a connection and flags the connection when a request head
// had ambiguous message framing.
//
// It exists because net/http hides that ambiguity from handlers. When a
// request carries both Content-Length and Transfer-Encoding: chunked, the
// server deletes Content-Length, reads the body as chunked and keeps the
// connection open (transfer.go, parseTransferEncoding and fixLength); on an
// HTTP/1.0 request it drops Transfer-Encoding altogether and frames the body
// by Content-Length. RFC 9112 §6.1 and §6.3 say such a message ought to be
// handled as an error and that the server must close the connection after
// responding. By the time a handler runs, the request shows no trace of the
// field that was removed, so the check has to happen on the bytes.
//
// A [Conn] wraps the accepted connection. Its Read passes the bytes through
// unchanged and follows them with a small incremental parser that frames the
// stream exactly as the server does: request line, field lines, then a
// Content-Length or chunked body, request after request, pipelined or split
// across reads in any way. A handler finds its Conn with [FromContext] (wire
// [ConnContext] into http.Server.ConnContext) and, when [Conn.Flagged] is
// not nil, answers 400 with "Connection: close".
//
// What it does not do:
//   - It never changes, copies or buffers bytes; net/http still does all the
//     real parsing and rejects what it rejects.
//   - It is not what makes forwarding safe: the gateway re-frames every
//     request it sends upstream. The check is about refusing such a client
//     and closing its connection, as the RFC asks.
//   - It reads HTTP/1 only. When the stream stops being HTTP/1 that net/http
//     would serve (the h2c preface, anything the server would reject and
//     close on, a head longer than the server's default limit), it stops
//     following the stream for good and passes bytes through. After a
//     protocol switch (101, CONNECT, Hijack) it cannot know and keeps
//     following; a flag raised then means nothing.
//   - It only knows net/http's default limits. A server with MaxHeaderBytes
//     above http.DefaultMaxHeaderBytes may serve heads this package has
//     stopped following.
package framing

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
)

// Conn is a net.Conn whose Read follows the HTTP/1.x request stream. All
// other methods are those of the underlying connection.
//
// Read must not be called concurrently (net/http never does); Flagged may be
// called from any goroutine at any time.
type Conn struct {
	net.Conn
	p parser
}

// NewConn wraps c, which must carry plaintext HTTP/1.x from its first byte:
// a TCP connection, or a *tls.Conn after its handshake. Handed to net/http
// directly, a wrapped TLS connection is served with Request.TLS nil; use
// [NewListener], which also forwards the TLS state.
func NewConn(c net.Conn) *Conn {
	return &Conn{Conn: c}
}

// Read reads from the underlying connection and follows what it read.
func (c *Conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && n <= len(b) && !c.p.done() {
		c.p.feed(b[:n])
	}
	return n, err
}

// Flagged returns nil, or an *Error describing the first request head read
// on this connection that net/http serves despite ambiguous framing. Heads
// that net/http rejects are not flagged: it closes the connection itself.
// Once Flagged returns an error it keeps returning one.
//
// Because the server reads ahead, the offending head may be a pipelined
// request after the one a handler is serving; refusing that one too is the
// point, since the connection must be closed.
func (c *Conn) Flagged() error {
	v := c.p.flag.Load()
	if v == 0 {
		return nil
	}
	return &Error{Reason: Reason(v & 0xff), Request: int(v >> 8)}
}

// Unwrap returns the underlying connection.
func (c *Conn) Unwrap() net.Conn {
	return c.Conn
}

// TLSConnectionState returns the TLS state of the underlying connection, if
// it has one (a *tls.Conn does).
//
// It is deliberately not named ConnectionState: net/http sets Request.TLS
// for any connection with a ConnectionState method, and doing so for a
// plaintext connection would also turn off h2c.
func (c *Conn) TLSConnectionState() (tls.ConnectionState, bool) {
	if s, ok := c.Conn.(connectionStater); ok {
		return s.ConnectionState(), true
	}
	return tls.ConnectionState{}, false
}

// CloseWrite shuts down the writing side of the underlying connection if it
// can (*net.TCPConn and *tls.Conn can); net/http uses it before closing a
// connection it has answered with an error.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// ReadFrom writes r's contents to the underlying connection, keeping its
// io.ReaderFrom fast path (sendfile, splice) for net/http's responses. Only
// reads are followed, so writes may bypass Conn.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(c.Conn, r)
}

type connectionStater interface {
	ConnectionState() tls.ConnectionState
}

// tlsConn is a Conn over a connection with TLS state. Its ConnectionState
// lets net/http fill in Request.TLS for an already-handshaken *tls.Conn.
type tlsConn struct {
	*Conn
}

func (c tlsConn) ConnectionState() tls.ConnectionState {
	s, _ := c.TLSConnectionState()
	return s
}

// MaxServerHeaderBytes is the largest http.Server.MaxHeaderBytes whose
// request heads the guard follows; a server allowing larger heads would get
// heads past the guard's limit unchecked.
const MaxServerHeaderBytes = 1 << 20

// NewListener returns a listener whose Accept wraps each connection with
// [NewConn]. A connection that has TLS state comes back as a net.Conn that
// also has ConnectionState, so that net/http sets Request.TLS; [ConnContext]
// and [FromContext] find the *Conn either way.
//
// l must yield plaintext or already-handshaken connections: net/http does
// not run the TLS handshake (nor ALPN) on a connection it does not see as a
// *tls.Conn.
func NewListener(l net.Listener) net.Listener {
	return listener{l}
}

type listener struct {
	net.Listener
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}

// Wrap is [NewConn] for handing c to net/http: when c has TLS state (an
// already-handshaken *tls.Conn), the result also has ConnectionState, so
// net/http sets Request.TLS and serves it as HTTP/1.x. [FromContext] finds
// the *Conn either way.
func Wrap(c net.Conn) net.Conn {
	fc := NewConn(c)
	if _, ok := c.(connectionStater); ok {
		return tlsConn{fc}
	}
	return fc
}

type connKey struct{}

// ConnContext returns ctx carrying c's *Conn, if c is one that this package
// made, and ctx otherwise. It has the signature of http.Server.ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	switch c := c.(type) {
	case *Conn:
		return context.WithValue(ctx, connKey{}, c)
	case tlsConn:
		return context.WithValue(ctx, connKey{}, c.Conn)
	}
	return ctx
}

// FromContext returns the *Conn that [ConnContext] stored in ctx.
func FromContext(ctx context.Context) (*Conn, bool) {
	c, ok := ctx.Value(connKey{}).(*Conn)
	return c, ok
}
