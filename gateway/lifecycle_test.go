package gateway_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/configfile"
	"github.com/portico-gw/portico/gateway/snapshot"
	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/logbuf"
	"github.com/portico-gw/portico/testing/testca"
)

// TestSnapshotSwapUnderLoad swaps snapshots continuously while clients
// hammer the node: not one request may fail.
func TestSnapshotSwapUnderLoad(t *testing.T) {
	t.Parallel()
	a := namedBackend(t, "a")
	b := namedBackend(t, "b")
	snap := func(version string, backend string) *configv1.Snapshot {
		return &configv1.Snapshot{
			Version:  version,
			Clusters: []*configv1.Cluster{cluster("c-"+version, backend)},
			Routes: []*configv1.Route{
				route("r", "/v1/{x=**}", "c-"+version, "GET"),
				route("extra-"+version, "/"+version+"/only", "c-"+version, "GET"),
			},
		}
	}
	g := gatewaytest.Start(t, snap("0", a), nil)

	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg       sync.WaitGroup
		ok, fail atomic.Int64
		firstErr atomic.Value
	)
	for _, client := range []*http.Client{gatewaytest.HTTP1Client(t), gatewaytest.H2CClient(t)} {
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					resp, err := client.Get(g.URL() + "/v1/x")
					if err == nil {
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 || !(strings.HasPrefix(string(body), "a ") || strings.HasPrefix(string(body), "b ")) {
							err = fmt.Errorf("status %d body %q", resp.StatusCode, body)
						}
					}
					if err != nil {
						fail.Add(1)
						firstErr.CompareAndSwap(nil, err)
						continue
					}
					ok.Add(1)
				}
			})
		}
	}
	swaps := 200
	if raceEnabled {
		swaps = 50
	}
	for i := 1; i <= swaps; i++ {
		backend := a
		if i%2 == 1 {
			backend = b
		}
		if err := g.Node.Apply(gatewaytest.WithoutAnonymousLimit(snap(fmt.Sprint(i), backend))); err != nil {
			t.Fatalf("Apply %d: %v", i, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if fail.Load() > 0 {
		t.Errorf("%d of %d requests failed during %d swaps; first: %v", fail.Load(), fail.Load()+ok.Load(), swaps, firstErr.Load())
	}
	if ok.Load() < int64(swaps) {
		t.Errorf("only %d requests during %d swaps: the load did not overlap the swaps", ok.Load(), swaps)
	}
	if got := g.Node.Current().Version; got != fmt.Sprint(swaps) {
		t.Errorf("Current().Version = %q, want %d", got, swaps)
	}
}

// TestInFlightFinishesOnItsSnapshot: a request that started on a snapshot
// finishes there, even when the next snapshot removes its route and cluster.
func TestInFlightFinishesOnItsSnapshot(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), nil)
	client := gatewaytest.HTTP1Client(t)

	done := make(chan error, 1)
	go func() {
		resp, err := client.Get(g.URL() + "/inventory/v1/slow?ms=700")
		if err == nil {
			gatewaytest.Drain(resp)
			if resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		done <- err
	}()
	waitInFlight(t, g, "inventory", 1) // the slow request is at the backend
	empty := &configv1.Snapshot{Version: "empty-2"}
	if err := g.Node.Apply(empty); err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(g.URL() + "/inventory/v1/items")
	if err != nil {
		t.Fatal(err)
	}
	gatewaytest.Drain(resp)
	if resp.StatusCode != 404 {
		t.Errorf("new request after the swap = %d, want 404", resp.StatusCode)
	}
	if err := <-done; err != nil {
		t.Errorf("in-flight request across the swap: %v", err)
	}
}

func TestApplyRejectsBadSnapshotAndKeepsServing(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	good := gatewaytest.DemoSnapshot(d)
	g := gatewaytest.Start(t, good, nil)

	bad := proto.Clone(good).(*configv1.Snapshot)
	bad.Version = "bad"
	bad.Routes = append(bad.Routes, &configv1.Route{Id: "dup", Team: "demo", Path: "/inventory/v1/{other=**}", Cluster: "nope"})
	err := g.Node.Apply(bad)
	var serr *snapshot.Error
	if !errors.As(err, &serr) {
		t.Fatalf("Apply(bad) = %v, want a *snapshot.Error", err)
	}
	msg := err.Error()
	for _, want := range []string{`unknown cluster "nope"`, `"inventory"`, `"dup"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("Apply(bad) error %q does not mention %s", msg, want)
		}
	}
	if v := g.Node.Current().Version; v != good.Version {
		t.Errorf("Current().Version = %q after a rejected Apply, want %q", v, good.Version)
	}
	resp, err := gatewaytest.HTTP1Client(t).Get(g.URL() + "/inventory/v1/items")
	if err != nil {
		t.Fatal(err)
	}
	gatewaytest.Drain(resp)
	if resp.StatusCode != 200 {
		t.Errorf("after a rejected Apply = %d, want 200 from the old snapshot", resp.StatusCode)
	}
}

// TestReloadFromFile is what `portico gateway --config FILE` does: a bad
// file is logged and ignored, a good one replaces the snapshot.
func TestReloadFromFile(t *testing.T) {
	t.Parallel()
	a := namedBackend(t, "a")
	b := namedBackend(t, "b")
	dir := t.TempDir()
	path := filepath.Join(dir, "portico.yaml")
	write := func(content string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(configYAML("v1", a))

	g := gatewaytest.Start(t, nil, nil)
	reload := make(chan struct{})
	var logs logbuf.Buffer
	w := &configfile.Watcher{Path: path, Apply: g.Node.Apply, Interval: 20 * time.Millisecond, Reload: reload,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	cfg, err := w.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Node.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { w.Run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })

	client := gatewaytest.HTTP1Client(t)
	get := func() string {
		resp, err := client.Get(g.URL() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(body)
	}
	if got := get(); got != "a /x" {
		t.Fatalf("initial = %q, want a /x", got)
	}

	// Syntax error, unknown field, invalid content: each is refused.
	for _, bad := range []string{
		"routes: [unclosed",
		configYAML("v2", b) + "bogus_field: 1\n",
		strings.Replace(configYAML("v2", b), "cluster: backend", "cluster: missing", 1),
	} {
		rejected := strings.Count(logs.String(), "config rejected")
		write(bad)
		gatewaytest.WaitFor(t, 5*time.Second, "the bad file's rejection", func() bool {
			return strings.Count(logs.String(), "config rejected") > rejected
		})
		if v := g.Node.Current().Version; v != "v1" {
			t.Fatalf("after a bad file the node runs %q, want v1", v)
		}
		if got := get(); got != "a /x" {
			t.Fatalf("after a bad file = %q, want the old snapshot's a /x", got)
		}
	}

	write(configYAML("v3", b))
	gatewaytest.WaitFor(t, 5*time.Second, "v3 to load", func() bool { return g.Node.Current().Version == "v3" })
	if got := get(); got != "b /x" {
		t.Errorf("after a good file = %q, want b /x", got)
	}

	// A forced reload (SIGHUP) re-applies unchanged content.
	before := g.Node.Current()
	reload <- struct{}{}
	gatewaytest.WaitFor(t, 5*time.Second, "forced reload", func() bool { return g.Node.Current() != before })
}

// TestGracefulShutdown: stopping the node lets in-flight requests finish,
// then refuses new connections.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), nil)
	h1 := gatewaytest.HTTP1Client(t)
	h2 := gatewaytest.H2CClient(t)

	// Warm an h2 connection so the drain must GOAWAY it.
	resp, err := h2.Get(g.URL() + "/inventory/v1/items")
	if err != nil {
		t.Fatal(err)
	}
	gatewaytest.Drain(resp)

	results := make(chan error, 2)
	for _, c := range []*http.Client{h1, h2} {
		go func() {
			resp, err := c.Get(g.URL() + "/inventory/v1/slow?ms=800")
			if err == nil {
				gatewaytest.Drain(resp)
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			results <- err
		}()
	}
	waitInFlight(t, g, "inventory", 2) // both slow requests are at the backend
	stopped := make(chan error, 1)
	go func() { stopped <- g.Stop() }()

	for range 2 {
		if err := <-results; err != nil {
			t.Errorf("in-flight request during drain: %v", err)
		}
	}
	if err := <-stopped; err != nil {
		t.Errorf("Run returned %v", err)
	}
	if c, err := net.DialTimeout("tcp", g.Addr, time.Second); err == nil {
		c.Close()
		t.Errorf("the listener still accepts connections after shutdown")
	}
}

// TestSlowHeadersCutOff: a client trickling header bytes is disconnected
// after the read-header timeout while normal traffic continues.
func TestSlowHeadersCutOff(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), func(o *gateway.Options) { o.ReadHeaderTimeout = 300 * time.Millisecond })

	slow := make([]net.Conn, 20)
	for i := range slow {
		c, err := net.Dial("tcp", g.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET /inventory/v1/items HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
			t.Fatal(err)
		}
		slow[i] = c
	}
	client := gatewaytest.HTTP1Client(t)
	start := time.Now()
	for time.Since(start) < 600*time.Millisecond {
		resp, err := client.Get(g.URL() + "/inventory/v1/items")
		if err != nil {
			t.Fatalf("normal request while slow clients wait: %v", err)
		}
		gatewaytest.Drain(resp)
		if resp.StatusCode != 200 {
			t.Fatalf("normal request = %d", resp.StatusCode)
		}
		for _, c := range slow {
			_, _ = c.Write([]byte("a")) // trickle
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, c := range slow {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		// net/http closes such a connection, possibly after a 408.
		if err == nil && !strings.Contains(string(buf[:n]), "408") {
			t.Errorf("slow client %d got %q, want the connection closed", i, buf[:n])
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("slow client %d is still connected after %v", i, time.Since(start))
		}
	}
}

// TestTLSListenerFraming: HTTP/1.1 over TLS goes through the same framing
// guard as cleartext.
func TestTLSListenerFraming(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, gatewaytest.DemoSnapshot(d), nil)
	c, err := tls.Dial("tcp", g.TLSAddr, &tls.Config{RootCAs: g.CA, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	raw := "POST /inventory/v1/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n"
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	buf, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(buf), "HTTP/1.1 400") {
		t.Errorf("CL+TE over TLS: %q, want 400 and close", buf)
	}
}

// TestUpstreamMutualTLS: the node proves its identity to a backend that
// requires a client certificate from the gateway's CA, and pins the
// backend's CA.
func TestUpstreamMutualTLS(t *testing.T) {
	t.Parallel()
	ca := testca.New(t, "internal CA")
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	backend.TLS = &tls.Config{
		Certificates: []tls.Certificate{ca.Issue(t, "backend", false, "127.0.0.1").TLS},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool,
	}
	backend.StartTLS()
	t.Cleanup(backend.Close)

	dir := t.TempDir()
	certFile, keyFile := writeKeyPair(t, dir, ca.Issue(t, "portico-gateway", true))
	caPEM := string(ca.PEM)
	addr := strings.TrimPrefix(backend.URL, "https://")

	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{
			{Name: "mtls", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: addr}},
				Tls: &configv1.UpstreamTLS{CaPem: caPEM, Identity: "gateway"}},
			{Name: "no-client-cert", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: addr}},
				Tls: &configv1.UpstreamTLS{CaPem: caPEM}},
			{Name: "wrong-ca", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: addr}},
				Tls: &configv1.UpstreamTLS{CaPem: string(testca.New(t, "other").PEM), Identity: "gateway"}},
		},
		Routes: []*configv1.Route{
			route("mtls", "/mtls", "mtls"),
			route("none", "/none", "no-client-cert"),
			route("wrong", "/wrong", "wrong-ca"),
		},
	}
	for _, r := range cfg.Routes {
		r.Timeout = durationpb.New(5 * time.Second)
	}
	ids, err := upstream.LoadIdentities([]upstream.IdentityFiles{{Name: "gateway", CertFile: certFile, KeyFile: keyFile}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := gatewaytest.Start(t, cfg, func(o *gateway.Options) { o.Upstream.Identities = ids })
	h := gatewaytest.HTTP1Client(t)

	resp, err := h.Get(g.URL() + "/mtls")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello portico-gateway" {
		t.Errorf("mTLS upstream = %d %q, want 200 hello portico-gateway", resp.StatusCode, body)
	}
	for _, path := range []string{"/none", "/wrong"} {
		resp, err := h.Get(g.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		gatewaytest.Drain(resp)
		if resp.StatusCode < 502 || resp.StatusCode > 503 {
			t.Errorf("%s = %d, want the gateway to fail the upstream (502/503)", path, resp.StatusCode)
		}
	}
}

func writeKeyPair(t *testing.T, dir string, l testca.Leaf) (string, string) {
	t.Helper()
	certFile := filepath.Join(dir, "client.pem")
	keyFile := filepath.Join(dir, "client-key.pem")
	if err := os.WriteFile(certFile, l.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, l.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// waitInFlight waits until n requests are in flight to cluster's
// endpoints: picked by the proxy and not yet done.
func waitInFlight(t *testing.T, g *gatewaytest.Gateway, cluster string, n int64) {
	t.Helper()
	gatewaytest.WaitFor(t, 10*time.Second, fmt.Sprintf("%d requests in flight to %s", n, cluster), func() bool {
		var in int64
		for _, c := range g.Node.ClusterStatus() {
			if c.Name == cluster {
				for _, e := range c.Endpoints {
					in += e.InFlight
				}
			}
		}
		return in >= n
	})
}
