package main_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/testing/kafkatest"
)

// TestGatewayUpgradeUsage upgrades a `portico gateway -usage-dir
// -usage-kafka` node in place (SIGUSR2) under load: the new process counts
// into a slot of its own while the old one drains, then adopts the old
// slot and ships what is left in it. Every call answered before, during
// and after the upgrade is in exactly one window on the topic (distinct
// by node, spool, seq and part), and there are two spools. Wall time:
// ~5 s.
func TestGatewayUpgradeUsage(t *testing.T) {
	const topic = "usage.upgrade"
	kc := kafkatest.Start(t, 1, topic)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(backend.Close)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "portico.yaml")
	cfg := fmt.Sprintf("version: one\nclusters: [{name: c, protocol: PROTOCOL_HTTP1, endpoints: [{address: %q}]}]\nroutes: [{id: r, team: t, path: \"/{x=**}\", cluster: c, auth: {public: true, reviewer: tests}}]\nrate_limiting: {anonymous: {disabled: true}}\n",
		strings.TrimPrefix(backend.URL, "http://"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	out := newProcessLog(t)
	first := out.start(t, "gateway", "-config", cfgPath, "-listen", "public="+addr, "-node-id", "node-u",
		"-usage-dir", filepath.Join(dir, "usage"), "-usage-kafka", strings.Join(kc.Addrs(), ","),
		"-usage-topic", topic, "-usage-window", "200ms", "-drain-timeout", "10s")
	out.waitLine(t, regexp.MustCompile(`msg=listening pool=public`))

	// Clients that never retry, each on its own keep-alive connection;
	// an upgrade must fail none of their calls.
	var answered, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get("http://" + addr + "/x")
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				answered.Add(1)
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)
	waitCalls := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for want := answered.Load() + n; answered.Load() < want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("fewer than %d calls answered in 30 s", n)
			}
		}
	}
	waitCalls(200) // before
	if err := first.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	m := out.waitLine(t, regexp.MustCompile(`msg="upgrade: new process ready; this one drains" pid=(\d+)`))
	waitCalls(100) // during: both processes accept
	waitExit(t, first.Process.Pid)
	out.waitLine(t, regexp.MustCompile(`msg="usage: adopted a slot another process left"`))
	waitCalls(200) // after
	stopLoad()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d calls failed across the upgrade; first: %v", n, firstErr.Load())
	}
	total := uint64(answered.Load())
	pid, _ := strconv.Atoi(m[1])
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, pid)

	// Both processes have exited, each having shipped what it held: read
	// the topic to its end.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := kafkago.DialLeader(ctx, "tcp", kc.Addrs()[0], topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	end, err := conn.ReadLastOffset()
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: kc.Addrs(), Topic: topic, Partition: 0,
		MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 50 * time.Millisecond})
	t.Cleanup(func() { r.Close() })
	type id struct {
		node, spool string
		seq, part   uint64
	}
	seen := map[id]bool{}
	perSpool := map[string]uint64{}
	var counted uint64
	dups := 0
	for offset := int64(-1); offset < end-1; {
		msg, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("ReadMessage: %v (at offset %d of %d)", err, offset, end)
		}
		offset = msg.Offset
		w := &quotav1.UsageWindow{}
		if err := proto.Unmarshal(msg.Value, w); err != nil {
			t.Fatal(err)
		}
		k := id{w.GetNodeId(), w.GetSpoolId(), w.GetSeq(), uint64(w.GetPart())}
		if seen[k] {
			dups++
			continue
		}
		seen[k] = true
		counted += w.GetCounted()
		perSpool[w.GetSpoolId()] += w.GetCounted()
	}
	t.Logf("%d calls answered; the topic's distinct windows count %d, in %d spools %v; %d windows shipped twice",
		total, counted, len(perSpool), perSpool, dups)
	if counted != total {
		t.Errorf("the windows count %d calls, want %d", counted, total)
	}
	if len(perSpool) != 2 {
		t.Errorf("windows of %d spools, want 2 (a slot per process)", len(perSpool))
	}
}
