package gateway_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/telemetry"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// echoed is what the demo inventory's /headers endpoint reports.
type echoed struct {
	Method   string              `json:"method"`
	URI      string              `json:"uri"`
	Path     string              `json:"path"`
	RawQuery string              `json:"raw_query"`
	Host     string              `json:"host"`
	Proto    string              `json:"proto"`
	Header   map[string][]string `json:"headers"`
}

func getEcho(t *testing.T, client *http.Client, req *http.Request) (echoed, *http.Response) {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s = %d %s", req.Method, req.URL, resp.StatusCode, b)
	}
	var e echoed
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	return e, resp
}

func TestForwardedHeaders(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), nil)

	for _, tc := range []struct {
		name   string
		client *http.Client
		base   string
		proto  string
	}{
		{"http1", gatewaytest.HTTP1Client(t), g.URL(), "http"},
		{"h2c", gatewaytest.H2CClient(t), g.URL(), "http"},
		{"h2-tls", g.TLSClient(t, false), g.TLSURL(), "https"},
		{"http1-tls", g.TLSClient(t, true), g.TLSURL(), "https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", tc.base+"/inventory/v1/headers?a=1", nil)
			req.Host = "api.example.com"
			req.Header.Set("X-Auth-Subject", "admin")
			req.Header.Set("x-auth-tenant", "other-tenant")
			req.Header["x-AUTH-scopes"] = []string{"everything"} // not canonical on purpose
			req.Header.Set("X-Forwarded-For", "6.6.6.6")
			req.Header.Set("Forwarded", "for=6.6.6.6")
			req.Header.Set("X-Forwarded-Proto", "gopher")
			req.Header.Set("X-Custom", "kept")
			req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			req.Header.Set("Tracestate", "vendor=x")
			req.Header.Set("X-Request-Id", "client-id-123")
			if tc.name == "http1" || tc.name == "http1-tls" {
				req.Header.Set("Connection", "keep-alive, X-Hop")
				req.Header.Set("X-Hop", "dropped")
				req.Header.Set("Keep-Alive", "timeout=5")
				req.Header.Set("Proxy-Authorization", "Basic Zm9vOmJhcg==")
			}
			e, resp := getEcho(t, tc.client, req)

			for k := range e.Header {
				if strings.HasPrefix(strings.ToLower(k), "x-auth-") {
					t.Errorf("backend received client-sent %s", k)
				}
			}
			for _, hop := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization", "Connection"} {
				if v, ok := e.Header[hop]; ok {
					t.Errorf("backend received hop-by-hop %s: %q", hop, v)
				}
			}
			want := map[string]string{
				"X-Forwarded-For":   "127.0.0.1",
				"X-Forwarded-Proto": tc.proto,
				"X-Forwarded-Host":  "api.example.com",
				"Forwarded":         "for=127.0.0.1;host=api.example.com;proto=" + tc.proto,
				"X-Custom":          "kept",
				"Tracestate":        "vendor=x",
				"X-Request-Id":      "client-id-123",
			}
			for k, v := range want {
				if got := strings.Join(e.Header[k], ","); got != v {
					t.Errorf("backend %s = %q, want %q", k, got, v)
				}
			}
			if e.Host != "api.example.com" {
				t.Errorf("backend Host = %q, want the client's api.example.com", e.Host)
			}
			if e.RawQuery != "a=1" {
				t.Errorf("backend query = %q, want a=1", e.RawQuery)
			}
			tp, ok := telemetry.ParseTraceparent(strings.Join(e.Header["Traceparent"], ""))
			if !ok || tp.TraceIDString() != "4bf92f3577b34da6a3ce929d0e0e4736" || tp.Flags != 1 {
				t.Errorf("backend traceparent = %q: want the client's trace, flags 01", e.Header["Traceparent"])
			}
			if strings.Contains(strings.Join(e.Header["Traceparent"], ""), "00f067aa0ba902b7") {
				t.Errorf("backend traceparent %q keeps the client's span id; the gateway is a hop with its own", e.Header["Traceparent"])
			}
			if got := resp.Header.Get("X-Request-Id"); got != "client-id-123" {
				t.Errorf("response X-Request-Id = %q, want client-id-123", got)
			}
		})
	}
}

