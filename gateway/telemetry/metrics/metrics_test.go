package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/telemetry/metrics"
	"github.com/portico-gw/portico/gateway/usage"
	"github.com/portico-gw/portico/gateway/usage/ship"
)

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d\n%s", resp.StatusCode, b)
	}
	return string(b)
}

// TestUsageMetrics checks the usage pipeline's series, the spool-full
// alert among them, read from the stats at each scrape.
func TestUsageMetrics(t *testing.T) {
	rec := usage.Stats{Windows: 7, Recovered: 1, SpoolFull: true, SpoolFullTotal: 2, Folded: 3, Late: 4, LastSeq: 9}
	sh := ship.Stats{Shipped: 5, Pending: 4, Failures: 6, Trimmed: 5, Skipped: 0}
	h := metrics.Handler(func() (usage.Stats, ship.Stats, bool) { return rec, sh, true })
	body := scrape(t, h)
	for _, want := range []string{
		"portico_usage_spool_full 1\n",
		"portico_usage_spool_full_episodes_total 2\n",
		"portico_usage_windows_spooled_total 7\n",
		"portico_usage_windows_recovered_total 1\n",
		"portico_usage_rows_folded_total 3\n",
		"portico_usage_records_after_close_total 4\n",
		"portico_usage_spool_last_seq 9\n",
		"portico_usage_windows_pending 4\n",
		"portico_usage_windows_shipped_total 5\n",
		"portico_usage_ship_failures_total 6\n",
		"portico_usage_spool_trimmed_seq 5\n",
		"portico_usage_windows_unshippable_total 0\n",
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the scrape lacks %q", want)
		}
	}

	rec.SpoolFull = false
	if body := scrape(t, h); !strings.Contains(body, "portico_usage_spool_full 0\n") {
		t.Errorf("after the spool drained, the scrape lacks portico_usage_spool_full 0")
	}
}

// TestNoUsage checks that a node that counts no usage exports no usage
// series (rather than zeros that look like a healthy pipeline).
func TestNoUsage(t *testing.T) {
	body := scrape(t, metrics.Handler(func() (usage.Stats, ship.Stats, bool) { return usage.Stats{}, ship.Stats{}, false }))
	if strings.Contains(body, "portico_usage_") {
		t.Errorf("a node without usage exports usage series:\n%s", body)
	}
	if body := scrape(t, metrics.Handler(nil)); !strings.Contains(body, "go_goroutines ") {
		t.Errorf("Handler(nil) lacks the runtime's series")
	}
}
