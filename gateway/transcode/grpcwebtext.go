package transcode

import (
	"encoding/base64"
	"io"
	"net/http"
	"strings"

	"github.com/portico-gw/portico/gateway/problem"
)

// gRPC-Web's text mode (application/grpc-web-text) is its binary mode in
// base64, for clients that cannot handle binary bodies. The transcoder
// speaks only the binary mode, so the text mode is undone on the way in
// and redone on the way out, here.

const (
	webBinary = "application/grpc-web"
	webText   = "application/grpc-web-text"
)

// IsGRPCWebText reports whether contentType is gRPC-Web's text mode.
func IsGRPCWebText(contentType string) bool {
	return len(contentType) >= len(webText) && strings.EqualFold(contentType[:len(webText)], webText)
}

// FromGRPCWebText turns a text-mode gRPC-Web request into a binary one for
// h, and h's answer back into text mode, through a (see RPCAnswer), which
// it resets and finishes.
func FromGRPCWebText(h http.Handler, a *RPCAnswer, w http.ResponseWriter, r *http.Request) {
	ct := r.Header.Get("Content-Type")
	r2 := r.Clone(r.Context())
	r2.Header.Set("Content-Type", webBinary+ct[len(webText):])
	if accept := r2.Header.Get("Accept"); IsGRPCWebText(accept) {
		r2.Header.Set("Accept", webBinary+accept[len(webText):])
	}
	r2.Body = &base64Body{r: r.Body}
	r2.ContentLength = -1
	r2.Header.Del("Content-Length")
	a.Reset(&textWriter{ResponseWriter: w}, r, problem.GRPCWeb)
	h.ServeHTTP(a, r2)
	a.Finish()
}

// base64Body decodes a base64 body that may be several padded segments,
// one per chunk the client sent: it decodes quantum by quantum (4
// characters), each of which may end a segment.
type base64Body struct {
	r    io.ReadCloser
	in   [4]byte
	n    int    // characters in in
	out  []byte // decoded, not yet read
	buf  [3]byte
	read [512]byte
	src  []byte // read, not yet taken into in
	err  error
}

func (b *base64Body) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if len(b.src) == 0 {
			if b.err != nil {
				if b.n != 0 && b.err == io.EOF {
					b.n, b.err = 0, io.ErrUnexpectedEOF
				}
				return 0, b.err
			}
			var n int
			n, b.err = b.r.Read(b.read[:])
			b.src = b.read[:n]
			continue
		}
		c := b.src[0]
		b.src = b.src[1:]
		if c == '\r' || c == '\n' || c == ' ' || c == '\t' {
			continue
		}
		b.in[b.n] = c
		b.n++
		if b.n < 4 {
			continue
		}
		b.n = 0
		n, err := base64.StdEncoding.Decode(b.buf[:], b.in[:])
		if err != nil {
			b.err = err
			return 0, err
		}
		b.out = b.buf[:n]
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

func (b *base64Body) Close() error { return b.r.Close() }

// textWriter base64-encodes a binary gRPC-Web response: each write on its
// own, padded, as text-mode clients expect of every chunk.
type textWriter struct {
	http.ResponseWriter
	wrote bool
}

func (t *textWriter) WriteHeader(code int) {
	if !t.wrote {
		t.wrote = true
		if ct := t.Header().Get("Content-Type"); len(ct) >= len(webBinary) && strings.EqualFold(ct[:len(webBinary)], webBinary) && !IsGRPCWebText(ct) {
			t.Header().Set("Content-Type", webText+ct[len(webBinary):])
		}
		t.Header().Del("Content-Length")
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *textWriter) Write(p []byte) (int, error) {
	if !t.wrote {
		t.WriteHeader(http.StatusOK)
	}
	enc := make([]byte, base64.StdEncoding.EncodedLen(len(p)))
	base64.StdEncoding.Encode(enc, p)
	if _, err := t.ResponseWriter.Write(enc); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (t *textWriter) Flush() { _ = http.NewResponseController(t.ResponseWriter).Flush() }

func (t *textWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
