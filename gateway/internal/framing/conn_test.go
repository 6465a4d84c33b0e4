package framing_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/internal/framing"
)

const (
	clte = framing.ContentLengthWithTransferEncoding
	te10 = framing.TransferEncodingHTTP10
)

// flaggedCases are streams with what Flagged must report after the whole
// stream was read: the reason and the 1-based request, or no reason. Every
// case is also checked against net/http by checkAgainstGo.
var flaggedCases = []struct {
	name    string
	stream  string
	reason  framing.Reason
	request int
}{
	{
		name:   "content-length and chunked",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 1,
	},
	{
		name:   "chunked then content-length",
		stream: "POST / HTTP/1.1\r\nHost: x\r\ntransfer-encoding: Chunked\r\ncontent-length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		reason: clte, request: 1,
	},
	{
		name:   "chunked",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=\"v\"\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
	},
	{
		name: "chunked, then ambiguous",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=\"v\"\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name:   "content-length",
		stream: "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
	},
	{
		name:   "content-length, then ambiguous",
		stream: "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name:   "transfer-encoding on HTTP/1.0",
		stream: "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
		reason: te10, request: 1,
	},
	{
		name:   "both on HTTP/1.0",
		stream: "POST / HTTP/1.0\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\nab",
		reason: clte, request: 1,
	},
	{
		name: "pipelined with field lines in bodies",
		stream: "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"1c\r\n\r\nContent-Length: 5\r\n\r\nabcde\r\n0\r\nTrailer-A: 1\r\nTrailer-B: 2\r\n\r\n" +
			"PUT /b HTTP/1.1\r\nHost: x\r\nContent-Length: 51\r\n\r\n" +
			"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"GET /c HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 3,
	},
	{
		name: "pipelined, fourth ambiguous",
		stream: "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n" +
			"POST /2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
			"PUT /3 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nxyz" +
			"GET /4 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 4,
	},
	{
		name:   "obs-fold carries chunked",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
		reason: clte, request: 1,
	},
	{
		name:   "folded line is not a field",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nX-A: b\r\n Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc" + "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name:   "space before colon is another field",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\nContent-Length: 3\r\n\r\nabc" + "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name:   "longer names",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encodings: chunked\r\nContent-Lengthy: 1\r\nContent-Length: 3\r\n\r\nabc" + "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name:   "bare LF",
		stream: "POST / HTTP/1.1\nHost: x\nContent-Length: 1\nTransfer-Encoding: chunked\n\n0\r\n\r\n",
		reason: clte, request: 1,
	},
	{
		name: "CRLF after POST is skipped",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nA\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name: "five CRLF bytes after POST",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nA\r\n\r\n\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	},
	{
		name: "CRLF after GET",
		stream: "GET / HTTP/1.1\r\nHost: x\r\n\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	},
	{
		name: "h2c preface",
		stream: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	},
	{
		name:   "PRI with fields is served",
		stream: "PRI * HTTP/2.0\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 1,
	},
	{
		name: "PRI with fields keeps the connection",
		stream: "PRI * HTTP/2.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name: "bare-LF trailer, CRLF CRLF in the next head",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: y\n\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name: "bare-LF trailer, CRLF CRLF after the next head",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\n" +
			"GET / HTTP/1.1\nHost: x\nContent-Length: 1\nTransfer-Encoding: chunked\n\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		// Found by FuzzGrammar: the lookahead runs on after the parser
		// stops following a malformed head.
		name: "bare-LF trailer, CRLF CRLF in a malformed head",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\n" +
			"GET / HTTP/1.0\nContent-Length: 1\nTransfer-Encoding: chunked\n\nA" +
			"BAD\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name: "bare-LF trailer without CRLF CRLF",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: y\n\n" +
			"GET / HTTP/1.1\nHost: x\nContent-Length: 1\nTransfer-Encoding: chunked\n\n0\r\n" +
			strings.Repeat("X: y\n", 1000) + "\n",
	},
	{
		name: "trailer section too long",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + strings.Repeat("X: y\r\n", 700) + "\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	},
	{
		name: "chunk line with bare LF",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\nA\r\n0\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	},
	{
		name: "chunk size with trailing whitespace and extensions",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1 \t\r\nA\r\n01;a=b;c \r\nB\r\n000\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name: "chunk size with whitespace before extension",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1 ;a\r\nA\r\n0\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	},
	{
		name: "chunk size of seventeen digits",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000001\r\nA\r\n0\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	},
	{
		name: "too much chunk overhead",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strings.Repeat("1;"+strings.Repeat("x", 100)+"\r\nA\r\n", 200) + "0\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	},
	{
		name: "differing content-lengths",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 01\r\n\r\nA" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	},
	{
		name: "repeated content-length",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length:  1 \r\n\r\nA" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name: "folded content-length",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n \t3\r\n\r\nABC" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name: "chunked then fold is not chunked",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n \r\n\r\n0\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	},
	{
		name: "two transfer-encodings",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	},
	{
		name: "large content-length body",
		stream: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\n\r\n" + strings.Repeat("Transfer-Encoding: chunked\r\n", 300000/28) + strings.Repeat("z", 300000%28) +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
	{
		name: "HTTP/0.9",
		stream: "GET / HTTP/0.9\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	},
	{
		name: "HTTP/1.9 is at least 1.1",
		stream: "POST / HTTP/1.9\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
			"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		reason: clte, request: 2,
	},
}

func TestFlagged(t *testing.T) {
	t.Parallel()
	for _, tc := range flaggedCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.stream))))
			splits := map[string][]int{
				"whole":        nil,
				"byte by byte": {1},
				"random":       {rng.IntN(7) + 1, rng.IntN(50) + 1, rng.IntN(3) + 1, rng.IntN(500) + 1},
			}
			for split, sizes := range splits {
				sr := newStreamReader([]byte(tc.stream), sizes)
				sr.readTo(t, len(tc.stream))
				got := sr.c.Flagged()
				var fe *framing.Error
				switch {
				case tc.reason == 0 && got != nil:
					t.Errorf("%s: Flagged() = %v, want nil", split, got)
				case tc.reason != 0 && !errors.As(got, &fe):
					t.Errorf("%s: Flagged() = %v, want *framing.Error", split, got)
				case tc.reason != 0 && (fe.Reason != tc.reason || fe.Request != tc.request):
					t.Errorf("%s: Flagged() = %v, want request %d with %v", split, got, tc.request, tc.reason)
				}
				checkAgainstGo(t, []byte(tc.stream), sizes)
			}
		})
	}
}

