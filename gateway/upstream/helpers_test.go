package upstream_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/testclock"
)

// fakeClock is a settable Options.Now.
type fakeClock = testclock.Clock

func newFakeClock() *fakeClock {
	return testclock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
}

// testOptions logs to the test's output and uses clock when non-nil.
func testOptions(t testing.TB, clock *fakeClock) upstream.Options {
	opts := upstream.Options{Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if clock != nil {
		opts.Now = clock.Now
	}
	return opts
}

// build builds one snapshot's clusters on a fresh registry closed at cleanup.
func build(t testing.TB, opts upstream.Options, cfgs ...*configv1.Cluster) (*upstream.Registry, *upstream.Set) {
	t.Helper()
	r := upstream.NewRegistry(opts)
	t.Cleanup(r.Close)
	s, err := r.Build(cfgs)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return r, s
}

// cluster is a config with a generous connect timeout: TLS handshakes
// under -race on a loaded 2-core machine can take longer than the 2 s default.
func cluster(name string, p configv1.Protocol, addrs ...string) *configv1.Cluster {
	c := &configv1.Cluster{Name: name, Protocol: p, ConnectTimeout: dur(10 * time.Second)}
	for _, a := range addrs {
		c.Endpoints = append(c.Endpoints, &configv1.Endpoint{Address: a})
	}
	return c
}

// fakeAddrs returns n addresses for clusters whose endpoints are never dialed.
func fakeAddrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("192.0.2.%d:8080", i+1) // TEST-NET-1
	}
	return out
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// pickAddr picks until the endpoint with addr comes up; the other picks are
// released as Canceled, which leaves no trace on the endpoints.
func pickAddr(t testing.TB, c *upstream.Cluster, addr string) *upstream.Endpoint {
	t.Helper()
	for range 10000 {
		e, err := c.Pick()
		if err != nil {
			t.Fatalf("Pick() error %v, want an endpoint", err)
		}
		if e.Address() == addr {
			return e
		}
		e.Done(upstream.Canceled)
	}
	t.Fatalf("Pick() never returned %s", addr)
	return nil
}

func status(t testing.TB, c *upstream.Cluster, addr string) upstream.EndpointStatus {
	t.Helper()
	for _, s := range c.Endpoints() {
		if s.Address == addr {
			return s
		}
	}
	t.Fatalf("no endpoint %s in %v", addr, c.Endpoints())
	return upstream.EndpointStatus{}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// get sends GET / over the cluster's transport to its first endpoint and
// returns the body.
func get(t testing.TB, c *upstream.Cluster, addr string) (string, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.Scheme()+"://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Transport().RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// healthGoroutines counts the health-check loops of this package: the only
// goroutines a Cluster starts. (The creator is matched, not the function: a
// goroutine that has not run yet shows only a compiler-made wrapper.)
func healthGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("created by github.com/portico-gw/portico/gateway/upstream.(*Cluster).start"))
		}
		buf = make([]byte, 2*len(buf))
	}
}
