package load

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Phase is one target under one kind of load, in one round or (Round 0) the
// median over the rounds, each figure on its own.
type Phase struct {
	Target string `json:"target"`
	// Mode is "full" (closed loop, as fast as the target answers) or
	// "N/s" (open loop at N requests per second).
	Mode  string  `json:"mode"`
	Rate  float64 `json:"rate,omitempty"`
	Round int     `json:"round"`
	// Requests were answered; Errors are non-2xx answers, transport
	// errors and requests never sent in time.
	Requests   uint64            `json:"requests"`
	Errors     uint64            `json:"errors"`
	FirstError string            `json:"first_error,omitempty"`
	Statuses   map[string]uint64 `json:"statuses,omitempty"`
	Seconds    float64           `json:"seconds"`
	// RPS counts 2xx answers per second.
	RPS     float64 `json:"rps"`
	Latency Latency `json:"latency_us"`
	// SendLagP99 is the 99th percentile of how late the harness's timer
	// sent open-loop requests on free connections (not part of Latency).
	SendLagP99 float64 `json:"send_lag_p99_us,omitempty"`
	// ProxyCPUPerRequest is the proxy process's CPU time (all threads)
	// divided by the requests it answered; zero for the direct target.
	ProxyCPUPerRequest float64 `json:"proxy_cpu_per_request_us,omitempty"`
	// ProxyCPUShare is the proxy's CPU time over wall time (1 = one core
	// busy); ProxyWaitShare the time its threads were runnable but waited
	// for a CPU over wall time, which shows competition for its core.
	ProxyCPUShare  float64 `json:"proxy_cpu_share,omitempty"`
	ProxyWaitShare float64 `json:"proxy_wait_share,omitempty"`
	// BackendCPUPerRequest is the backend's CPU time per request, and
	// Core0Share the backend's and the load generator's CPU time over wall
	// time: near 1 when pinned, core 0 was the bottleneck.
	BackendCPUPerRequest float64 `json:"backend_cpu_per_request_us"`
	Core0Share           float64 `json:"core0_cpu_share"`
	// OthersShare is the CPU time everything else on the machine used
	// over wall time, in cores: processes competing with the targets (and
	// kernel work charged to no process).
	OthersShare float64 `json:"others_cpu_share"`
	// PreciseCPU says CPU times are from schedstat (ns), not clock ticks.
	PreciseCPU bool `json:"precise_cpu"`
}

