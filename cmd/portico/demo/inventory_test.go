package demo_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portico-gw/portico/cmd/portico/demo"
)

// clients returns an HTTP/1.1 client and an h2c (prior knowledge) client,
// by the name of the protocol they speak. Request contexts bound their calls.
func clients(t *testing.T) map[string]*http.Client {
	t.Helper()
	var h1, h2c http.Protocols
	h1.SetHTTP1(true)
	h2c.SetUnencryptedHTTP2(true)
	m := map[string]*http.Client{
		"HTTP/1.1": {Transport: &http.Transport{Protocols: &h1}},
		"HTTP/2.0": {Transport: &http.Transport{Protocols: &h2c}},
	}
	t.Cleanup(func() {
		for _, c := range m {
			c.CloseIdleConnections()
		}
	})
	return m
}

// do sends a request and returns the response with its body read.
func do(t *testing.T, c *http.Client, method, url, contentType, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s = %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp, b
}

type item struct {
	SKU        string `json:"sku"`
	Name       string `json:"name"`
	Quantity   int64  `json:"quantity"`
	PriceCents int64  `json:"price_cents"`
}

type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func TestItems(t *testing.T) {
	t.Parallel()
	s := startServers(t, demo.Options{})
	base := "http://" + s.InventoryAddr() + "/inventory/v1/items"
	c := clients(t)["HTTP/1.1"]

	resp, body := do(t, c, "GET", base, "", "")
	var list struct{ Items []item }
	if err := json.Unmarshal(body, &list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET items = %s %s, %v", resp.Status, body, err)
	}
	var skus []string
	for _, it := range list.Items {
		skus = append(skus, it.SKU)
	}
	if want := []string{"GADGET-2", "GIZMO-3", "WIDGET-1"}; !slices.Equal(skus, want) {
		t.Errorf("GET items = %q, want %q", skus, want)
	}

	const ctJSON = "application/json"
	steps := []struct {
		method, path, contentType, body string
		wantStatus                      int
		wantItem                        *item  // the body, for a success
		wantLocation                    string // for a 201
	}{
		{"GET", "/WIDGET-1", "", "", 200, &item{"WIDGET-1", "Widget", 100, 1250}, ""},
		{"GET", "/NOPE-1", "", "", 404, nil, ""},
		{"POST", "", ctJSON, `{"sku":"BOLT-9","name":"Bolt","quantity":5,"price_cents":20}`, 201, &item{"BOLT-9", "Bolt", 5, 20}, "/inventory/v1/items/BOLT-9"},
		{"GET", "/BOLT-9", "", "", 200, &item{"BOLT-9", "Bolt", 5, 20}, ""},
		{"POST", "", ctJSON, `{"sku":"BOLT-9","name":"Bolt","quantity":5,"price_cents":20}`, 409, nil, ""},
		{"POST", "", "", `{"sku":"NUT-1","name":"Nut"}`, 201, &item{"NUT-1", "Nut", 0, 0}, "/inventory/v1/items/NUT-1"},
		{"POST", "", ctJSON, `{"sku":"bad sku","name":"Bolt"}`, 400, nil, ""},
		{"POST", "", ctJSON, `{"sku":"BOLT-10","name":""}`, 400, nil, ""},
		{"POST", "", ctJSON, `{"sku":"BOLT-10","name":"x","colour":"red"}`, 400, nil, ""},
		{"POST", "", ctJSON, `{"sku":"BOLT-10","name":"x"} {}`, 400, nil, ""},
		{"POST", "", ctJSON, `{"sku":`, 400, nil, ""},
		{"POST", "", ctJSON, `{"sku":"BOLT-10","name":"x","quantity":-1}`, 400, nil, ""},
		{"POST", "", "text/plain", `{"sku":"BOLT-10","name":"x"}`, 415, nil, ""},
		{"PUT", "/BOLT-9", ctJSON, `{"name":"Big bolt","quantity":7,"price_cents":25}`, 200, &item{"BOLT-9", "Big bolt", 7, 25}, ""},
		{"GET", "/BOLT-9", "", "", 200, &item{"BOLT-9", "Big bolt", 7, 25}, ""},
		{"PUT", "/SCREW-2", ctJSON, `{"sku":"SCREW-2","name":"Screw"}`, 201, &item{"SCREW-2", "Screw", 0, 0}, "/inventory/v1/items/SCREW-2"},
		{"PUT", "/SCREW-2", ctJSON, `{"sku":"SCREW-3","name":"Screw"}`, 400, nil, ""},
		{"PUT", "/bad", ctJSON, `{"name":"Screw"}`, 400, nil, ""},
		{"DELETE", "/BOLT-9", "", "", 204, nil, ""},
		{"GET", "/BOLT-9", "", "", 404, nil, ""},
		{"DELETE", "/BOLT-9", "", "", 404, nil, ""},
	}
	for _, st := range steps {
		resp, body := do(t, c, st.method, base+st.path, st.contentType, st.body)
		call := fmt.Sprintf("%s %s %s", st.method, base+st.path, st.body)
		if resp.StatusCode != st.wantStatus {
			t.Errorf("%s = %s %s, want %d", call, resp.Status, body, st.wantStatus)
			continue
		}
		if loc := resp.Header.Get("Location"); loc != st.wantLocation {
			t.Errorf("%s Location = %q, want %q", call, loc, st.wantLocation)
		}
		switch {
		case st.wantItem != nil:
			var got item
			if err := json.Unmarshal(body, &got); err != nil || got != *st.wantItem {
				t.Errorf("%s = %s, %v; want %+v", call, body, err, *st.wantItem)
			}
		case st.wantStatus >= 400:
			checkProblem(t, call, resp, body)
		case len(body) != 0:
			t.Errorf("%s = %q, want no body", call, body)
		}
	}

	resp, _ = do(t, c, "PATCH", base+"/WIDGET-1", ctJSON, `{}`)
	if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(resp.Header.Get("Allow"), "PUT") {
		t.Errorf("PATCH item = %s, Allow %q; want 405 allowing PUT", resp.Status, resp.Header.Get("Allow"))
	}
	resp, body = do(t, c, "POST", base, ctJSON, `{"sku":"BIG-1","name":"`+strings.Repeat("x", 2<<20)+`"}`)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("POST item of 2 MiB = %s, want 413", resp.Status)
	} else {
		checkProblem(t, "POST item of 2 MiB", resp, body)
	}
}

