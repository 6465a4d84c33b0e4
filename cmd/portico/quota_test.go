package main_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/gen/portico/quota/v1/quotav1connect"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/testing/kafkatest"
)

// TestQuotaRole runs `portico quota` on SQLite consuming a kafkatest
// topic: a window produced to the topic is in the totals the API
// answers to the platform token, and to no other caller; SIGTERM stops
// it cleanly.
func TestQuotaRole(t *testing.T) {
	dir := t.TempDir()
	const token = "quota-role-test-platform-token-0123456789"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const topic = "portico.usage"
	kc := kafkatest.Start(t, 2, topic)
	addr := freeAddr(t)
	p := start(t, "quota", "-listen", addr, "-store", "sqlite:"+filepath.Join(dir, "quota.db"), "-token-file", tokenFile,
		"-kafka", strings.Join(kc.Addrs(), ","), "-kafka-topic", topic)
	p.waitLine(t, regexp.MustCompile(`quota service listening`))

	// A window of now: the service's reconciler closes past periods as
	// soon as it starts, and a window of one would be a late window.
	start := time.Now().UTC().Truncate(10 * time.Second)
	period := start.Format("2006-01")
	w := &quotav1.UsageWindow{NodeId: "node-1", SpoolId: "0123456789abcdef", Seq: 1, Parts: 1,
		Start: timestamppb.New(start), End: timestamppb.New(start.Add(10 * time.Second)), Period: period,
		Rows:    []*quotav1.UsageRow{{Caller: &quotav1.Caller{KeyId: "k1", AppId: "app-1"}, Product: "orders", StatusClass: 2, Counted: 3, Billable: 3}},
		Counted: 3, Billable: 3, PeriodCounted: 3, PeriodBillable: 3}
	b, err := proto.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kw := &kafka.Writer{Addr: kafka.TCP(kc.Addrs()...), Topic: topic, RequiredAcks: kafka.RequireAll, Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond}
	t.Cleanup(func() { _ = kw.Close() })
	if err := kw.WriteMessages(ctx, kafka.Message{Key: []byte("node-1"), Value: b}); err != nil {
		t.Fatalf("WriteMessages: %v", err)
	}

	api := quotav1connect.NewQuotaServiceClient(http.DefaultClient, "http://"+addr, connect.WithInterceptors(svcauth.Interceptor(token)))
	req := &quotav1.GetUsageRequest{Subject: "key:k1", Product: "orders", Period: period}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := api.GetUsage(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatalf("GetUsage: %v", err)
		}
		if tot := resp.Msg.GetTotals(); len(tot) == 1 && tot[0].GetCounted() == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GetUsage = %v, want the window's 3 calls", resp.Msg.GetTotals())
		}
		time.Sleep(20 * time.Millisecond)
	}
	anon := quotav1connect.NewQuotaServiceClient(http.DefaultClient, "http://"+addr)
	if _, err := anon.GetUsage(ctx, connect.NewRequest(req)); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("GetUsage without the token: %v, want Unauthenticated", err)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("exit after SIGTERM: %v, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("portico quota did not exit within 30s of SIGTERM")
	}
}

// TestQuotaRoleNeedsToken: `portico quota` refuses to start without a
// caller token: the quota API is never open.
func TestQuotaRoleNeedsToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, portico(t), "quota", "-listen", "127.0.0.1:0", "-store", "sqlite:"+filepath.Join(t.TempDir(), "q.db")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-token-file is required") {
		t.Errorf("portico quota without a token: %v, output %q; want a refusal", err, out)
	}
}