func TestRequestIDAndTraceStarted(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), nil)
	client := gatewaytest.HTTP1Client(t)

	req, _ := http.NewRequest("GET", g.URL()+"/inventory/v1/headers", nil)
	req.Header.Set("X-Request-Id", "bad id with spaces")
	req.Header.Set("Traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01") // all-zero trace id: invalid
	e, resp := getEcho(t, client, req)
	rid := resp.Header.Get("X-Request-Id")
	if len(rid) != 32 || !telemetry.ValidRequestID(rid) {
		t.Errorf("response X-Request-Id = %q, want a fresh 32-hex id", rid)
	}
	if got := strings.Join(e.Header["X-Request-Id"], ","); got != rid {
		t.Errorf("backend X-Request-Id = %q, want the one returned to the client %q", got, rid)
	}
	if _, ok := telemetry.ParseTraceparent(strings.Join(e.Header["Traceparent"], "")); !ok {
		t.Errorf("backend traceparent = %q, want a new valid trace", e.Header["Traceparent"])
	}
	if strings.Contains(strings.Join(e.Header["Traceparent"], ""), "00f067aa0ba902b7") {
		t.Errorf("an invalid traceparent was propagated")
	}
}

func TestTrustedProxyExtendsForwardedFor(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), func(o *gateway.Options) {
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	req, _ := http.NewRequest("GET", g.URL()+"/inventory/v1/headers", nil)
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header.Set("Forwarded", "for=203.0.113.7")
	e, _ := getEcho(t, gatewaytest.HTTP1Client(t), req)
	if got := strings.Join(e.Header["X-Forwarded-For"], ","); got != "203.0.113.7, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the trusted proxy's list extended", got)
	}
	if got := strings.Join(e.Header["Forwarded"], ","); !strings.HasPrefix(got, "for=203.0.113.7, for=127.0.0.1") {
		t.Errorf("Forwarded = %q, want the trusted proxy's list extended", got)
	}
}

// rawRequest writes raw bytes to the gateway and reads one response.
func rawRequest(t *testing.T, addr, raw string) (*http.Response, string, *bufio.Reader, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading response to %q: %v", raw, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body), br, c
}

// connClosed reports whether the server closed c (EOF) after its response.
func connClosed(br *bufio.Reader) bool {
	_, err := br.ReadByte()
	return err == io.EOF
}

func TestPathNormalisation(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), nil)

	for _, tc := range []struct {
		target   string
		status   int
		wantPath string
	}{
		{"/inventory/v1/headers", 200, "/inventory/v1/headers"},
		{"/inventory/v1/x/../headers", 200, "/inventory/v1/headers"},
		{"/inventory/v1/x/%2e%2e/headers", 200, "/inventory/v1/headers"},
		{"/inventory/v1/x/%2E%2e/headers?q=%2e%2e", 200, "/inventory/v1/headers"},
		{"//inventory//v1///headers", 200, "/inventory/v1/headers"},
		{"/inventory/v1/./headers", 200, "/inventory/v1/headers"},
		{"/%69nventory/v1/headers", 200, "/inventory/v1/headers"},
		{"/public/../inventory/v1/headers", 200, "/inventory/v1/headers"},
		{"http://127.0.0.1/inventory/v1/headers", 200, "/inventory/v1/headers"},
		{"/inventory/v1/a%2Fb", 400, ""},
		{"/inventory/v1/a%5cb", 400, ""},
		{"/../inventory/v1/headers", 400, ""},
		{"/inventory/../../etc/passwd", 400, ""},
		{"*", 400, ""},
	} {
		resp, body, _, _ := rawRequest(t, g.Addr, "GET "+tc.target+" HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
		if resp.StatusCode != tc.status {
			t.Errorf("GET %s = %d %s, want %d", tc.target, resp.StatusCode, body, tc.status)
			continue
		}
		if tc.status != 200 {
			if !strings.Contains(body, `"error":"bad_request"`) {
				t.Errorf("GET %s body = %s, want a bad_request problem", tc.target, body)
			}
			continue
		}
		var e echoed
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			t.Fatal(err)
		}
		if e.Path != tc.wantPath {
			t.Errorf("GET %s: backend path = %q, want %q", tc.target, e.Path, tc.wantPath)
		}
	}
}

