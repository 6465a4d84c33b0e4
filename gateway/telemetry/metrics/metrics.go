// Package metrics is a node's Prometheus exposition, and the data plane's
// one importer of github.com/prometheus/client_golang. Its collectors
// read counters the node already keeps (the usage recorder's and
// shipper's stats) when scraped, so the request path pays nothing for
// them.
//
// Today it exports the usage pipeline, whose alert is the spool-full
// gauge: a node whose spool is full keeps serving and counting, but its
// usage trails until the spool drains.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/portico-gw/portico/gateway/usage"
	"github.com/portico-gw/portico/gateway/usage/ship"
)

// UsageStats reads the node's usage counters (gateway.Node.UsageStats);
// ok is false when the node counts no usage. It must be safe to call
// concurrently and must not block.
type UsageStats func() (rec usage.Stats, sh ship.Stats, ok bool)

// Handler serves the node's metrics in the Prometheus text format: the
// usage pipeline's (when stats is not nil), and the Go runtime's and the
// process's.
func Handler(stats UsageStats) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if stats != nil {
		reg.MustRegister(usageCollector{stats: stats})
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

var (
	spoolFull = prometheus.NewDesc("portico_usage_spool_full",
		"1 while a closed usage window waits for room in the spool (the node keeps counting; usage trails until it drains).", nil, nil)
	spoolFullTotal = prometheus.NewDesc("portico_usage_spool_full_episodes_total",
		"Times the usage spool became full.", nil, nil)
	windows = prometheus.NewDesc("portico_usage_windows_spooled_total",
		"Usage windows this process spooled (a window over 16 MiB takes several records).", nil, nil)
	recovered = prometheus.NewDesc("portico_usage_windows_recovered_total",
		"Usage windows a previous process left in the window file, spooled at start.", nil, nil)
	folded = prometheus.NewDesc("portico_usage_rows_folded_total",
		"Usage rows folded into an overflow row because their window had no room for them (counts stay exact).", nil, nil)
	late = prometheus.NewDesc("portico_usage_records_after_close_total",
		"Requests that finished after the usage recorder closed, not counted.", nil, nil)
	lastSeq = prometheus.NewDesc("portico_usage_spool_last_seq",
		"The sequence number of the last window spooled.", nil, nil)
	pending = prometheus.NewDesc("portico_usage_windows_pending",
		"Spooled usage windows not shipped yet.", nil, nil)
	shipped = prometheus.NewDesc("portico_usage_windows_shipped_total",
		"Usage windows shipped to the usage topic.", nil, nil)
	failures = prometheus.NewDesc("portico_usage_ship_failures_total",
		"Sends of usage windows that failed (retried; the windows wait in the spool).", nil, nil)
	trimmed = prometheus.NewDesc("portico_usage_spool_trimmed_seq",
		"The quota service's mark the spool was last trimmed at.", nil, nil)
	skipped = prometheus.NewDesc("portico_usage_windows_unshippable_total",
		"Spool records that could not be shipped: they no longer read back or decode.", nil, nil)
)

// usageCollector reports the usage stats at each scrape.
type usageCollector struct{ stats UsageStats }

func (c usageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{spoolFull, spoolFullTotal, windows, recovered, folded, late, lastSeq, pending, shipped, failures, trimmed, skipped} {
		ch <- d
	}
}

func (c usageCollector) Collect(ch chan<- prometheus.Metric) {
	rec, sh, ok := c.stats()
	if !ok {
		return
	}
	full := 0.0
	if rec.SpoolFull {
		full = 1
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(spoolFull, full)
	counter(spoolFullTotal, rec.SpoolFullTotal)
	counter(windows, rec.Windows)
	counter(recovered, rec.Recovered)
	counter(folded, rec.Folded)
	counter(late, rec.Late)
	gauge(lastSeq, float64(rec.LastSeq))
	gauge(pending, float64(sh.Pending))
	counter(shipped, sh.Shipped)
	counter(failures, sh.Failures)
	gauge(trimmed, float64(sh.Trimmed))
	counter(skipped, sh.Skipped)
}