func TestFlaggedStays(t *testing.T) {
	t.Parallel()
	stream := "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n\x00garbage"
	sr := newStreamReader([]byte(stream), []int{1})
	sr.readTo(t, len(stream))
	var fe *framing.Error
	if err := sr.c.Flagged(); !errors.As(err, &fe) || fe.Reason != te10 || fe.Request != 1 {
		t.Fatalf("Flagged() = %v, want the first finding", err)
	}
	if got, want := fe.Error(), "framing: request 1 has Transfer-Encoding in an HTTP/1.0 request"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server, client := net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })

	if _, ok := framing.FromContext(framing.ConnContext(ctx, server)); ok {
		t.Errorf("FromContext(ConnContext(ctx, %T)) found a Conn", server)
	}
	c := framing.NewConn(server, framing.Options{})
	got, ok := framing.FromContext(framing.ConnContext(ctx, c))
	if !ok || got != c {
		t.Errorf("FromContext(ConnContext(ctx, c)) = %p, %v, want %p, true", got, ok, c)
	}
	if c.Unwrap() != server {
		t.Errorf("Unwrap() = %v, want the wrapped conn", c.Unwrap())
	}
	if _, ok := c.TLSConnectionState(); ok {
		t.Errorf("TLSConnectionState() ok for a pipe")
	}
	if err := c.CloseWrite(); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("CloseWrite() on a pipe = %v, want ErrUnsupported", err)
	}
}

// TestHeadLimit checks where a Conn cuts a stream whose request head goes
// past Options.MaxHeaderBytes: the bytes up to the limit pass unchanged,
// filler follows and the connection is never read again; a head at the
// limit passes whole. The head is the second request, behind a body, and
// is read in pieces of several sizes.
func TestHeadLimit(t *testing.T) {
	t.Parallel()
	const limit = 300
	first := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
	for _, eol := range []string{"\r\n", "\n"} {
		for size := limit - 2; size <= limit+2; size++ {
			start := "GET /b HTTP/1.1" + eol + "Host: x" + eol + "X-Pad: "
			head := start + strings.Repeat("p", size-len(start)-2*len(eol)) + eol + eol
			stream := first + head + "GET /c HTTP/1.1\r\nHost: x\r\n\r\n"
			want := stream
			if size > limit {
				cut := len(first) + limit
				want = stream[:cut] + strings.Repeat("x", len(stream)-cut)
			}
			for _, sizes := range [][]int{nil, {1}, {7, 50, 3, 500}} {
				src := &scriptConn{data: []byte(stream), limit: len(stream), sizes: sizes}
				c := framing.NewConn(src, framing.Options{MaxHeaderBytes: limit})
				got := make([]byte, 0, len(stream))
				buf := make([]byte, 64)
				for len(got) < len(stream) {
					n, err := c.Read(buf[:min(len(buf), len(stream)-len(got))])
					if err != nil {
						t.Fatalf("head of %d bytes, reads %v: Read: %v", size, sizes, err)
					}
					got = append(got, buf[:n]...)
				}
				if string(got) != want {
					t.Errorf("head of %d bytes (limit %d, eol %q), reads %v:\n got %q\nwant %q", size, limit, eol, sizes, got, want)
				}
				if size > limit && src.pos == len(stream) && len(sizes) == 1 {
					t.Errorf("head of %d bytes, byte by byte: the connection was read to its end after the cut", size)
				}
			}
		}
	}
}