// checkProblem checks that an error response is a problem+json of its status.
func checkProblem(t *testing.T, call string, resp *http.Response, body []byte) {
	t.Helper()
	var p problem
	err := json.Unmarshal(body, &p)
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" || err != nil ||
		p.Status != resp.StatusCode || p.Title != http.StatusText(resp.StatusCode) || p.Type != "about:blank" {
		t.Errorf("%s = %s %s %s, %v; want a problem+json of that status", call, resp.Status, ct, body, err)
	}
}

// generator yields n bytes of a pattern without ever holding them: it
// repeats one block whose length, a prime, is out of step with every buffer
// size along the way.
type generator struct {
	n, off int64
}

var generatorBlock = func() []byte {
	b := make([]byte, 65521)
	for i := range b {
		b[i] = byte(i ^ i>>8)
	}
	return b
}()

func (g *generator) Read(p []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	if rest := g.n - g.off; int64(len(p)) > rest {
		p = p[:rest]
	}
	n := 0
	for n < len(p) {
		n += copy(p[n:], generatorBlock[(g.off+int64(n))%int64(len(generatorBlock)):])
	}
	g.off += int64(n)
	return n, nil
}

// heapPeak samples the bytes of the heap in use until the returned function
// is called, and that function returns the highest sample.
func heapPeak() func() uint64 {
	var peak uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	sample := func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peak = max(peak, m.HeapInuse)
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		return peak
	}
}