// Latency percentiles in microseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func latencyOf(h *Histogram) Latency {
	return Latency{
		P50:  us(h.Quantile(0.50)),
		P90:  us(h.Quantile(0.90)),
		P99:  us(h.Quantile(0.99)),
		P999: us(h.Quantile(0.999)),
		Max:  us(h.Max()),
		Mean: us(h.Mean()),
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Pinning is where the processes ran, as the kernel reported their CPU
// affinity after they started.
type Pinning struct {
	Pinned  bool   `json:"pinned"`
	Why     string `json:"why,omitempty"`
	Taskset string `json:"taskset,omitempty"`
	// CPUs maps each process to its Cpus_allowed_list.
	CPUs map[string]string `json:"cpus"`
	// ProxyGOMAXPROCS is the GOMAXPROCS the Go proxies were given ("" for
	// the runtime's default).
	ProxyGOMAXPROCS string `json:"proxy_gomaxprocs,omitempty"`
}

// Ratios are the comparisons the design targets are stated in.
type Ratios struct {
	// CPUPerRequest is gateway ÷ baseline CPU per request at full load
	// and at the fixed rate (target ≤ 1).
	CPUPerRequestFull float64 `json:"gateway_over_baseline_cpu_per_request_full"`
	CPUPerRequestRate float64 `json:"gateway_over_baseline_cpu_per_request_rate"`
	// RPSFull is gateway ÷ baseline requests per second at full load.
	RPSFull float64 `json:"gateway_over_baseline_rps_full"`
	// Added is each proxy's latency over the direct target's at the fixed
	// rate, in microseconds (targets for the gateway: p50 < 300, p99 < 2000).
	Added map[string]AddedLatency `json:"added_latency_us"`
	// GatewayOverNginxP50 is gateway p50 − nginx p50 at the fixed rate
	// (target ≤ 25 µs), when nginx ran.
	GatewayOverNginxP50 *float64 `json:"gateway_minus_nginx_p50_us,omitempty"`
	// AuthCPUPerRequest is gateway-auth ÷ gateway CPU per request at full
	// load and at the fixed rate: what API key checks cost, when it ran.
	AuthCPUPerRequestFull float64 `json:"auth_over_gateway_cpu_per_request_full,omitempty"`
	AuthCPUPerRequestRate float64 `json:"auth_over_gateway_cpu_per_request_rate,omitempty"`
	// AuthRPSFull is gateway-auth ÷ gateway requests per second at full
	// load, and AuthOverDirectRPSFull gateway-auth ÷ direct.
	AuthRPSFull           float64 `json:"auth_over_gateway_rps_full,omitempty"`
	AuthOverDirectRPSFull float64 `json:"auth_over_direct_rps_full,omitempty"`
	// LimitRPSFull is gateway-rl ÷ gateway-auth requests per second at
	// full load (goal ≥ 0.95), LimitCPUPerRequest the same for CPU per
	// request at full load and at the fixed rate: what a rate limit costs.
	LimitRPSFull           float64 `json:"rl_over_auth_rps_full,omitempty"`
	LimitCPUPerRequestFull float64 `json:"rl_over_auth_cpu_per_request_full,omitempty"`
	LimitCPUPerRequestRate float64 `json:"rl_over_auth_cpu_per_request_rate,omitempty"`
	// UsageCPUPerRequest is gateway-usage ÷ the target it adds usage to
	// (gateway-rl, else gateway-auth) for CPU per request at full load and
	// at the fixed rate (goal < 1.03), UsageRPSFull the same for requests
	// per second at full load: what counting usage costs.
	UsageCPUPerRequestFull float64 `json:"usage_cpu_per_request_full,omitempty"`
	UsageCPUPerRequestRate float64 `json:"usage_cpu_per_request_rate,omitempty"`
	UsageRPSFull           float64 `json:"usage_rps_full,omitempty"`
}

// AddedLatency is a proxy's latency minus the direct target's.
type AddedLatency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

// ProcessLog is what a child wrote to stderr.
type ProcessLog struct {
	Process string   `json:"process"`
	Lines   int      `json:"lines"`
	Last    []string `json:"last,omitempty"`
}

// Report is everything one Run measured. It marshals to JSON as is.
type Report struct {
	Config  Config       `json:"config"`
	Pinning Pinning      `json:"pinning"`
	Notes   []string     `json:"notes,omitempty"`
	Phases  []Phase      `json:"phases"`
	Medians []Phase      `json:"medians"`
	Ratios  Ratios       `json:"ratios"`
	Idle    []IdleResult `json:"idle,omitempty"`
	Slow    *SlowResult  `json:"slow_headers,omitempty"`
	Logs    []ProcessLog `json:"logs"`
}

// Config is the shape of the run.
type Config struct {
	Rounds          int      `json:"rounds"`
	PhaseSeconds    float64  `json:"phase_seconds"`
	Conns           int      `json:"conns"`
	Rate            int      `json:"rate"`
	Routes          int      `json:"routes"`
	AuthKeys        int      `json:"auth_keys"`
	Targets         []string `json:"targets"`
	BaselineBufPool bool     `json:"baseline_buffer_pool"`
	Started         string   `json:"started"`
	LoadAverage     string   `json:"load_average_at_start"`
	GoVersion       string   `json:"go_version"`
}

// median returns the median of each figure of phases, which are the rounds
// of one target and mode.
func median(phases []Phase) Phase {
	m := phases[0]
	m.Round = 0
	m.FirstError = ""
	m.Statuses = nil
	for _, p := range phases {
		if m.FirstError == "" {
			m.FirstError = p.FirstError
		}
		m.PreciseCPU = m.PreciseCPU && p.PreciseCPU
	}
	med := func(get func(*Phase) float64) float64 {
		v := make([]float64, len(phases))
		for i := range phases {
			v[i] = get(&phases[i])
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	medU := func(get func(*Phase) uint64) uint64 {
		return uint64(med(func(p *Phase) float64 { return float64(get(p)) }))
	}
	m.Requests = medU(func(p *Phase) uint64 { return p.Requests })
	m.Errors = medU(func(p *Phase) uint64 { return p.Errors })
	m.Seconds = med(func(p *Phase) float64 { return p.Seconds })
	m.RPS = med(func(p *Phase) float64 { return p.RPS })
	m.Latency = Latency{
		P50:  med(func(p *Phase) float64 { return p.Latency.P50 }),
		P90:  med(func(p *Phase) float64 { return p.Latency.P90 }),
		P99:  med(func(p *Phase) float64 { return p.Latency.P99 }),
		P999: med(func(p *Phase) float64 { return p.Latency.P999 }),
		Max:  med(func(p *Phase) float64 { return p.Latency.Max }),
		Mean: med(func(p *Phase) float64 { return p.Latency.Mean }),
	}
	m.SendLagP99 = med(func(p *Phase) float64 { return p.SendLagP99 })
	m.ProxyCPUPerRequest = med(func(p *Phase) float64 { return p.ProxyCPUPerRequest })
	m.ProxyCPUShare = med(func(p *Phase) float64 { return p.ProxyCPUShare })
	m.ProxyWaitShare = med(func(p *Phase) float64 { return p.ProxyWaitShare })
	m.BackendCPUPerRequest = med(func(p *Phase) float64 { return p.BackendCPUPerRequest })
	m.Core0Share = med(func(p *Phase) float64 { return p.Core0Share })
	m.OthersShare = med(func(p *Phase) float64 { return p.OthersShare })
	return m
}

// summarise fills in Medians and Ratios from Phases.
func (r *Report) summarise(targets, modes []string) {
	r.Medians = nil
	for _, mode := range modes {
		for _, t := range targets {
			var ps []Phase
			for _, p := range r.Phases {
				if p.Target == t && p.Mode == mode {
					ps = append(ps, p)
				}
			}
			if len(ps) > 0 {
				r.Medians = append(r.Medians, median(ps))
			}
		}
	}
	full, rate := modes[0], modes[len(modes)-1]
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	gf, bf := r.median("gateway", full), r.median("baseline", full)
	gr, br := r.median("gateway", rate), r.median("baseline", rate)
	if gf != nil && bf != nil {
		r.Ratios.CPUPerRequestFull = ratio(gf.ProxyCPUPerRequest, bf.ProxyCPUPerRequest)
		r.Ratios.RPSFull = ratio(gf.RPS, bf.RPS)
	}
	if gr != nil && br != nil {
		r.Ratios.CPUPerRequestRate = ratio(gr.ProxyCPUPerRequest, br.ProxyCPUPerRequest)
	}
	r.Ratios.Added = map[string]AddedLatency{}
	if d := r.median("direct", rate); d != nil {
		for _, t := range targets {
			if p := r.median(t, rate); p != nil && t != "direct" {
				r.Ratios.Added[t] = AddedLatency{P50: p.Latency.P50 - d.Latency.P50, P99: p.Latency.P99 - d.Latency.P99}
			}
		}
	}
	af, ar := r.median("gateway-auth", full), r.median("gateway-auth", rate)
	if af != nil && gf != nil {
		r.Ratios.AuthCPUPerRequestFull = ratio(af.ProxyCPUPerRequest, gf.ProxyCPUPerRequest)
		r.Ratios.AuthRPSFull = ratio(af.RPS, gf.RPS)
	}
	if af != nil {
		if df := r.median("direct", full); df != nil {
			r.Ratios.AuthOverDirectRPSFull = ratio(af.RPS, df.RPS)
		}
	}
	if ar != nil && gr != nil {
		r.Ratios.AuthCPUPerRequestRate = ratio(ar.ProxyCPUPerRequest, gr.ProxyCPUPerRequest)
	}
	lf, lr := r.median("gateway-rl", full), r.median("gateway-rl", rate)
	if lf != nil && af != nil {
		r.Ratios.LimitRPSFull = ratio(lf.RPS, af.RPS)
		r.Ratios.LimitCPUPerRequestFull = ratio(lf.ProxyCPUPerRequest, af.ProxyCPUPerRequest)
	}
	if lr != nil && ar != nil {
		r.Ratios.LimitCPUPerRequestRate = ratio(lr.ProxyCPUPerRequest, ar.ProxyCPUPerRequest)
	}
	uf, ur := r.median("gateway-usage", full), r.median("gateway-usage", rate)
	// gateway-usage is gateway-rl counting usage, or gateway-auth when
	// the run has no gateway-rl.
	basef, baser := lf, lr
	if basef == nil {
		basef, baser = af, ar
	}
	if uf != nil && basef != nil {
		r.Ratios.UsageCPUPerRequestFull = ratio(uf.ProxyCPUPerRequest, basef.ProxyCPUPerRequest)
		r.Ratios.UsageRPSFull = ratio(uf.RPS, basef.RPS)
	}
	if ur != nil && baser != nil {
		r.Ratios.UsageCPUPerRequestRate = ratio(ur.ProxyCPUPerRequest, baser.ProxyCPUPerRequest)
	}
	if n := r.median("nginx", rate); n != nil && gr != nil {
		gap := gr.Latency.P50 - n.Latency.P50
		r.Ratios.GatewayOverNginxP50 = &gap
	}
}

func (r *Report) median(target, mode string) *Phase {
	for i := range r.Medians {
		if r.Medians[i].Target == target && r.Medians[i].Mode == mode {
			return &r.Medians[i]
		}
	}
	return nil
}

// WriteText writes the report for people: the medians table, the ratios
// against the design targets, idle connections and slow headers.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "portico-load: %d round(s) × %s per phase, %d connections, open loop %d req/s, %d routes; medians over rounds\n",
		c.Rounds, time.Duration(c.PhaseSeconds*float64(time.Second)), c.Conns, c.Rate, c.Routes)
	if r.Pinning.Pinned {
		fmt.Fprintf(&b, "pinning: on (taskset); CPUs allowed: %s; proxies GOMAXPROCS=%s\n", cpuList(r.Pinning.CPUs), r.Pinning.ProxyGOMAXPROCS)
	} else {
		fmt.Fprintf(&b, "pinning: off (%s); CPUs allowed: %s\n", r.Pinning.Why, cpuList(r.Pinning.CPUs))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	b.WriteByte('\n')

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tmode\treq/s\terr\tp50\tp90\tp99\tp99.9\tcpu/req\tproxy cpu\twait\tcore0 cpu\tothers\t")
	for _, p := range r.Medians {
		cpu, share, wait := "-", "-", "-"
		if p.ProxyCPUPerRequest > 0 {
			cpu = fmtUS(p.ProxyCPUPerRequest)
			share = fmt.Sprintf("%.0f%%", 100*p.ProxyCPUShare)
			wait = fmt.Sprintf("%.0f%%", 100*p.ProxyWaitShare)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f%%\t%.0f%%\t\n",
			p.Target, p.Mode, p.RPS, p.Errors, fmtUS(p.Latency.P50), fmtUS(p.Latency.P90),
			fmtUS(p.Latency.P99), fmtUS(p.Latency.P999), cpu, share, wait, 100*p.Core0Share, 100*p.OthersShare)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("(cpu/req: the proxy's CPU time per request, all threads; proxy cpu: its CPU time over wall time; wait: time its\n" +
		"threads were runnable but not running; core0 cpu: backend + load generator; others: everything else on the machine;\n" +
		"percentages of one core's wall time)\n\n")

	if c.Rounds > 1 {
		for _, mode := range modesOf(r.Medians) {
			var parts []string
			for _, t := range c.Targets {
				var v []string
				for _, p := range r.Phases {
					if p.Target == t && p.Mode == mode && p.ProxyCPUPerRequest > 0 {
						v = append(v, fmtUS(p.ProxyCPUPerRequest))
					}
				}
				if len(v) > 0 {
					parts = append(parts, t+" "+strings.Join(v, " "))
				}
			}
			if len(parts) > 0 {
				fmt.Fprintf(&b, "cpu/req by round, %s: %s\n", mode, strings.Join(parts, "; "))
			}
		}
	}
	for _, p := range r.Medians {
		if p.FirstError != "" {
			fmt.Fprintf(&b, "errors: %s %s: %s\n", p.Target, p.Mode, p.FirstError)
		}
	}

	ra := r.Ratios
	rateMode := fmt.Sprintf("%d/s", c.Rate)
	if ra.CPUPerRequestFull > 0 {
		fmt.Fprintf(&b, "gateway/baseline CPU per request: %.2f at full load, %.2f at %d req/s (target ≤ 1.00)\n",
			ra.CPUPerRequestFull, ra.CPUPerRequestRate, c.Rate)
	}
	if ra.RPSFull > 0 {
		fmt.Fprintf(&b, "gateway/baseline req/s at full load: %.2f", ra.RPSFull)
		g, bl := r.median("gateway", "full"), r.median("baseline", "full")
		if g != nil && bl != nil && g.ProxyCPUPerRequest > 0 && bl.ProxyCPUPerRequest > 0 {
			fmt.Fprintf(&b, " (per core-second of proxy CPU: gateway %.0f, baseline %.0f req/s)", 1e6/g.ProxyCPUPerRequest, 1e6/bl.ProxyCPUPerRequest)
		}
		b.WriteByte('\n')
	}
	if len(ra.Added) > 0 {
		var parts []string
		for _, t := range c.Targets {
			if a, ok := ra.Added[t]; ok {
				parts = append(parts, fmt.Sprintf("%s p50 %s, p99 %s", t, fmtDelta(a.P50), fmtDelta(a.P99)))
			}
		}
		fmt.Fprintf(&b, "added latency at %s (vs direct): %s (targets: gateway p50 < +0.30 ms, p99 < +2 ms)\n", rateMode, strings.Join(parts, "; "))
	}
	if ra.AuthCPUPerRequestFull > 0 {
		fmt.Fprintf(&b, "API key auth (%d keys): gateway-auth/gateway CPU per request %.2f at full load, %.2f at %d req/s; req/s at full load %.2f× the gateway's, %.2f× direct\n",
			c.AuthKeys, ra.AuthCPUPerRequestFull, ra.AuthCPUPerRequestRate, c.Rate, ra.AuthRPSFull, ra.AuthOverDirectRPSFull)
	}
	if ra.LimitRPSFull > 0 {
		fmt.Fprintf(&b, "rate limit (per caller, never refusing): gateway-rl/gateway-auth req/s at full load %.2f (goal ≥ 0.95); CPU per request %.2f at full load, %.2f at %d req/s\n",
			ra.LimitRPSFull, ra.LimitCPUPerRequestFull, ra.LimitCPUPerRequestRate, c.Rate)
	}
	if ra.UsageCPUPerRequestFull > 0 {
		fmt.Fprintf(&b, "usage counting: gateway-usage/its base CPU per request %.3f at full load, %.3f at %d req/s (goal < 1.03); req/s at full load %.3f\n",
			ra.UsageCPUPerRequestFull, ra.UsageCPUPerRequestRate, c.Rate, ra.UsageRPSFull)
	}
	if ra.GatewayOverNginxP50 != nil {
		fmt.Fprintf(&b, "gateway p50 − nginx p50 at %s: %s (target ≤ +25µs)\n", rateMode, fmtDelta(*ra.GatewayOverNginxP50))
	}
	if len(r.Idle) > 0 {
		var parts []string
		for _, i := range r.Idle {
			s := fmt.Sprintf("%s %.1f KB/conn (%d conns, RSS %s → %s, fds +%d)", i.Target, i.BytesPerConn/1024, i.Conns,
				fmtMB(i.RSSBefore), fmtMB(i.RSSAfter), i.FDsAfter-i.FDsBefore)
			if i.Failed > 0 {
				s += fmt.Sprintf(", %d failed: %s", i.Failed, i.Error)
			}
			parts = append(parts, s)
		}
		fmt.Fprintf(&b, "idle connections: %s (target ≤ 30 KB)\n", strings.Join(parts, "; "))
	}
	if s := r.Slow; s != nil {
		fmt.Fprintf(&b, "slow headers: %d/%d cut off after %.2f–%.2f s (median %.2f s; read-header-timeout %gs; %d within +%gs)",
			s.CutOff, s.Clients, s.CutMin, s.CutMax, s.CutMedian, s.ReadHeaderTimeout, s.WithinSlack, s.Slack)
		if s.NotCut > 0 || s.DialFailed > 0 {
			fmt.Fprintf(&b, ", %d not cut, %d failed to connect", s.NotCut, s.DialFailed)
		}
		fmt.Fprintf(&b, " [%s]; normal traffic %.0f req/s, %d errors, p50 %s, p99 %s\n",
			howList(s.How), s.Traffic.RPS, s.Traffic.Errors, fmtUS(s.Traffic.Latency.P50), fmtUS(s.Traffic.Latency.P99))
		if s.Traffic.FirstError != "" {
			fmt.Fprintf(&b, "slow headers: normal traffic error: %s\n", s.Traffic.FirstError)
		}
	}
	for _, l := range r.Logs {
		if l.Lines > 0 {
			fmt.Fprintf(&b, "%s wrote %d stderr line(s); last:\n", l.Process, l.Lines)
			for _, line := range l.Last {
				fmt.Fprintf(&b, "  %s\n", line)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func modesOf(ps []Phase) []string {
	var modes []string
	for _, p := range ps {
		if !slices.Contains(modes, p.Mode) {
			modes = append(modes, p.Mode)
		}
	}
	return modes
}

// joinSorted lists m's entries by key, each as item(key, value), joined
// by ", ".
func joinSorted[V any](m map[string]V, item func(string, V) string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, item(k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func cpuList(m map[string]string) string {
	return joinSorted(m, func(k, v string) string { return k + " " + v })
}

func howList(m map[string]int) string {
	return joinSorted(m, func(k string, v int) string { return fmt.Sprintf("%s: %d", k, v) })
}

// fmtUS formats microseconds: "57.3µs", "1.24ms".
func fmtUS(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2fms", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0fµs", v)
	default:
		return fmt.Sprintf("%.1fµs", v)
	}
}

func fmtDelta(v float64) string {
	if v >= 0 {
		return fmt.Sprintf("+%.3f ms", v/1000)
	}
	return fmt.Sprintf("−%.3f ms", -v/1000)
}

func fmtMB(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }
