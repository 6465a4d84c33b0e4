package gateway_test

import (
	"bufio"
	"bytes"
	"context"
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

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/telemetry"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/gen/portico/demo/v1/demov1connect"
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
			req.Header.Set("X-Auth-Synthetic", "true")           // only the node's probes are
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
	req.Header.Set("X-Real-Ip", "198.51.100.1")
	e, _ := getEcho(t, gatewaytest.HTTP1Client(t), req)
	if got := strings.Join(e.Header["X-Forwarded-For"], ","); got != "203.0.113.7, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the trusted proxy's list extended", got)
	}
	if got := strings.Join(e.Header["Forwarded"], ","); !strings.HasPrefix(got, "for=203.0.113.7, for=127.0.0.1") {
		t.Errorf("Forwarded = %q, want the trusted proxy's list extended", got)
	}

	// X-Real-Ip is the gateway's own, never the proxy's: the nearest
	// address that is not a trusted proxy, read from the right (a client
	// can prepend anything).
	for _, tc := range []struct{ xff, want string }{
		{"203.0.113.7", "203.0.113.7"},
		{"6.6.6.6, 203.0.113.7", "203.0.113.7"},
		{"203.0.113.7, 127.0.0.5", "203.0.113.7"},
		{"127.0.0.9", "127.0.0.1"}, // only proxies: the peer
		{"not-an-ip", "127.0.0.1"}, // malformed: the peer
		{"", "127.0.0.1"},          // none: the peer
	} {
		req, _ := http.NewRequest("GET", g.URL()+"/inventory/v1/headers", nil)
		if tc.xff != "" {
			req.Header.Set("X-Forwarded-For", tc.xff)
		}
		req.Header.Set("X-Real-Ip", "198.51.100.1")
		e, _ := getEcho(t, gatewaytest.HTTP1Client(t), req)
		if got := e.Header["X-Real-Ip"]; len(got) != 1 || got[0] != tc.want {
			t.Errorf("X-Forwarded-For %q from a trusted proxy: X-Real-Ip = %q, want [%s]", tc.xff, got, tc.want)
		}
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
			// A transfer coding net/http does not implement is 501 (RFC
			// 9112, section 6.1); every other framing error is 400.
			want := http.StatusBadRequest
			if tc.name == "unsupported transfer-encoding" {
				want = http.StatusNotImplemented
			}
			if resp.StatusCode != want {
				t.Fatalf("status = %d %s, want %d", resp.StatusCode, body, want)
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

// h2cConn opens an h2c connection to addr with prior knowledge, framed
// by hand: the client preface and SETTINGS are sent, header blocks are
// read decoded, and the connection closes when the test ends. Every read
// and write has a 10 s deadline.
func h2cConn(t *testing.T, addr string) *http2.Framer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	return fr
}

// writeHeaders sends fields as one HEADERS frame on stream id.
func writeHeaders(t *testing.T, fr *http2.Framer, id uint32, fields []hpack.HeaderField, endStream bool) {
	t.Helper()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range fields {
		_ = enc.WriteField(f)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndStream: endStream, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// h2MaxHeaderListSize returns the SETTINGS_MAX_HEADER_LIST_SIZE the server
// announces on a fresh h2c connection.
func h2MaxHeaderListSize(t *testing.T, addr string) uint32 {
	t.Helper()
	fr := h2cConn(t, addr)
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
// returns the :status of the response; a reset stream fails the test.
func rawH2Status(t *testing.T, addr string, fields []hpack.HeaderField) string {
	t.Helper()
	status, rst := rawH2(t, addr, fields)
	if status == "" {
		t.Fatalf("RST_STREAM %v", rst)
	}
	return status
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

// ownedSpelling reports whether the header name k is a gateway-owned name
// spelled with '_' for '-': what a backend that folds one into the other
// (CGI's HTTP_X_AUTH_TENANT) would take for the gateway's own header.
func ownedSpelling(k string) bool {
	if !strings.Contains(k, "_") {
		return false
	}
	n := strings.ToLower(strings.ReplaceAll(k, "_", "-"))
	switch n {
	case "x-api-key", "x-request-id", "x-real-ip", "true-client-ip", "grpc-timeout":
		return true
	}
	return strings.HasPrefix(n, "x-auth-") || strings.HasPrefix(n, "x-forwarded-")
}

// forgedHeaders are client headers that spell gateway-owned names with
// '_', and the client address claims the gateway replaces. reader is a
// second valid key: a credential under another spelling must not travel
// either.
func forgedHeaders(reader string) map[string]string {
	return map[string]string{
		"X_Auth_Tenant":      "forged",
		"x_auth_subject":     "forged",
		"X-Auth_Tenant":      "forged",
		"X_AUTH_SCOPES":      "everything",
		"X_Request_Id":       "forged-request-id",
		"X-Forwarded_For":    "6.6.6.6",
		"X-Forwarded-Prefix": "/admin",
		"X_Real_IP":          "6.6.6.6",
		"X-Real-Ip":          "6.6.6.6",
		"True-Client-IP":     "6.6.6.6",
		"true_client_ip":     "6.6.6.6",
		"X_Api_Key":          reader,
		"X_Custom_Thing":     "kept", // not the gateway's: passes
	}
}

// TestUnderscoredHeaderNames: a client header whose name is a gateway-owned
// one with '_' read as '-' never reaches the backend, over HTTP/1.1 (names
// as typed) and HTTP/2 (lowercase, h2c and TLS), while the gateway's own
// identity, request id and X-Real-Ip arrive once each.
func TestUnderscoredHeaderNames(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	g := gatewaytest.Start(t, f.cfg, nil)

	for _, tc := range []struct {
		name   string
		client *http.Client
		base   string
	}{
		{"http1", gatewaytest.HTTP1Client(t), g.URL()},
		{"h2c", gatewaytest.H2CClient(t), g.URL()},
		{"h2-tls", g.TLSClient(t, false), g.TLSURL()},
		{"http1-tls", g.TLSClient(t, true), g.TLSURL()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", tc.base+"/inventory/v1/headers", nil)
			req.Header.Set("X-Api-Key", f.keys["good"])
			for k, v := range forgedHeaders(f.keys["reader"]) {
				req.Header[k] = []string{v} // as typed: HTTP/1.1 sends the name unchanged
			}
			e, resp := getEcho(t, tc.client, req)
			for k, v := range e.Header {
				if ownedSpelling(k) {
					t.Errorf("backend received %s: %q", k, v)
				}
			}
			custom := "X_custom_thing" // net/http's canonical form of both spellings
			want := map[string]string{
				"X-Auth-Tenant": "tenant-1",
				"X-Auth-Key-Id": "key-good",
				"X-Auth-Scopes": "inventory:read inventory:write orders:read",
				"X-Request-Id":  resp.Header.Get("X-Request-Id"),
				"X-Real-Ip":     "127.0.0.1",
				custom:          "kept",
			}
			for k, v := range want {
				if got := e.Header[k]; len(got) != 1 || got[0] != v {
					t.Errorf("backend %s = %q, want [%s]", k, got, v)
				}
			}
			for _, k := range []string{"X-Auth-Subject", "True-Client-Ip", "X-Forwarded-Prefix"} {
				if got, ok := e.Header[k]; ok {
					t.Errorf("backend %s = %q, want none", k, got)
				}
			}
			if strings.Contains(fmt.Sprint(e.Header), f.keys["reader"]) {
				t.Errorf("backend received the second key under another name: %v", e.Header)
			}
		})
	}
}

// TestUnderscoredMetadata: gRPC metadata (HTTP/2, lowercase) whose key is
// a gateway-owned name with '_' never reaches a gRPC backend.
func TestUnderscoredMetadata(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	f := newAuthFixture(t, d)
	g := gatewaytest.Start(t, f.cfg, nil)
	client := demov1.NewOrdersServiceClient(g.GRPCConn(t))
	ctx := testContext(t)

	md := []string{"x-api-key", f.keys["good"],
		"x-demo-echo-md", "x_auth_tenant,x-auth_tenant,x_auth_subject,x_request_id,x_real_ip,x-real-ip,true_client_ip,x_api_key,x-auth-tenant,x_custom"}
	for k, v := range forgedHeaders(f.keys["reader"]) {
		md = append(md, strings.ToLower(k), v)
	}
	md = append(md, "x_custom", "kept")
	var header metadata.MD
	if _, err := client.GetOrder(metadata.AppendToOutgoingContext(ctx, md...), &demov1.GetOrderRequest{OrderId: "o-1001"}, grpc.Header(&header)); err != nil {
		t.Fatalf("GetOrder: %v", err)
	}
	for k, v := range header {
		if name, ok := strings.CutPrefix(k, "x-demo-echo-"); ok && ownedSpelling(name) {
			t.Errorf("backend received %s: %q", name, v)
		}
	}
	for k, v := range map[string]string{"x-demo-echo-x-auth-tenant": "tenant-1", "x-demo-echo-x-real-ip": "127.0.0.1", "x-demo-echo-x_custom": "kept"} {
		if got := header.Get(k); len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want [%s]", k, got, v)
		}
	}
}

// TestUnderscoredHeadersTranscoded: the transcoded protocols (Connect,
// gRPC-Web, REST) reach the gRPC backend through the transcoder, which
// builds the upstream request: the same names are dropped there.
func TestUnderscoredHeadersTranscoded(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, rpcSnapshot(t, d.OrdersAddr()), nil)
	hc := gatewaytest.H2CClient(t)
	h1 := gatewaytest.HTTP1Client(t)

	header := func(h http.Header) {
		for k, v := range forgedHeaders("ak_test_notakey") {
			h[k] = []string{v}
		}
		h["X-Demo-Echo-Md"] = []string{"x_auth_tenant,x-auth_tenant,x_auth_subject,x_request_id,x_real_ip,x-real-ip,true_client_ip,x_api_key,x_custom_thing"}
	}
	check := func(t *testing.T, got http.Header) {
		t.Helper()
		for k, v := range got {
			if name, ok := strings.CutPrefix(strings.ToLower(k), "x-demo-echo-"); ok && ownedSpelling(name) {
				t.Errorf("backend received %s: %q", name, v)
			}
		}
		if v := got.Values("X-Demo-Echo-X-Real-Ip"); len(v) != 1 || v[0] != "127.0.0.1" {
			t.Errorf("backend x-real-ip = %q, want [127.0.0.1]", v)
		}
		// The echo works through the transcoder: a header of the
		// client's own comes back.
		if v := got.Values("X-Demo-Echo-X_custom_thing"); len(v) != 1 || v[0] != "kept" {
			t.Errorf("backend x_custom_thing = %q, want [kept] (headers: %v)", v, got)
		}
	}
	for name, opts := range map[string][]connect.ClientOption{
		"connect-json": {connect.WithProtoJSON()},
		"grpc-web":     {connect.WithGRPCWeb()},
	} {
		t.Run(name, func(t *testing.T) {
			c := demov1connect.NewOrdersServiceClient(hc, g.URL(), opts...)
			req := connect.NewRequest(&demov1.GetOrderRequest{OrderId: "o-1001"})
			header(req.Header())
			resp, err := c.GetOrder(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			check(t, resp.Header())
		})
	}
	for name, c := range map[string]*http.Client{"rest-h2c": hc, "rest-http1": h1} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", g.URL()+"/v1/orders/o-1001", nil)
			header(req.Header)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			gatewaytest.Drain(resp)
			if resp.StatusCode != 200 {
				t.Fatalf("REST GET = %d", resp.StatusCode)
			}
			check(t, resp.Header)
		})
	}
}