// TestUpload pushes 64 MiB through /upload on each protocol, and checks that
// the heap never grows by a good part of that. It does not run in parallel,
// so that the heap holds little else.
func TestUpload(t *testing.T) {
	s := startServers(t, demo.Options{})
	url := "http://" + s.InventoryAddr() + "/inventory/v1/upload"
	const size = 64 << 20
	// The race detector makes hashing 64 MiB twice slow; give it time.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for proto, c := range clients(t) {
		want := sha256.New()
		body := io.TeeReader(&generator{n: size}, want)

		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		stopSampling := heapPeak()
		req, err := http.NewRequestWithContext(ctx, "POST", url, body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			stopSampling()
			t.Fatalf("%s POST upload = %v", proto, err)
		}
		var got struct {
			Bytes  int64
			SHA256 string
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		peak := stopSampling()

		if resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("%s POST upload = %s, %v", proto, resp.Status, err)
		}
		if resp.Proto != proto {
			t.Errorf("POST upload answered over %s, want %s", resp.Proto, proto)
		}
		if wantSum := hex.EncodeToString(want.Sum(nil)); got.Bytes != size || got.SHA256 != wantSum {
			t.Errorf("%s POST upload = %d bytes, sha256 %s; want %d, %s", proto, got.Bytes, got.SHA256, size, wantSum)
		}
		// Client and server together hold a few buffers; a server that held
		// the body would hold all of it.
		if grew := int64(peak) - int64(before.HeapInuse); grew > size/4 {
			t.Errorf("%s POST upload of %d MiB grew the heap by %d MiB, want the body streamed", proto, size>>20, grew>>20)
		}
	}
}

func TestStream(t *testing.T) {
	t.Parallel()
	s := startServers(t, demo.Options{})
	const n, size = 8, 100_000
	url := fmt.Sprintf("http://%s/inventory/v1/stream?n=%d&size=%d", s.InventoryAddr(), n, size)
	for proto, c := range clients(t) {
		resp, body := do(t, c, "GET", url, "", "")
		if resp.StatusCode != http.StatusOK || resp.Proto != proto {
			t.Fatalf("GET stream = %s over %s, want 200 over %s", resp.Status, resp.Proto, proto)
		}
		if proto == "HTTP/1.1" && !slices.Equal(resp.TransferEncoding, []string{"chunked"}) {
			t.Errorf("GET stream over HTTP/1.1 transfer encoding = %q, want chunked", resp.TransferEncoding)
		}
		var want []byte
		for i := range n {
			want = append(want, bytes.Repeat([]byte{'a' + byte(i%26)}, size)...)
		}
		if !bytes.Equal(body, want) {
			t.Errorf("GET stream over %s = %d bytes, want %d bytes of chunk letters", proto, len(body), len(want))
		}
		sum := sha256.Sum256(body)
		if got := resp.Trailer.Get("X-Demo-Checksum"); got != hex.EncodeToString(sum[:]) {
			t.Errorf("GET stream over %s trailer X-Demo-Checksum = %q, want %x", proto, got, sum)
		}
	}

	c := clients(t)["HTTP/1.1"]
	for _, q := range []string{"n=-1", "n=x", "size=16777217", "n=1000001"} {
		resp, body := do(t, c, "GET", "http://"+s.InventoryAddr()+"/inventory/v1/stream?"+q, "", "")
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET stream?%s = %s, want 400", q, resp.Status)
		} else {
			checkProblem(t, "GET stream?"+q, resp, body)
		}
	}
}

