package framing_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/internal/framing"
)

// handle is the handler the gateway is meant to have: 400 and close when
// the connection is flagged.
func handle(w http.ResponseWriter, r *http.Request) {
	c, ok := framing.FromContext(r.Context())
	if !ok {
		http.Error(w, "no framing.Conn in the context", http.StatusInternalServerError)
		return
	}
	if c.Flagged() != nil {
		w.Header().Set("Connection", "close")
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "%s %s body=%d proto=%d tls=%t", r.Method, r.URL.Path, n, r.ProtoMajor, r.TLS != nil)
}

// serve runs an http.Server with the gateway's wiring on l until the test
// ends: the server's MaxHeaderBytes is the guard's.
func serve(t *testing.T, l net.Listener, protocols *http.Protocols, opts framing.Options) {
	t.Helper()
	srv := &http.Server{
		Handler:           http.HandlerFunc(handle),
		ConnContext:       framing.ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    opts.MaxHeaderBytes,
		Protocols:         protocols,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(framing.NewListener(l, opts))
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type exchange struct {
	send   string
	status []int // statuses of the responses that follow
}

// headLike is body text that looks like the fields that matter.
const headLike = "\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"

var (
	ambiguous = "POST /bad HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	chunked   = "POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n" +
		fmt.Sprintf("%x;ext=1\r\n%s\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n", len(headLike), headLike)
	sized = fmt.Sprintf("PUT /sized HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(headLike), headLike)
	get   = "GET /get HTTP/1.1\r\nHost: x\r\n\r\n"
)

func TestServer(t *testing.T) {
	t.Parallel()
	l := listen(t)
	serve(t, l, nil, framing.Options{})
	addr := l.Addr().String()

	tests := []struct {
		name      string
		exchanges []exchange
		closed    bool // the server closes the connection after the last response
		// wholeOnly skips writing byte by byte: net/http may answer
		// and close before the last bytes are written.
		wholeOnly bool
	}{
		{name: "content-length and chunked", exchanges: []exchange{{ambiguous, []int{400}}}, closed: true},
		{
			name: "transfer-encoding on HTTP/1.0",
			exchanges: []exchange{{
				"POST /old HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
				[]int{400},
			}},
			closed: true,
		},
		{
			name:      "obs-fold transfer-encoding",
			exchanges: []exchange{{"POST /fold HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", []int{400}}},
			closed:    true,
		},
		{name: "chunked", exchanges: []exchange{{chunked, []int{200}}}},
		{name: "content-length", exchanges: []exchange{{sized, []int{200}}}},
		{name: "pipelined", exchanges: []exchange{{chunked + sized + get, []int{200, 200, 200}}}},
		{
			name:      "ambiguous after keep-alive",
			exchanges: []exchange{{sized, []int{200}}, {get, []int{200}}, {ambiguous, []int{400}}},
			closed:    true,
		},
		{
			name: "POST then CRLF",
			exchanges: []exchange{{
				"POST /crlf HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab\r\n" + get,
				[]int{200, 200},
			}},
		},
		// What net/http rejects by itself, for the record.
		{
			name:      "unsupported transfer-encoding",
			exchanges: []exchange{{"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", []int{501}}},
			closed:    true,
			wholeOnly: true,
		},
		{
			name:      "chunked then obs-fold",
			exchanges: []exchange{{"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n \r\n\r\n0\r\n\r\n", []int{501}}},
			closed:    true,
			wholeOnly: true,
		},
		{
			name:      "differing content-lengths",
			exchanges: []exchange{{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", []int{400}}},
			closed:    true,
			wholeOnly: true,
		},
		{
			name:      "space before colon",
			exchanges: []exchange{{"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\nContent-Length: 1\r\n\r\na", []int{400}}},
			closed:    true,
			wholeOnly: true,
		},
		{
			name:      "HTTP/0.9",
			exchanges: []exchange{{"GET / HTTP/0.9\r\n\r\n", []int{505}}},
			closed:    true,
			wholeOnly: true,
		},
	}
	for _, tc := range tests {
		for _, byByte := range []bool{false, true} {
			if byByte && tc.wholeOnly {
				continue
			}
			name := tc.name
			if byByte {
				name += "/byte by byte"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(conn)
				for _, ex := range tc.exchanges {
					write(t, conn, ex.send, byByte)
					for _, want := range ex.status {
						if got := readStatus(t, br); got != want {
							t.Fatalf("status = %d, want %d", got, want)
						}
					}
				}
				if tc.closed {
					if _, err := br.ReadByte(); err != io.EOF {
						t.Fatalf("read after the last response: %v, want EOF", err)
					}
					return
				}
				write(t, conn, get, byByte)
				if got := readStatus(t, br); got != 200 {
					t.Fatalf("status on the kept connection = %d, want 200", got)
				}
			})
		}
	}
}

// TestServerHeadLimit checks that net/http, behind a Conn, refuses a head
// one byte over the limit with its 431 and closes, and serves one at the
// limit, however the bytes arrive. Without the Conn it serves heads up to
// 4 KiB longer.
func TestServerHeadLimit(t *testing.T) {
	t.Parallel()
	const limit = 2000
	l := listen(t)
	serve(t, l, nil, framing.Options{MaxHeaderBytes: limit})
	head := func(size int) string {
		const start = "GET /h HTTP/1.1\r\nHost: x\r\nX-Pad: "
		return start + strings.Repeat("p", size-len(start)-4) + "\r\n\r\n"
	}
	for _, tc := range []struct {
		name   string
		send   string
		status []int
	}{
		{"at the limit", head(limit) + get, []int{200, 200}},
		{"one byte over", head(limit + 1), []int{431}},
		{"far over", head(3 * limit), []int{431}},
		{"over, behind a body", sized + head(limit+1) + get, []int{200, 431}},
		{"at the limit, behind a body", sized + head(limit) + get, []int{200, 200, 200}},
	} {
		for _, byByte := range []bool{false, true} {
			name := tc.name
			if byByte {
				name += "/byte by byte"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				conn, err := net.Dial("tcp", l.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(conn)
				// Writes may fail once the server has answered 431 and
				// closed; the answer is what counts.
				wrote := make(chan struct{})
				go func() {
					defer close(wrote)
					_ = writeAll(conn, tc.send, byByte)
				}()
				t.Cleanup(func() {
					conn.Close()
					<-wrote
				})
				for i, want := range tc.status {
					if got := readStatus(t, br); got != want {
						t.Fatalf("response %d: status = %d, want %d", i+1, got, want)
					}
				}
				if last := tc.status[len(tc.status)-1]; last == 431 {
					if _, err := br.ReadByte(); err != io.EOF {
						t.Fatalf("read after 431: %v, want EOF", err)
					}
				}
			})
		}
	}
}

func writeAll(conn net.Conn, s string, byByte bool) error {
	if !byByte {
		_, err := io.WriteString(conn, s)
		return err
	}
	for i := range len(s) {
		if _, err := io.WriteString(conn, s[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

func write(t *testing.T, conn net.Conn, s string, byByte bool) {
	t.Helper()
	if !byByte {
		if _, err := io.WriteString(conn, s); err != nil {
			t.Fatal(err)
		}
		return
	}
	for i := range len(s) {
		if _, err := io.WriteString(conn, s[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
}

func readStatus(t *testing.T, br *bufio.Reader) int {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("ReadResponse: %v", err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("reading response body: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServerH2C checks that h2c with prior knowledge passes through: the
// wrapper stops following at the preface and HTTP/2 serves the requests.
func TestServerH2C(t *testing.T) {
	t.Parallel()
	var serverProtocols, clientProtocols http.Protocols
	serverProtocols.SetHTTP1(true)
	serverProtocols.SetUnencryptedHTTP2(true)
	clientProtocols.SetUnencryptedHTTP2(true)
	l := listen(t)
	serve(t, l, &serverProtocols, framing.Options{H2C: true})

	transport := &http.Transport{Protocols: &clientProtocols}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	for _, body := range []string{"Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", strings.Repeat("x", 70000)} {
		resp, err := client.Post("http://"+l.Addr().String()+"/h2c", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("POST /h2c body=%d proto=2 tls=false", len(body))
		if resp.StatusCode != 200 || resp.ProtoMajor != 2 || string(got) != want {
			t.Fatalf("POST over h2c = %d %s %q, want 200 HTTP/2.0 %q", resp.StatusCode, resp.Proto, got, want)
		}
	}
}

// TestServerShortRequestLine checks that a server that also takes h2c
// answers a request line too short to be valid at once (it would wait for
// 14 bytes, until its read-header timeout), and still serves the shortest
// valid requests however their bytes arrive.
func TestServerShortRequestLine(t *testing.T) {
	t.Parallel()
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	l := listen(t)
	// The read-header timeout (10 s) is what each connection's deadline
	// (10 s) would otherwise run into.
	serve(t, l, &protocols, framing.Options{H2C: true})
	for _, tc := range []struct {
		send   string
		status int
	}{
		{"GET /ok\r\n\r\n", 400},
		{"GET\r\n", 400},
		{"\n", 400},
		{"GET / HTTP/1\n", 400},
		{"A / HTTP/1.0\n\n", 200},
		{"GET / HTTP/1.0\r\n\r\n", 200},
	} {
		for _, byByte := range []bool{false, true} {
			t.Run(fmt.Sprintf("%q/byByte=%t", tc.send, byByte), func(t *testing.T) {
				t.Parallel()
				conn, err := net.Dial("tcp", l.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(5 * time.Second))
				write(t, conn, tc.send, byByte)
				br := bufio.NewReader(conn)
				if got := readStatus(t, br); got != tc.status {
					t.Fatalf("status = %d, want %d", got, tc.status)
				}
				if _, err := br.ReadByte(); err != io.EOF {
					t.Fatalf("read after the response: %v, want EOF", err)
				}
			})
		}
	}
}

// handshakeListener yields server-side TLS connections after their
// handshake, as the gateway hands HTTP/1.1-over-TLS to net/http.
type handshakeListener struct {
	net.Listener
	config *tls.Config
}

func (l handshakeListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := tls.Server(c, l.config)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = tc.HandshakeContext(ctx)
		cancel()
		if err == nil {
			return tc, nil
		}
		c.Close()
	}
}

// TestServerTLS checks that a wrapped, handshaken *tls.Conn is served with
// Request.TLS set and still checked, and that a plaintext one has no TLS.
func TestServerTLS(t *testing.T) {
	t.Parallel()
	cert := selfSigned(t)
	l := listen(t)
	serve(t, handshakeListener{l, &tls.Config{Certificates: []tls.Certificate{cert}}}, nil, framing.Options{})
	plain := listen(t)
	serve(t, plain, nil, framing.Options{})

	dialTLS := func() (net.Conn, error) {
		return tls.Dial("tcp", l.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	}
	dialPlain := func() (net.Conn, error) { return net.Dial("tcp", plain.Addr().String()) }
	for _, tc := range []struct {
		name string
		dial func() (net.Conn, error)
		tls  bool
	}{{"tls", dialTLS, true}, {"plaintext", dialPlain, false}} {
		conn, err := tc.dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(conn)
		write(t, conn, get, false)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("GET /get body=0 proto=1 tls=%t", tc.tls)
		if resp.StatusCode != 200 || string(body) != want {
			t.Errorf("%s: GET = %d %q, want 200 %q", tc.name, resp.StatusCode, body, want)
		}
		write(t, conn, ambiguous, false)
		if got := readStatus(t, br); got != 400 {
			t.Errorf("%s: ambiguous request status = %d, want 400", tc.name, got)
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("%s: read after 400: %v, want EOF", tc.name, err)
		}
	}
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
