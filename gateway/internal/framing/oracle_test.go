package framing_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/portico-gw/portico/gateway/internal/framing"
)

// scriptConn is a net.Conn whose Read returns data in pieces: never more
// than the next size in sizes (cycled), and never past limit.
type scriptConn struct {
	data  []byte
	pos   int
	limit int
	sizes []int
	next  int
}

func (c *scriptConn) Read(b []byte) (int, error) {
	if c.pos >= len(c.data) {
		return 0, io.EOF
	}
	n := min(len(b), c.limit-c.pos)
	if len(c.sizes) > 0 {
		n = min(n, c.sizes[c.next%len(c.sizes)])
		c.next++
	}
	copy(b, c.data[c.pos:c.pos+n])
	c.pos += n
	return n, nil
}

func (c *scriptConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

// streamReader reads a stream through a framing.Conn up to chosen offsets.
type streamReader struct {
	src *scriptConn
	c   *framing.Conn
	buf []byte
}

func newStreamReader(stream []byte, sizes []int) *streamReader {
	src := &scriptConn{data: stream, sizes: sizes}
	return &streamReader{src: src, c: framing.NewConn(src, framing.Options{}), buf: make([]byte, 4096)}
}

// readTo reads through the Conn until off bytes of the stream have been
// read, checking that Read passes them through unchanged.
func (r *streamReader) readTo(t testing.TB, off int) {
	t.Helper()
	r.src.limit = off
	for r.src.pos < off {
		start := r.src.pos
		n, err := r.c.Read(r.buf)
		if err != nil {
			t.Fatalf("Read at offset %d: %v", start, err)
		}
		if !bytes.Equal(r.buf[:n], r.src.data[start:start+n]) {
			t.Fatalf("Read at offset %d changed the bytes", start)
		}
	}
}

// goRequest is one request that net/http's parser accepted.
type goRequest struct {
	headEnd    int  // stream offset where its head ended
	readAtHead int  // bytes net/http had read from the connection then
	readAtBody int  // bytes read after its body was read, or -1
	ambiguous  bool // Content-Length with Transfer-Encoding, or Transfer-Encoding on HTTP/1.0
}

// readLikeServer reads stream the way net/http's HTTP/1 server reads a
// connection whose handler reads every body: http.ReadRequest (the server's
// own readRequest) through a 4 KiB bufio.Reader, the server's CR/LF skip
// after a POST and its checks on the protocol version. The underlying reader
// yields one byte per Read, so the bytes read at any point are the fewest
// net/http needed to get there.
//
// It returns the requests served and stop, the offset from which nothing is
// served: the start of the first rejected head or the body that failed.
// framingStop tells whether net/http stopped for a reason the parser models
// exactly (see framingError), so that it must stop following there too.
func readLikeServer(stream []byte) (reqs []goRequest, stop int, framingStop bool) {
	cr := &countingReader{r: iotest.OneByteReader(bytes.NewReader(stream))}
	br := bufio.NewReader(cr)
	consumed := func() int { return cr.n - br.Buffered() }
	lastMethod := ""
	for {
		if lastMethod == "POST" {
			peek, _ := br.Peek(4)
			n := 0
			for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
				n++
			}
			br.Discard(n)
		}
		start := consumed()
		req, err := http.ReadRequest(br)
		if err != nil {
			return reqs, start, framingError(err)
		}
		if req.ProtoMajor != 1 && (req.ProtoMajor != 2 || req.ProtoMinor != 0 || req.Method != "PRI" || req.RequestURI != "*") {
			return reqs, start, true // 505
		}
		lastMethod = req.Method
		r := goRequest{headEnd: consumed(), readAtHead: cr.n, readAtBody: -1}
		r.ambiguous = ambiguousHead(stream[start:r.headEnd], req)
		reqs = append(reqs, r)
		if req.Method == "PRI" && len(req.Header) == 0 && req.Host == "" {
			return reqs, r.headEnd, false // h2c preface: HTTP/2 or close
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return reqs, r.headEnd, framingError(err)
		}
		reqs[len(reqs)-1].readAtBody = cr.n
	}
}

