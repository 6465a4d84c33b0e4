package control_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portico-gw/portico/control"
)

// TestRunRefusesOpenPublisher: beyond loopback, a control plane without a
// publisher token does not start, and the listener it was given is
// closed.
func TestRunRefusesOpenPublisher(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "c.db")
	if err := control.Run(context.Background(), control.Options{StoreDSN: dsn, Listen: ":0", Logger: slog.New(slog.DiscardHandler)}); !errors.Is(err, control.ErrOpenPublisher) {
		t.Errorf("Run on :0 without a publisher token = %v, want ErrOpenPublisher", err)
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := control.Run(context.Background(), control.Options{StoreDSN: dsn, Listener: ln, Logger: slog.New(slog.DiscardHandler)}); !errors.Is(err, control.ErrOpenPublisher) {
		t.Errorf("Run on 0.0.0.0 without a publisher token = %v, want ErrOpenPublisher", err)
	}
	if _, err := ln.Accept(); err == nil {
		t.Error("Run left the listener it refused open")
	}
}

// TestRun: Run opens its store, serves the admin API and the extra
// handlers on one listener, calls OnServe with the plane, and returns nil
// once its context ends.
func TestRun(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan *control.Plane, 1)
	done := make(chan error, 1)
	go func() {
		done <- control.Run(ctx, control.Options{
			StoreDSN: "sqlite:" + filepath.Join(t.TempDir(), "c.db"), Listener: ln,
			Handlers: map[string]http.Handler{"/extra/": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "extra")
			})},
			OnServe: func(p *control.Plane) { served <- p }, Logger: slog.New(slog.DiscardHandler),
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case p := <-served:
		if p == nil || p.Distribution == nil {
			t.Fatal("OnServe got no plane")
		}
	case err := <-done:
		t.Fatalf("Run = %v before serving", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not serve")
	}
	base := "http://" + ln.Addr().String()
	resp, err := http.Get(base + "/extra/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "extra" {
		t.Errorf("GET /extra/x = %q, want the extra handler's answer", b)
	}
	// The admin API is there, and refuses a caller without a token.
	resp, err = http.Post(base+"/portico.admin.v1.AdminService/ListVersions", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("ListVersions without a token: %d, want 401", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v after its context ended, want nil", err)
		}
		done <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
