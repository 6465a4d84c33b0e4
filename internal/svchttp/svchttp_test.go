package svchttp_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-gw/portico/internal/svchttp"
)

// TestServeH2CAndDrain: a cleartext service answers HTTP/1.1 and h2c, and
// Serve returns nil once ctx ends, with the listener closed.
func TestServeH2CAndDrain(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		done <- svchttp.Serve(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, r.Proto)
		}), svchttp.ServeOptions{Grace: 100 * time.Millisecond})
	}()
	url := "http://" + ln.Addr().String() + "/"
	for _, tc := range []struct {
		client *http.Client
		want   string
	}{{svchttp.Client(url), "HTTP/2.0"}, {&http.Client{}, "HTTP/1.1"}} {
		resp, err := tc.client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != tc.want {
			t.Errorf("served %q, want %q", b, tc.want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v after ctx ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after ctx ended")
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("the listener still accepts after Serve returned")
	}
}

// TestServeListenerError: a listener that fails stops Serve with its error.
func TestServeListenerError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := svchttp.Serve(context.Background(), ln, http.NotFoundHandler(), svchttp.ServeOptions{}); err == nil {
		t.Error("Serve on a closed listener = nil, want its error")
	}
}

func TestLoopbackOnly(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:7000": true, "localhost:7000": true, "[::1]:7000": true, "127.1.2.3:1": true,
		":7000": false, "0.0.0.0:7000": false, "10.0.0.1:7000": false, "example.com:7000": false, "garbage": false,
	} {
		if got := svchttp.LoopbackOnly(addr); got != want {
			t.Errorf("LoopbackOnly(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestServeWaitsForHandlers: a handler still running when the
// connections are cut (its context canceled) has returned before Serve
// does: what it undoes on the way out still has the service's store.
func TestServeWaitsForHandlers(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var finished atomic.Bool
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		done <- svchttp.Serve(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done()
			time.Sleep(50 * time.Millisecond) // the withdrawal after a cut-off wait
			finished.Store(true)
		}), svchttp.ServeOptions{Grace: 10 * time.Millisecond})
	}()
	go func() {
		if resp, err := http.Get("http://" + ln.Addr().String() + "/"); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return")
	}
	if !finished.Load() {
		t.Error("Serve returned while a handler was still running")
	}
}

// TestCheckTLS: TLS needs both files, and files that make a certificate.
func TestCheckTLS(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]svchttp.ServeOptions{
		"key only":  {KeyFile: "k.pem"},
		"cert only": {CertFile: "c.pem"},
		"missing":   {CertFile: filepath.Join(t.TempDir(), "c.pem"), KeyFile: filepath.Join(t.TempDir(), "k.pem")},
	} {
		if err := o.Check(); err == nil {
			t.Errorf("%s: Check = nil, want an error", name)
		}
	}
	if err := (svchttp.ServeOptions{}).Check(); err != nil {
		t.Errorf("cleartext: Check = %v", err)
	}
}