// ambiguousHead reports whether a head that net/http accepted had both
// Content-Length and Transfer-Encoding, or Transfer-Encoding on HTTP/1.0.
// net/http deletes both fields, so the head's lines are read here, simply:
// an accepted head is well formed.
func ambiguousHead(head []byte, req *http.Request) bool {
	lines := bytes.Split(head, []byte("\n"))
	var cl, te bool
	for _, line := range lines[1:] {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue // obs-fold
		}
		name, _, _ := bytes.Cut(line, []byte(":"))
		cl = cl || bytes.EqualFold(name, []byte("Content-Length"))
		te = te || bytes.EqualFold(name, []byte("Transfer-Encoding"))
	}
	return te && (cl || req.ProtoMajor == 1 && req.ProtoMinor == 0)
}

// framingError reports whether net/http rejected a head or a body for a
// reason that the parser models exactly: the shape of the request line and
// of field lines, the version, Content-Length and Transfer-Encoding, chunked
// syntax and the trailer lookahead; or the end of the stream. Other reasons
// (a bad URL, bytes net/http does not allow in a field) the parser does not
// check, and carries on past them.
func framingError(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	// Prefixes of net/http's messages; what follows quotes the input.
	msg := err.Error()
	for _, prefix := range []string{
		"malformed HTTP request",
		`invalid method ""`,
		"malformed HTTP version",
		"malformed MIME header initial line",
		"malformed MIME header: missing colon",
		`malformed MIME header line: ":`,
		"too many transfer encodings",
		"unsupported transfer encoding",
		"http: message cannot contain multiple Content-Length headers",
		"bad Content-Length",
		"invalid empty Content-Length",
		"chunked line ends with bare LF",
		"invalid CR in chunked line",
		"header line too long",
		"empty hex number for chunk length",
		"invalid byte in chunk length",
		"http chunk length too large",
		"chunked encoding contains too much non-data",
		"malformed chunked encoding",
		"http: suspiciously long trailer after chunked body",
	} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += n
	return n, err
}

// checkAgainstGo reads stream through a framing.Conn in pieces of the given
// sizes and checks it against net/http at every request: once the Conn has
// read what net/http had read when it returned a head or finished a body,
// Flagged must report the first ambiguous head net/http accepted among the
// heads read, and nothing if there is none. Past the point where net/http
// stops serving, a missing flag is an error, and so is a new one when
// net/http stopped on framing; when it stopped for another reason, the
// parser may be more lenient and follow, and flag, heads net/http rejects.
func checkAgainstGo(t testing.TB, stream []byte, sizes []int) {
	t.Helper()
	reqs, stop, framingStop := readLikeServer(stream)
	sr := newStreamReader(stream, sizes)
	check := func(read int, what string) {
		t.Helper()
		sr.readTo(t, read)
		want := 0 // 1-based index of the first ambiguous head within read
		for i, r := range reqs {
			if r.headEnd <= read && r.ambiguous {
				want = i + 1
				break
			}
		}
		got := sr.c.Flagged()
		var fe *framing.Error
		switch {
		case want == 0 && got != nil && read <= stop:
			t.Fatalf("%s: after %d of %d bytes (net/http served up to %d): Flagged() = %v, want nil", what, read, len(stream), stop, got)
		case want != 0 && got == nil:
			t.Fatalf("%s: after %d of %d bytes: Flagged() = nil, want request %d flagged", what, read, len(stream), want)
		case want != 0 && !errors.As(got, &fe):
			t.Fatalf("%s: Flagged() = %T, want *framing.Error", what, got)
		case want != 0 && fe.Request != want && read <= stop:
			t.Fatalf("%s: after %d bytes: Flagged() = %v, want request %d", what, read, got, want)
		}
	}
	for i, r := range reqs {
		check(r.readAtHead, "head "+strconv.Itoa(i+1))
		if r.readAtBody >= 0 {
			check(r.readAtBody, "body "+strconv.Itoa(i+1))
		}
	}
	if stop == len(stream) || framingStop {
		stop = len(stream) // nothing after it may raise a flag
		check(len(stream), "end of stream")
	}
	sr.readTo(t, len(stream))
}
