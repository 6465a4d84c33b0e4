package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// runNode runs node until the test ends and returns what Run returned
// then, on done.
func runNode(t *testing.T, node *gateway.Node) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx) }()
	var err error
	stopped := false
	stop = func() error {
		if !stopped {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}
			stopped = true
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// configYAML is a config file that routes every path to the HTTP/1.1
// backend at addr.
func configYAML(version, addr string) string {
	return fmt.Sprintf(`version: %q
clusters:
  - name: backend
    protocol: PROTOCOL_HTTP1
    endpoints: [{address: %q}]
routes:
  - id: all
    team: t
    path: /{rest=**}
    cluster: backend
    auth: {public: true, reviewer: tests}
`, version, addr)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunConfigFile: a node given a config file serves it from its first
// request (Run applies it before it serves), reloads it when it changes
// and on Reload, and Run returns nil once its context ends.
func TestRunConfigFile(t *testing.T) {
	t.Parallel()
	a, b := namedBackend(t, "a"), namedBackend(t, "b")
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(configYAML("v1", a)), 0o644); err != nil {
		t.Fatal(err)
	}
	reload := make(chan struct{}, 1)
	node, err := gateway.New(gateway.Options{
		Listeners:  []gateway.Listener{{Addr: "127.0.0.1:0"}},
		ConfigFile: &gateway.ConfigFileOptions{Path: path, Reload: reload},
	})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + node.Addr("public").String() + "/x"
	stop := runNode(t, node)
	// The listener is bound before Run: a request sent now waits for the
	// node to serve, which it does only with the file applied.
	if code, body := get(t, url); code != 200 || body != "a /x" {
		t.Fatalf("first request: %d %q, want 200 from a", code, body)
	}
	// The watcher polls every second: a changed file is served soon after.
	if err := os.WriteFile(path+".tmp", []byte(configYAML("v2", b)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	gatewaytest.WaitFor(t, 10*time.Second, "the changed file served", func() bool {
		_, body := get(t, url)
		return body == "b /x"
	})
	if err := stop(); err != nil {
		t.Errorf("Run = %v after its context ended, want nil", err)
	}
}

// TestRunConfigFileBad: a config file that does not load at start is
// fatal, and the node's listeners are released.
func TestRunConfigFileBad(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("routes: [{id: r, path: /x, cluster: nowhere}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	node, err := gateway.New(gateway.Options{
		Listeners:  []gateway.Listener{{Addr: "127.0.0.1:0"}},
		ConfigFile: &gateway.ConfigFileOptions{Path: path},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := node.Addr("public").String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := node.Run(ctx); err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("Run with a bad config file = %v, want the compile error naming the cluster", err)
	}
	if _, err := http.Get("http://" + addr + "/x"); err == nil {
		t.Error("the node's listener still answers after Run failed")
	}
}

// TestNewSourcesRefused: sources that cannot work are refused by New.
func TestNewSourcesRefused(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string]gateway.Options{
		"file and control":      {ConfigFile: &gateway.ConfigFileOptions{Path: "x.yaml"}, Control: &gateway.ControlOptions{URL: "http://127.0.0.1:1"}},
		"file without a path":   {ConfigFile: &gateway.ConfigFileOptions{}},
		"control without a URL": {Control: &gateway.ControlOptions{}},
		"key snapshot unsigned": {KeySnapshot: &gateway.KeySnapshotOptions{URL: "http://127.0.0.1:1/v1/key-snapshot"}},
		"key snapshot, no URL":  {KeySnapshot: &gateway.KeySnapshotOptions{}},
	} {
		opts.Listeners = []gateway.Listener{{Addr: "127.0.0.1:0"}}
		if node, err := gateway.New(opts); err == nil {
			node.Close()
			t.Errorf("%s: New = nil error, want a refusal", name)
		}
	}
}

// TestRunStopsControlStream: the stream to the control plane is Run's
// own: once Run has returned, the control plane has seen it end.
func TestRunStopsControlStream(t *testing.T) {
	t.Parallel()
	opened := make(chan struct{}, 16)
	ended := make(chan struct{}, 16)
	ctl := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opened <- struct{}{}
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		ended <- struct{}{}
	}))
	gatewaytest.StartH2C(t, ctl)
	node, err := gateway.New(gateway.Options{
		Listeners: []gateway.Listener{{Addr: "127.0.0.1:0"}},
		Control:   &gateway.ControlOptions{URL: ctl.URL, NodeID: "n1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := runNode(t, node)
	// Both streams, the snapshot's and the fast lane's.
	for range 2 {
		select {
		case <-opened:
		case <-time.After(30 * time.Second):
			t.Fatal("the node did not open its streams")
		}
	}
	if err := stop(); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	for range 2 {
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("a stream to the control plane outlived Run")
		}
	}
}