func TestMalformedFraming(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), nil)
	const (
		head   = "POST /inventory/v1/upload HTTP/1.1\r\nHost: x\r\n"
		head10 = "POST /inventory/v1/upload HTTP/1.0\r\nHost: x\r\n"
	)
	for _, tc := range []struct {
		name, raw string
	}{
		{"cl+te", head + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n"},
		{"te+cl", head + "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n4\r\nabcd\r\n0\r\n\r\n"},
		{"duplicate content-length", head + "Content-Length: 4\r\nContent-Length: 5\r\n\r\nabcde"},
		{"bad chunk size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\nabcd\r\n0\r\n\r\n"},
		{"invalid header byte", head + "X-Bad: a\x01b\r\nContent-Length: 0\r\n\r\n"},
		{"space before colon", head + "Content-Length : 0\r\n\r\n"},
		{"unsupported transfer-encoding", head + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"},
		// HTTP/1.0 ignores Transfer-Encoding: net/http drops the field and
		// frames the body by Content-Length (here none), so a handler never
		// sees it, and the keep-alive connection would serve what follows.
		{"te on HTTP/1.0", head10 + "Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"cl+te on HTTP/1.0", head10 + "Connection: keep-alive\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\nabcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A second request follows on the same connection: it must never
			// be served, the connection must close after the 400.
			resp, body, br, _ := rawRequest(t, g.Addr, tc.raw+"GET /inventory/v1/items HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusNotImplemented {
				t.Fatalf("status = %d %s, want 400", resp.StatusCode, body)
			}
			if !connClosed(br) {
				t.Errorf("connection still open after a framing error")
			}
		})
	}
}

func TestHeaderLimit(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	const limit = 8 << 10
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), func(o *gateway.Options) { o.MaxHeaderBytes = limit })
	big := strings.Repeat("a", 64<<10)

	resp, _, _, _ := rawRequest(t, g.Addr, "GET /inventory/v1/items HTTP/1.1\r\nHost: x\r\nX-Big: "+big+"\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("HTTP/1.1 with 64 KiB header = %d, want 431", resp.StatusCode)
	}

	// The limit is exact: a head (request line, fields and the empty line)
	// of limit bytes is served, one byte more is 431 and the connection
	// closes, even pipelined behind a request that is served. (net/http
	// alone allows 4 KiB more, and how much depends on how the bytes
	// arrive.)
	get := "GET /inventory/v1/items HTTP/1.1\r\nHost: x\r\n\r\n"
	// head is a request head of size bytes with line endings eol.
	head := func(size int, eol string) string {
		start := "GET /inventory/v1/items HTTP/1.1" + eol + "Host: x" + eol + "X-Pad: "
		return start + strings.Repeat("p", size-len(start)-2*len(eol)) + eol + eol
	}
	longLine := "GET /inventory/v1/items?q=" + strings.Repeat("q", limit) + " HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		name   string
		raw    string
		status []int
	}{
		{"at the limit", head(limit, "\r\n"), []int{200}},
		{"one byte over", head(limit+1, "\r\n"), []int{431}},
		{"bare LF, at the limit", head(limit, "\n"), []int{200}},
		{"bare LF, one byte over", head(limit+1, "\n"), []int{431}},
		{"a field over", head(limit+100, "\r\n"), []int{431}},
		{"request line over", longLine, []int{431}},
		{"pipelined, at the limit", get + head(limit, "\r\n") + get, []int{200, 200, 200}},
		{"pipelined, one byte over", get + head(limit+1, "\r\n") + get, []int{200, 431}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", g.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, tc.raw); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			for i, want := range tc.status {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("response %d: %v", i+1, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Fatalf("response %d = %d %q, want %d", i+1, resp.StatusCode, body, want)
				}
				if want == 431 {
					// net/http's own answer, as for any head it refuses.
					if string(body) != "431 Request Header Fields Too Large" {
						t.Errorf("431 body = %q, want net/http's", body)
					}
					if !connClosed(br) {
						t.Errorf("connection still open after 431")
					}
				}
			}
		})
	}

	// The same over TLS, where the listener hands HTTP/1.1 connections to
	// the guard after the handshake.
	tc, err := tls.Dial("tcp", g.TLSAddr, &tls.Config{RootCAs: g.CA, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(tc, get+head(limit+1, "\r\n")); err != nil {
		t.Fatal(err)
	}
	tbr := bufio.NewReader(tc)
	for i, want := range []int{200, 431} {
		resp, err := http.ReadResponse(tbr, nil)
		if err != nil {
			t.Fatalf("TLS response %d: %v", i+1, err)
		}
		gatewaytest.Drain(resp)
		if resp.StatusCode != want {
			t.Fatalf("TLS response %d = %d, want %d", i+1, resp.StatusCode, want)
		}
	}

	// HTTP/2: a header list over the limit is a 431 too. (A single header
	// field longer than the whole limit is an HPACK error that ends the
	// connection: net/http's HTTP/2 server refuses to decode it.) Go's own
	// client refuses to send such a request, so this speaks raw frames.
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "x"}, {Name: ":path", Value: "/inventory/v1/items"},
	}
	pseudo := fields
	for i := range 16 {
		fields = append(fields, hpack.HeaderField{Name: fmt.Sprintf("x-big-%d", i), Value: strings.Repeat("b", 1<<10)})
	}
	if got := rawH2Status(t, g.Addr, fields); got != "431" {
		t.Errorf("h2c with 16 KiB of headers = %s, want 431", got)
	}

	// The limit is exact in HTTP/2 too, counted as HTTP/2 counts a header
	// list (each field's name and value and 32 bytes, pseudo-fields
	// included), and announced as SETTINGS_MAX_HEADER_LIST_SIZE.
	list := func(size int) []hpack.HeaderField {
		f := append([]hpack.HeaderField(nil), pseudo...)
		pad := hpack.HeaderField{Name: "x-pad"}
		for _, p := range f {
			size -= int(p.Size())
		}
		pad.Value = strings.Repeat("p", size-int(pad.Size()))
		return append(f, pad)
	}
	for _, tc := range []struct {
		size int
		want string
	}{{limit, "200"}, {limit + 1, "431"}} {
		if got := rawH2Status(t, g.Addr, list(tc.size)); got != tc.want {
			t.Errorf("h2c with a header list of %d bytes (limit %d) = %s, want %s", tc.size, limit, got, tc.want)
		}
	}
	if got := h2MaxHeaderListSize(t, g.Addr); got != limit {
		t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE = %d, want %d", got, limit)
	}
}