// TestUppercaseNamesRefusedOverHTTP2: an HTTP/2 header name with
// uppercase letters is malformed (RFC 9113 8.2.1) and stays refused,
// underscores or not: the stream is reset, nothing is forwarded.
func TestUppercaseNamesRefusedOverHTTP2(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), nil)
	base := []hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "x"}, {Name: ":path", Value: "/inventory/v1/headers"},
	}
	if st, rst := rawH2(t, g.Addr, append(base, hpack.HeaderField{Name: "x_auth_tenant", Value: "forged"})); st != "200" {
		t.Fatalf("lowercase x_auth_tenant = status %q, reset %v; want 200 (the name is dropped, the request served)", st, rst)
	}
	for _, name := range []string{"X_Auth_Tenant", "X-Auth-Tenant", "X_auth_tenant"} {
		if st, rst := rawH2(t, g.Addr, append(base, hpack.HeaderField{Name: name, Value: "forged"})); rst != http2.ErrCodeProtocol {
			t.Errorf("%s = status %q, reset %v; want the stream reset with PROTOCOL_ERROR", name, st, rst)
		}
	}
}

// rawH2 sends one header block (HEADERS and CONTINUATION frames) over a
// fresh h2c connection and returns the :status of the response, or the
// code the stream was reset with.
func rawH2(t *testing.T, addr string, fields []hpack.HeaderField) (string, http2.ErrCode) {
	t.Helper()
	fr := h2cConn(t, addr)
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
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading response frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			return f.PseudoValue("status"), 0
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v", f.ErrCode)
		case *http2.RSTStreamFrame:
			return "", f.ErrCode
		}
	}
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
