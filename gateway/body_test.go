package gateway_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// pattern is an io.Reader of n deterministic bytes that never holds them
// all, with their SHA-256 computed as they are read.
type pattern struct {
	n, off int64
	sum    hashWriter
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

func newPattern(n int64) *pattern { return &pattern{n: n, sum: sha256.New()} }

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	if rem := p.n - p.off; int64(len(b)) > rem {
		b = b[:rem]
	}
	for i := range b {
		b[i] = byte((p.off + int64(i)) * 7)
	}
	p.off += int64(len(b))
	p.sum.Write(b)
	return len(b), nil
}

func (p *pattern) hex() string { return hex.EncodeToString(p.sum.Sum(nil)) }

// TestStreamingBodies pushes bodies far larger than the gateway would hold
// if it buffered them, both ways, and checks the gateway's heap did not grow
// with them.
func TestStreamingBodies(t *testing.T) {
	d := gatewaytest.Demo(t)
	cfg := gatewaytest.DemoSnapshot(d)
	cfg.Routes[2].MaxRequestBytes = 1 << 30
	cfg.Routes[2].Timeout = durationpb.New(30 * time.Second)
	g := gatewaytest.Start(t, cfg, nil)
	size := int64(96 << 20)
	allowed := size / 4
	if raceEnabled {
		size, allowed = 24<<20, size/2
	}

	for _, tc := range []struct {
		name   string
		client *http.Client
		base   string
	}{
		{"http1", gatewaytest.HTTP1Client(t), g.URL()},
		{"h2c", gatewaytest.H2CClient(t), g.URL()},
		{"h2-tls", g.TLSClient(t, false), g.TLSURL()},
	} {
		t.Run(tc.name+"/upload", func(t *testing.T) {
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			body := newPattern(size)
			req, _ := http.NewRequest("POST", tc.base+"/inventory/v1/upload", body)
			req.ContentLength = -1 // chunked / unknown length: nothing to pre-size a buffer with
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got struct {
				Bytes  int64  `json:"bytes"`
				SHA256 string `json:"sha256"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 {
				t.Fatalf("upload: status %d, %v", resp.StatusCode, err)
			}
			if got.Bytes != size || got.SHA256 != body.hex() {
				t.Errorf("backend got %d bytes sha %s, want %d sha %s", got.Bytes, got.SHA256, size, body.hex())
			}
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			// Everything in this process (client, gateway, backend) streams;
			// buffering the body anywhere would allocate at least its size.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(allowed) {
				t.Errorf("%d MiB allocated while streaming %d MiB: something buffers the body", alloc>>20, size>>20)
			}
		})
		t.Run(tc.name+"/download", func(t *testing.T) {
			const chunk = 64 << 10
			resp, err := tc.client.Get(tc.base + "/inventory/v1/stream?n=" + strconv.FormatInt(size/chunk, 10) + "&size=" + strconv.Itoa(chunk))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			if err != nil || n != size {
				t.Fatalf("download: %d bytes, %v; want %d", n, err, size)
			}
			// The trailer crosses the gateway in both protocols.
			if got, want := resp.Trailer.Get("X-Demo-Checksum"), hex.EncodeToString(h.Sum(nil)); got != want {
				t.Errorf("trailer X-Demo-Checksum = %q, want %q", got, want)
			}
		})
	}
}

func TestRequestBodyLimit(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	cfg := gatewaytest.DemoSnapshot(d)
	cfg.Routes[2].MaxRequestBytes = 1 << 20
	g := gatewaytest.Start(t, cfg, nil)

	for _, tc := range []struct {
		name    string
		client  *http.Client
		size    int64
		chunked bool
		status  int
	}{
		{"declared over", gatewaytest.HTTP1Client(t), 2 << 20, false, 413},
		{"streamed over", gatewaytest.HTTP1Client(t), 8 << 20, true, 413},
		{"h2 streamed over", gatewaytest.H2CClient(t), 8 << 20, true, 413},
		{"at limit", gatewaytest.HTTP1Client(t), 1 << 20, true, 200},
		{"h2 at limit", gatewaytest.H2CClient(t), 1 << 20, false, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", g.URL()+"/inventory/v1/upload", newPattern(tc.size))
			req.ContentLength = tc.size
			if tc.chunked {
				req.ContentLength = -1
			}
			resp, err := tc.client.Do(req)
			if err != nil {
				// The gateway may close the connection while the client is
				// still sending; the status must still have arrived.
				t.Fatalf("POST: %v", err)
			}
			if resp.StatusCode != tc.status {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("POST %d bytes = %d %s, want %d", tc.size, resp.StatusCode, b, tc.status)
			}
			if tc.status == 413 {
				if p := readProblem(t, resp); p.Error != "payload_too_large" {
					t.Errorf("error = %q, want payload_too_large", p.Error)
				}
				return
			}
			gatewaytest.Drain(resp)
		})
	}
}

func TestUpstreamFailures(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	cfg := gatewaytest.DemoSnapshot(d)
	cfg.Routes[2].Timeout = durationpb.New(300 * time.Millisecond)
	dead := gatewaytest.Listen(t)
	deadAddr := dead.Addr().String()
	dead.Close()
	cfg.Clusters = append(cfg.Clusters, cluster("dead", deadAddr))
	cfg.Routes = append(cfg.Routes, route("dead", "/dead/**", "dead"))
	g := gatewaytest.Start(t, cfg, nil)
	client := gatewaytest.HTTP1Client(t)

	resp, err := client.Get(g.URL() + "/dead/x")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("dead upstream = %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if p := readProblem(t, resp); p.Error != "upstream_unavailable" {
		t.Errorf("error = %q, want upstream_unavailable", p.Error)
	}

	start := time.Now()
	resp, err = client.Get(g.URL() + "/inventory/v1/slow?ms=5000")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 504 {
		t.Errorf("slow upstream = %d, want 504", resp.StatusCode)
	}
	if p := readProblem(t, resp); p.Error != "upstream_timeout" {
		t.Errorf("error = %q, want upstream_timeout", p.Error)
	}
	if el := time.Since(start); el > 4*time.Second {
		t.Errorf("504 took %v; the 300ms route timeout did not apply", el)
	}

	// The upstream's own errors pass through untouched.
	resp, err = client.Get(g.URL() + "/inventory/v1/status/503")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), "status requested by the path") {
		t.Errorf("upstream 503 = %d %s, want the upstream's own answer passed through", resp.StatusCode, b)
	}
}

// TestUpstreamAbortMidBody: an upstream that dies in the middle of a body
// must not leave a response that looks complete, and must give back its
// in-flight slot (here the cluster's only one).
func TestUpstreamAbortMidBody(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			_, _ = io.WriteString(w, "fine")
			return
		}
		w.Header().Set("Content-Length", "1000000")
		_, _ = w.Write(make([]byte, 1000))
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(backend.Close)
	c := cluster("flaky", strings.TrimPrefix(backend.URL, "http://"))
	c.Pool = &configv1.ConnectionPool{MaxInFlight: 1}
	cfg := &configv1.Snapshot{Clusters: []*configv1.Cluster{c}, Routes: []*configv1.Route{route("all", "/{p=**}", "flaky")}}
	g := gatewaytest.Start(t, cfg, nil)
	client := gatewaytest.HTTP1Client(t)

	for i := range 3 {
		resp, err := client.Get(g.URL() + "/abort")
		if err != nil {
			continue // cut off before the head left the gateway's buffer: fine
		}
		if resp.StatusCode != 200 {
			t.Fatalf("abort %d: status %d, want the upstream's 200 (an in-flight slot leaked?)", i, resp.StatusCode)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("abort %d: the client read a complete body from an upstream that died mid-body", i)
		}
	}
	resp, err := client.Get(g.URL() + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "fine" {
		t.Errorf("after aborted responses: %d %q, want 200 fine (an in-flight slot leaked?)", resp.StatusCode, body)
	}
}