func TestHeadersEcho(t *testing.T) {
	t.Parallel()
	s := startServers(t, demo.Options{})
	for proto, c := range clients(t) {
		url := "http://" + s.InventoryAddr() + "/inventory/v1/headers?b=2&a=1%202"
		req, err := http.NewRequestWithContext(testContext(t), "POST", url, strings.NewReader("hello"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Add("X-Custom", "one")
		req.Header.Add("X-Custom", "two")
		req.Host = "api.example.test"
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s POST headers = %v", proto, err)
		}
		var got struct {
			Method, URI, Path, Host, Proto string
			RawQuery                       string `json:"raw_query"`
			RemoteAddr                     string `json:"remote_addr"`
			ContentLength                  int64  `json:"content_length"`
			Headers                        http.Header
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s POST headers = %s, %v", proto, resp.Status, err)
		}
		if got.Method != "POST" || got.Path != "/inventory/v1/headers" || got.RawQuery != "b=2&a=1%202" ||
			got.Host != "api.example.test" || got.Proto != proto || got.ContentLength != 5 ||
			!strings.HasPrefix(got.RemoteAddr, "127.0.0.1:") {
			t.Errorf("%s POST headers = %+v, want the request as sent", proto, got)
		}
		if want := "/inventory/v1/headers?b=2&a=1%202"; got.URI != want {
			t.Errorf("%s POST headers uri = %q, want %q", proto, got.URI, want)
		}
		if h := got.Headers.Values("X-Custom"); !slices.Equal(h, []string{"one", "two"}) {
			t.Errorf("%s POST headers X-Custom = %q, want [one two]", proto, h)
		}
		if ua := got.Headers.Get("User-Agent"); !strings.HasPrefix(ua, "Go-http-client/") {
			t.Errorf("%s POST headers User-Agent = %q, want Go's", proto, ua)
		}
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	s := startServers(t, demo.Options{})
	c := clients(t)["HTTP/1.1"]
	tests := []struct {
		code string
		want int
	}{
		{"200", 200}, {"201", 201}, {"204", 204}, {"302", 302}, {"418", 418}, {"503", 503},
		{"199", 400}, {"600", 400}, {"abc", 400},
	}
	noRedirect := *c
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, tt := range tests {
		resp, body := do(t, &noRedirect, "GET", "http://"+s.InventoryAddr()+"/inventory/v1/status/"+tt.code, "", "")
		if resp.StatusCode != tt.want {
			t.Errorf("GET status/%s = %s, want %d", tt.code, resp.Status, tt.want)
			continue
		}
		if tt.want >= 400 {
			checkProblem(t, "GET status/"+tt.code, resp, body)
		}
	}
}

func TestSlow(t *testing.T) {
	t.Parallel()
	s := startServers(t, demo.Options{})
	c := clients(t)["HTTP/1.1"]
	base := "http://" + s.InventoryAddr() + "/inventory/v1/slow"
	start := time.Now()
	resp, body := do(t, c, "GET", base+"?ms=40", "", "")
	if resp.StatusCode != http.StatusOK || string(body) != "{\"waited_ms\":40}\n" {
		t.Errorf("GET slow?ms=40 = %s %s, want 200 {\"waited_ms\":40}", resp.Status, body)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Errorf("GET slow?ms=40 took %v, want at least 40ms", d)
	}

	ctx, cancel := context.WithTimeout(testContext(t), 50*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"?ms=600000", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			resp.Body.Close()
		}
		t.Errorf("GET slow?ms=600000 with a 50ms deadline = %v, want DeadlineExceeded", err)
	}
	// The abandoned request must end with its client, or Close waits for it.
	start = time.Now()
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close() took %v, want the abandoned slow request to have ended", d)
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	s := startServers(t, demo.Options{})
	for proto, c := range clients(t) {
		resp, body := do(t, c, "GET", "http://"+s.InventoryAddr()+"/healthz", "", "")
		if resp.StatusCode != http.StatusOK || string(body) != "ok" || resp.Proto != proto {
			t.Errorf("GET /healthz = %s %q over %s, want 200 \"ok\" over %s", resp.Status, body, resp.Proto, proto)
		}
	}
}
