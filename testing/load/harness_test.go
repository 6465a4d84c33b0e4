package load_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/portico-gw/portico/testing/gobuild"
	"github.com/portico-gw/portico/testing/load"
	"github.com/portico-gw/portico/testing/srcdeps"
)

func TestMain(m *testing.M) {
	// Run re-executes this test binary as the backend and the baseline.
	load.MaybeRunChild()
	os.Exit(m.Run())
}

// TestHarnessSmoke runs a very short version of the whole harness and checks
// that every number it reports is there and sane. It asserts no performance
// target: on a shared machine those are for the report, not for a test.
func TestHarnessSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and builds the gateway")
	}
	// The harness builds the gateway in a subprocess; make the test depend
	// on what it builds from.
	srcdeps.Touch(t, "../..", ".go", "go.mod", "go.sum")
	const idle, slow = 1000, 50
	// The gateway is built as this test is (testing/gobuild): under the
	// race detector it runs several times slower, and gets more time.
	timeout := 45 * time.Second
	if gobuild.Race {
		timeout = 3 * time.Minute
	}
	rep, err := load.Run(t.Context(), load.Options{
		Rounds:      1,
		Duration:    time.Second,
		Warmup:      200 * time.Millisecond,
		Conns:       16,
		Rate:        1000,
		IdleConns:   idle,
		SlowClients: slow,
		SlowRate:    200,
		AuthKeys:    1000,
		Timeout:     timeout,
		Nginx:       "none",
		Log:         tlog{t},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", text.String())
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("json.Marshal(report): %v", err)
	}

	want := map[string]bool{}
	for _, target := range []string{"direct", "baseline", "gateway", "gateway-auth", "gateway-rl", "gateway-usage"} {
		for _, mode := range []string{"full", "1000/s"} {
			want[target+" "+mode] = true
		}
	}
	for _, p := range rep.Medians {
		name := p.Target + " " + p.Mode
		delete(want, name)
		if p.Errors != 0 {
			t.Errorf("%s: %d errors, first: %s", name, p.Errors, p.FirstError)
		}
		if p.Requests == 0 || p.RPS <= 0 {
			t.Errorf("%s: %d requests, %.0f req/s; want some", name, p.Requests, p.RPS)
		}
		if p.Latency.P50 <= 0 || p.Latency.P50 > p.Latency.P99 || p.Latency.P99 > p.Latency.Max {
			t.Errorf("%s: latency %+v is not ordered", name, p.Latency)
		}
		if p.BackendCPUPerRequest <= 0 {
			t.Errorf("%s: backend CPU per request %v, want > 0", name, p.BackendCPUPerRequest)
		}
		if proxied := p.Target != "direct"; proxied != (p.ProxyCPUPerRequest > 0) {
			t.Errorf("%s: proxy CPU per request %v", name, p.ProxyCPUPerRequest)
		}
	}
	for name := range want {
		t.Errorf("no median for %s", name)
	}
	if rep.Ratios.CPUPerRequestFull <= 0 || rep.Ratios.RPSFull <= 0 || len(rep.Ratios.Added) != 5 ||
		rep.Ratios.AuthCPUPerRequestFull <= 0 || rep.Ratios.AuthRPSFull <= 0 || rep.Ratios.AuthOverDirectRPSFull <= 0 ||
		rep.Ratios.LimitRPSFull <= 0 || rep.Ratios.LimitCPUPerRequestFull <= 0 || rep.Ratios.LimitCPUPerRequestRate <= 0 ||
		rep.Ratios.UsageCPUPerRequestFull <= 0 || rep.Ratios.UsageCPUPerRequestRate <= 0 || rep.Ratios.UsageRPSFull <= 0 {
		t.Errorf("ratios %+v incomplete", rep.Ratios)
	}

	if len(rep.Idle) != 2 {
		t.Errorf("idle measured for %d targets, want gateway and baseline", len(rep.Idle))
	}
	for _, i := range rep.Idle {
		if i.Conns != idle || i.Failed != 0 {
			t.Errorf("idle %s: %d connections open, %d failed (%s); want %d, 0", i.Target, i.Conns, i.Failed, i.Error, idle)
		}
		if i.RSSBefore <= 0 || i.RSSAfter <= 0 {
			t.Errorf("idle %s: RSS %d → %d not measured", i.Target, i.RSSBefore, i.RSSAfter)
		}
		if i.FDsAfter-i.FDsBefore < idle {
			t.Errorf("idle %s: the proxy holds %d more files, want ≥ %d", i.Target, i.FDsAfter-i.FDsBefore, idle)
		}
	}

	s := rep.Slow
	if s == nil {
		t.Fatal("no slow-headers result")
	}
	if s.CutOff != slow {
		t.Errorf("slow headers: %d of %d clients cut off (%v)", s.CutOff, slow, s.How)
	}
	if s.Traffic.Errors != 0 || s.Traffic.Requests == 0 {
		t.Errorf("slow headers: normal traffic %d requests, %d errors (%s); want some, 0", s.Traffic.Requests, s.Traffic.Errors, s.Traffic.FirstError)
	}
}

// tlog writes progress lines to the test log.
type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) {
	l.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
