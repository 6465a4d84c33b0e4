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
//   - It never copies or buffers bytes, and passes them through unchanged
//     but for the one case below; net/http still does all the real parsing
//     and rejects what it rejects.
//   - It is not what makes forwarding safe: the gateway re-frames every
//     request it sends upstream. The check is about refusing such a client
//     and closing its connection, as the RFC asks.
//   - It reads HTTP/1 only. When the stream stops being HTTP/1 that net/http
//     would serve (the h2c preface, anything the server would reject and
//     close on), it stops following the stream for good and passes bytes
//     through. After a protocol switch (101, CONNECT, Hijack) it cannot
//     know and keeps following; a flag raised then means nothing, and a
//     long stretch without a line break would be cut as an oversized head
//     (the gateway never switches protocols).
//
// Two things it does change, on connections net/http is about to refuse
// anyway, so that it refuses them the way the gateway promises:
//   - Request heads are held to [Options.MaxHeaderBytes] exactly. net/http
//     reads up to 4 KiB past its MaxHeaderBytes before it answers 431, and
//     how much depends on how the bytes arrive. When a head goes past the
//     limit, a Conn hands the server the head up to the limit and then
//     filler without a line break, so the server's own limit is reached
//     at once and it answers its usual 431 and closes.
//   - On a server that also takes h2c with prior knowledge ([Options.H2C]),
//     net/http peeks at the first 14 bytes of a connection to tell the
//     preface from HTTP/1 before it reads a request, and waits until they
//     arrive. A client whose whole request is shorter, such as
//     "GET /ok\r\n\r\n", would be answered only when the read-header
//     timeout ends the wait. When the first bytes are already a request
//     line net/http refuses, a Conn ends the wait with an error, which the
//     peek swallows, and the server answers 400 at once.
package framing

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
)

// Options configure the Conns of a listener. The zero value suits a server
// with net/http's default limits.
type Options struct {
	// MaxHeaderBytes is the most bytes a request head may have: the
	// request line, the field lines and the empty line that ends them,
	// line endings included (CR or LF bytes net/http skips before a
	// request line are not part of it). A longer head is refused with
	// net/http's 431 and the connection closed. It must not be more than
	// what net/http itself lets through, the server's
	// http.Server.MaxHeaderBytes plus 4096. Zero means
	// http.DefaultMaxHeaderBytes; at most MaxServerHeaderBytes.
	MaxHeaderBytes int
	// H2C is set when the server also serves HTTP/2 with prior knowledge
	// on these connections (http.Protocols.SetUnencryptedHTTP2).
	H2C bool
}

// Conn is a net.Conn whose Read follows the HTTP/1.x request stream. All
// other methods are those of the underlying connection.
//
// Read must not be called concurrently (net/http never does); Flagged may be
// called from any goroutine at any time.
type Conn struct {
	net.Conn
	p parser
	// sniffed counts the first bytes read, up to prefaceProbe, while the
	// server may be waiting for them to tell the h2c preface from HTTP/1.
	// It starts at prefaceProbe without Options.H2C.
	sniffed int
}

// NewConn wraps c, which must carry plaintext HTTP/1.x from its first byte:
// a TCP connection, or a *tls.Conn after its handshake. Handed to net/http
// directly, a wrapped TLS connection is served with Request.TLS nil; use
// [NewListener], which also forwards the TLS state.
func NewConn(c net.Conn, opts Options) *Conn {
	fc := &Conn{Conn: c}
	fc.p.maxHead = uint32(min(opts.MaxHeaderBytes, MaxServerHeaderBytes))
	if opts.MaxHeaderBytes <= 0 {
		fc.p.maxHead = http.DefaultMaxHeaderBytes
	}
	if !opts.H2C {
		fc.sniffed = prefaceProbe
	}
	return fc
}

// prefaceProbe is how many bytes net/http peeks at before it tells the h2c
// preface ("PRI * HTTP/2.0", the first 14 bytes of it) from HTTP/1.
const prefaceProbe = 14

// errShortRequest ends net/http's wait for the first bytes of a connection
// when they are already a request line it refuses.
var errShortRequest = errors.New("framing: malformed request line shorter than the h2c preface")

// Read reads from the underlying connection and follows what it read.
//
// Once a request head has gone past the limit, Read returns filler and
// never reads the connection again: the server reads filler until its own
// limit and answers 431, and nothing after the cut is ever served.
func (c *Conn) Read(b []byte) (int, error) {
	if c.p.state == stTooLarge {
		return fill(b), nil
	}
	n, err := c.Conn.Read(b)
	if n <= 0 || n > len(b) {
		return n, err
	}
	if !c.p.done() {
		if cut := c.p.feed(b[:n]); cut < n {
			// What the client sent past the cut is never served, and
			// neither is its end of stream: the server gets its 431 out.
			fill(b[cut:n])
			return n, nil
		}
	}
	if c.sniffed < prefaceProbe {
		c.sniffed += n
		// The parser stops following a request line net/http refuses
		// (no version, a malformed one): nothing the client sends next
		// changes the answer, and the server's peek for the preface
		// swallows the error, then reads the line from its buffer and
		// answers 400. A request line that can still be served keeps
		// the wait: the shortest, "M / HTTP/1.1" with LF, is 13 bytes.
		if c.sniffed < prefaceProbe && c.p.state == stPassthrough && err == nil {
			c.sniffed = prefaceProbe
			err = errShortRequest
		}
	}
	return n, err
}

// fill overwrites b with filler: the bytes of a field line that never ends.
func fill(b []byte) int {
	for i := range b {
		b[i] = 'x'
	}
	return len(b)
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

// MaxServerHeaderBytes is the largest Options.MaxHeaderBytes.
const MaxServerHeaderBytes = 1 << 20

// NewListener returns a listener whose Accept wraps each connection with
// [NewConn]. A connection that has TLS state comes back as a net.Conn that
// also has ConnectionState, so that net/http sets Request.TLS; [ConnContext]
// and [FromContext] find the *Conn either way.
//
// l must yield plaintext or already-handshaken connections: net/http does
// not run the TLS handshake (nor ALPN) on a connection it does not see as a
// *tls.Conn.
func NewListener(l net.Listener, opts Options) net.Listener {
	return listener{l, opts}
}

type listener struct {
	net.Listener
	opts Options
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c, l.opts), nil
}

// Wrap is [NewConn] for handing c to net/http: when c has TLS state (an
// already-handshaken *tls.Conn), the result also has ConnectionState, so
// net/http sets Request.TLS and serves it as HTTP/1.x. [FromContext] finds
// the *Conn either way.
func Wrap(c net.Conn, opts Options) net.Conn {
	fc := NewConn(c, opts)
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