// TestHeaderLimitRange: a limit the node cannot hold exactly is refused.
func TestHeaderLimitRange(t *testing.T) {
	t.Parallel()
	for _, n := range []int{512, 2 << 20} {
		node, err := gateway.New(gateway.Options{
			Listeners:      []gateway.Listener{{Addr: "127.0.0.1:0"}},
			MaxHeaderBytes: n,
		})
		if err == nil {
			node.Close()
			t.Errorf("New with MaxHeaderBytes %d: no error", n)
		}
	}
}

// h2MaxHeaderListSize returns the SETTINGS_MAX_HEADER_LIST_SIZE the server
// announces on a fresh h2c connection.
func h2MaxHeaderListSize(t *testing.T, addr string) uint32 {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's settings: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			v, _ := sf.Value(http2.SettingMaxHeaderListSize)
			return v
		}
	}
}

// rawH2Status sends one HEADERS frame over a fresh h2c connection and
// returns the :status of the response.
func rawH2Status(t *testing.T, addr string, fields []hpack.HeaderField) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range fields {
		_ = enc.WriteField(f)
	}
	const maxFrame = 16 << 10
	b := block.Bytes()
	first := b[:min(len(b), maxFrame)]
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndStream: true, EndHeaders: len(b) <= maxFrame}); err != nil {
		t.Fatal(err)
	}
	for b = b[len(first):]; len(b) > 0; {
		n := min(len(b), maxFrame)
		if err := fr.WriteContinuation(1, n == len(b), b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading response frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			return f.PseudoValue("status")
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v", f.ErrCode)
		case *http2.RSTStreamFrame:
			t.Fatalf("RST_STREAM %v", f.ErrCode)
		}
	}
}

func ExampleNode() {
	node, err := gateway.New(gateway.Options{Listeners: []gateway.Listener{{Pool: "public", Addr: "127.0.0.1:0"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()
	fmt.Println(node.Current().Version)
	// Output: empty
}

// TestShortRequestLine: on the cleartext listener, which also takes h2c
// with prior knowledge, net/http waits for 14 bytes to tell the HTTP/2
// preface from HTTP/1. A complete request whose line is shorter is
// answered 400 at once, not when the read-header timeout ends the wait.
func TestShortRequestLine(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), func(o *gateway.Options) { o.ReadHeaderTimeout = time.Minute })
	for _, raw := range []string{"GET /ok\r\n\r\n", "GET\n\n", "\r\n\r\n", "GET / HTTP/1\n"} {
		// rawRequest waits 10 s for the answer, well under the timeout.
		resp, _, br, _ := rawRequest(t, g.Addr, raw)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q = %d, want 400", raw, resp.StatusCode)
		}
		if !connClosed(br) {
			t.Errorf("%q: connection still open after 400", raw)
		}
	}
}

// TestMalformedTargetRejectedByServer: request targets net/http cannot parse
// never reach the gateway's handler; net/http answers 400 and closes.
func TestMalformedTargetRejectedByServer(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), nil)
	resp, _, br, _ := rawRequest(t, g.Addr, "GET /inventory/v1/%zz HTTP/1.1\r\nHost: x\r\n\r\nGET /inventory/v1/items HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("GET /inventory/v1/%%zz = %d, want 400", resp.StatusCode)
	}
	if !connClosed(br) {
		t.Errorf("connection still open after an unparsable request target")
	}
}
