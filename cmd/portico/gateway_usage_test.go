package main_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/testing/kafkatest"
)

// TestGatewayUsageFlags: `portico gateway -usage-dir -usage-kafka` counts
// the calls it serves and ships the windows to the topic, keyed by
// -node-id.
func TestGatewayUsageFlags(t *testing.T) {
	kc := kafkatest.Start(t, 1, "usage.test")
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(backend.Close)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "portico.yaml")
	cfg := fmt.Sprintf("version: one\nclusters: [{name: c, protocol: PROTOCOL_HTTP1, endpoints: [{address: %q}]}]\nroutes: [{id: r, team: t, path: \"/{x=**}\", cluster: c, auth: {public: true, reviewer: tests}}]\nrate_limiting: {anonymous: {disabled: true}}\n",
		strings.TrimPrefix(backend.URL, "http://"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, debug := freeAddr(t), freeAddr(t)
	p := start(t, "gateway", "-config", cfgPath, "-listen", "public="+addr, "-node-id", "node-7",
		"-usage-dir", filepath.Join(dir, "usage"), "-usage-kafka", strings.Join(kc.Addrs(), ","),
		"-usage-topic", "usage.test", "-usage-window", "200ms", "-debug-listen", debug)
	p.waitLine(t, regexp.MustCompile(`msg=listening pool=public`))
	for range 5 {
		if code, _ := get(t, "http://"+addr+"/x"); code != 200 {
			t.Fatalf("GET = %d, want 200", code)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: kc.Addrs(), Topic: "usage.test", Partition: 0,
		MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 50 * time.Millisecond})
	t.Cleanup(func() { r.Close() })
	var counted uint64
	for counted < 5 {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("ReadMessage: %v (counted %d of 5)", err, counted)
		}
		w := &quotav1.UsageWindow{}
		if err := proto.Unmarshal(m.Value, w); err != nil {
			t.Fatal(err)
		}
		if string(m.Key) != "node-7" || w.GetNodeId() != "node-7" {
			t.Fatalf("a window keyed %q of node %q, want node-7", m.Key, w.GetNodeId())
		}
		counted += w.GetCounted()
	}
	if counted != 5 {
		t.Errorf("windows count %d calls, want 5", counted)
	}

	// The debug listener serves the usage series, the spool-full alert
	// among them.
	code, body := get(t, "http://"+debug+"/metrics")
	if code != 200 || !strings.Contains(body, "portico_usage_spool_full 0\n") || !strings.Contains(body, "portico_usage_windows_shipped_total ") {
		t.Errorf("GET /metrics = %d, want 200 with portico_usage_spool_full 0 and portico_usage_windows_shipped_total:\n%s", code, body)
	}
}

func TestGatewayUsageKafkaNeedsDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, portico(t), "gateway", "-config", "x.yaml", "-usage-kafka", "127.0.0.1:9092").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-usage-dir") {
		t.Errorf("-usage-kafka without -usage-dir: %v, output %q; want a refusal naming -usage-dir", err, out)
	}
}
