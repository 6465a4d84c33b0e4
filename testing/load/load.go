// Package load measures the gateway against baselines in one run: a Go
// backend, a bare httputil.ReverseProxy with a tuned Transport (the baseline
// of DESIGN.md), the gateway and, where installed, nginx, each a process of
// its own whose CPU time is read from /proc, driven by a load generator in
// the calling process. Targets are measured in interleaved rounds so that
// whatever else the machine does falls on all of them alike.
//
// Run is the whole harness; cmd/portico-load is its command line and
// TestHarnessSmoke runs a short version. Both re-execute their own binary
// for the backend and the baseline, so their main (or TestMain) calls
// MaybeRunChild first.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options shape a run. The zero value is the full run of DESIGN.md's
// numbers: 3 rounds of 5 s phases over 64 connections, an open loop at
// 5,000 req/s, 5,000 routes, 10,000 idle connections, 500 slow clients.
type Options struct {
	// Rounds of every target and mode, each in a rotated order.
	Rounds int
	// Duration of each measured phase; Warmup is a closed-loop run of
	// each target before the first round, not measured.
	Duration time.Duration
	Warmup   time.Duration
	// Conns is the number of keep-alive client connections.
	Conns int
	// Rate is the open loop's requests per second.
	Rate int
	// Routes is the number of generated routes besides the bench route.
	Routes int
	// IdleConns is the number of idle connections opened to each proxy;
	// negative skips the measurement.
	IdleConns int
	// SlowClients trickle their request head while SlowRate req/s of
	// normal traffic run against the gateway, started with
	// ReadHeaderTimeout; negative SlowClients skips the measurement.
	SlowClients       int
	SlowRate          int
	ReadHeaderTimeout time.Duration
	// AuthKeys is the number of API keys, besides the one the load
	// presents, in the table of the gateway-auth target (the gateway with
	// a bench route that requires a key); negative skips that target.
	AuthKeys int
	// NoRateLimit skips the gateway-rl target (gateway-auth plus a
	// per-caller rate limit), which needs the gateway-auth target.
	NoRateLimit bool
	// NoUsage skips the gateway-usage target (gateway-rl, or gateway-auth
	// without it, counting usage into a spool under the run's directory).
	NoUsage bool
	// Timeout bounds the run once the gateway is built; building it has a
	// bound of the same length of its own, since how long it takes depends
	// on what else changed in the tree.
	Timeout time.Duration

	// Gateway is a built portico binary; empty builds ./cmd/portico of the
	// module at ModuleDir (empty: the module around the working directory).
	Gateway   string
	ModuleDir string
	// Self is the binary re-executed for the backend and the baseline
	// (empty: os.Executable()); it must call MaybeRunChild.
	Self string
	// Nginx is the nginx binary to add as a target: empty means
	// /usr/sbin/nginx when it exists, "none" never.
	Nginx string
	// NoPin leaves every process on every CPU. Otherwise, with taskset and
	// two CPUs, the proxies run on CPU 1 with GOMAXPROCS=1 and the
	// backend and the load generator on CPU 0.
	NoPin bool
	// BaselineBufferPool gives the baseline ReverseProxy a pooled copy
	// buffer instead of allocating 32 KB per request.
	BaselineBufferPool bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

func (o *Options) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Rounds, 3)
	defD(&o.Duration, 5*time.Second)
	defD(&o.Warmup, time.Second)
	def(&o.Conns, 64)
	def(&o.Rate, 5000)
	def(&o.Routes, 5000)
	def(&o.IdleConns, 10000)
	def(&o.SlowClients, 500)
	def(&o.SlowRate, 1000)
	defD(&o.ReadHeaderTimeout, time.Second)
	defD(&o.Timeout, 3*time.Minute)
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// The CPUs of a pinned run.
const (
	loadCPU  = 0 // load generator and backend
	proxyCPU = 1 // the proxy under test
)

// harness is the state of one Run.
type harness struct {
	opts     Options
	dir      string
	self     string
	gateway  string
	config   string
	taskset  string // empty when not pinning
	lifetime time.Duration
	report   Report

	mu    sync.Mutex
	procs []*process

	backend     *process
	backendAddr string
	nginxNoted  bool

	// authConfig is the gateway-auth target's config file, "" when it is
	// skipped; authKey is the API key the load presents to it.
	authConfig string
	authKey    string
	// rlConfig and rlKey are the same for the gateway-rl target.
	rlConfig string
	rlKey    string
}

// Run runs the harness and returns what it measured. Every process it
// starts is killed and every file it writes removed before it returns,
// also when ctx is cancelled or Options.Timeout passes.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts.setDefaults()
	h := &harness{opts: opts}
	h.lifetime = opts.Timeout + 30*time.Second

	dir, err := os.MkdirTemp("", "portico-load-")
	if err != nil {
		return nil, err
	}
	h.dir = dir
	defer os.RemoveAll(dir)
	defer h.stopAll()

	setupCtx, cancelSetup := context.WithTimeout(ctx, opts.Timeout)
	err = h.setup(setupCtx)
	cancelSetup()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if h.taskset != "" {
		restore, err := h.pinSelf()
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	if err := h.run(ctx); err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			// Processes die with ctx, so what failed is a consequence.
			err = fmt.Errorf("stopped early (%v); at the time: %w", ctx.Err(), err)
		}
		if logs := h.stderrTails(); logs != "" {
			err = fmt.Errorf("%w\n%s", err, logs)
		}
		return nil, err
	}
	return &h.report, nil
}

// stderrTails returns the last lines the children wrote to stderr, for an
// error: what a proxy logged often says why it failed.
func (h *harness) stderrTails() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, p := range h.procs {
		if last := p.stderr.lastLines(10); len(last) > 0 {
			fmt.Fprintf(&b, "%s wrote %d stderr line(s); last:\n  %s\n", p.name, p.stderr.Lines(), strings.Join(last, "\n  "))
		}
	}
	return b.String()
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.opts.Log, "portico-load: "+format+"\n", args...)
}

// setup raises the file limit, decides on pinning, and finds or builds the
// binaries.
func (h *harness) setup(ctx context.Context) error {
	o := h.opts
	h.report.Config = Config{
		Rounds:          o.Rounds,
		PhaseSeconds:    o.Duration.Seconds(),
		Conns:           o.Conns,
		Rate:            o.Rate,
		Routes:          o.Routes,
		AuthKeys:        o.AuthKeys,
		BaselineBufPool: o.BaselineBufferPool,
		Started:         time.Now().UTC().Format(time.RFC3339),
		GoVersion:       runtime.Version(),
	}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.report.Config.LoadAverage = strings.Join(strings.Fields(string(la))[:3], " ")
	}

	// Idle connections need a descriptor each, here and in the proxy,
	// which inherits the limit.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			h.note("could not raise RLIMIT_NOFILE: %v", err)
		}
		if need := uint64(o.IdleConns + 1000); o.IdleConns > 0 && lim.Cur < need {
			h.note("RLIMIT_NOFILE is %d, below the %d the idle connections need", lim.Cur, need)
		}
	}

	h.report.Pinning = Pinning{CPUs: map[string]string{}}
	switch ts, err := exec.LookPath("taskset"); {
	case o.NoPin:
		h.report.Pinning.Why = "disabled by the caller"
	case err != nil:
		h.report.Pinning.Why = "taskset not found"
	default:
		set, err := getAffinity(0)
		if err != nil || !set.has(loadCPU) || !set.has(proxyCPU) {
			h.report.Pinning.Why = fmt.Sprintf("CPUs %d and %d are not both available", loadCPU, proxyCPU)
			break
		}
		h.taskset = ts
		h.report.Pinning.Pinned = true
		h.report.Pinning.Taskset = ts
		h.report.Pinning.ProxyGOMAXPROCS = "1"
	}

	h.self = o.Self
	if h.self == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		h.self = exe
	}
	h.gateway = o.Gateway
	if h.gateway == "" {
		mod := o.ModuleDir
		if mod == "" {
			var err error
			if mod, err = moduleDir(ctx); err != nil {
				return err
			}
		}
		h.gateway = filepath.Join(h.dir, "portico")
		start := time.Now()
		if err := buildGateway(ctx, mod, h.gateway); err != nil {
			return err
		}
		h.logf("built the gateway in %.1fs", time.Since(start).Seconds())
	}
	return nil
}

// pinSelf moves the load generator to loadCPU with GOMAXPROCS=1 and
// returns what undoes it.
func (h *harness) pinSelf() (func(), error) {
	orig, err := getAffinity(0)
	if err != nil {
		return nil, err
	}
	if err := pinSelf(oneCPU(loadCPU)); err != nil {
		return nil, err
	}
	procs := runtime.GOMAXPROCS(1)
	h.report.Pinning.CPUs["load generator"], _ = statusField(os.Getpid(), "Cpus_allowed_list")
	return func() {
		runtime.GOMAXPROCS(procs)
		_ = pinSelf(orig)
	}, nil
}

func (h *harness) note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	h.report.Notes = append(h.report.Notes, n)
	h.logf("note: %s", n)
}

func (h *harness) stopAll() {
	h.mu.Lock()
	procs := h.procs
	h.procs = nil
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(p.stop)
	}
	wg.Wait()
}

// env is the environment of a pinned Go child: one CPU, one P.
func (h *harness) env() []string {
	if h.taskset == "" {
		return nil
	}
	return []string{"GOMAXPROCS=1"}
}

// pinned records the CPUs p may run on. It is read once p is serving:
// right after the start taskset may not have set them yet.
func (h *harness) pinned(name string, p *process) {
	if cpus, err := statusField(p.pid(), "Cpus_allowed_list"); err == nil {
		h.report.Pinning.CPUs[name] = cpus
	}
}

// run is the measurement proper: start the processes, warm up, the rounds,
// slow headers, then idle connections on fresh proxies.
func (h *harness) run(ctx context.Context) error {
	targets, err := h.startTargets(ctx)
	if err != nil {
		return err
	}
	if err := h.rounds(ctx, targets); err != nil {
		return err
	}
	if h.opts.SlowClients > 0 {
		if err := h.slowHeaders(ctx, targetNamed(targets, "gateway")); err != nil {
			return fmt.Errorf("slow headers: %w", err)
		}
	}
	// Idle connections are measured on fresh processes, whose heaps were
	// not grown by the load phases first.
	for _, t := range targets {
		if t.proc != nil {
			t.proc.stop()
		}
	}
	if h.opts.IdleConns > 0 {
		if err := h.idle(ctx); err != nil {
			return err
		}
	}
	h.mu.Lock()
	for _, p := range h.procs {
		h.report.Logs = append(h.report.Logs, ProcessLog{Process: p.name, Lines: p.stderr.Lines(), Last: p.stderr.lastLines(5)})
	}
	h.mu.Unlock()
	return nil
}

// rounds warms every target up, then measures each at full load and at
// the fixed rate, Rounds times, starting each round with the next target.
func (h *harness) rounds(ctx context.Context, targets []*target) error {
	o := h.opts
	for _, t := range targets {
		if err := h.warm(ctx, t); err != nil {
			return err
		}
	}
	modes := []struct {
		name string
		rate float64
	}{{"full", 0}, {fmt.Sprintf("%d/s", o.Rate), float64(o.Rate)}}
	var modeNames []string
	for _, m := range modes {
		modeNames = append(modeNames, m.name)
	}
	for round := 1; round <= o.Rounds; round++ {
		for _, m := range modes {
			for i := range targets {
				t := targets[(i+round-1)%len(targets)]
				p, err := h.phase(ctx, t, phaseSpec{
					addr: t.addr, header: t.header, conns: o.Conns, duration: o.Duration, rate: m.rate, grace: 5 * time.Second,
				})
				if err != nil {
					return fmt.Errorf("round %d, %s, %s: %w", round, t.name, m.name, err)
				}
				p.Mode, p.Round = m.name, round
				h.report.Phases = append(h.report.Phases, p)
				cpu := "-"
				if p.ProxyCPUPerRequest > 0 {
					cpu = fmtUS(p.ProxyCPUPerRequest)
				}
				h.logf("round %d %-8s %-7s %8.0f req/s  %d errors  p50 %s  p99 %s  cpu/req %s",
					round, t.name, m.name, p.RPS, p.Errors, fmtUS(p.Latency.P50), fmtUS(p.Latency.P99), cpu)
			}
		}
	}
	h.report.summarise(h.report.Config.Targets, modeNames)
	h.noteContention()
	return nil
}

// noteContention says so when other processes used the CPUs during the
// phases, and how much the proxies had to wait for theirs: a proxy that
// waits for a CPU answers later and, woken more often, spends more CPU per
// request, so then the full-load CPU per request is the sturdiest figure.
func (h *harness) noteContention() {
	var others, waits []float64
	for _, p := range h.report.Phases {
		others = append(others, p.OthersShare)
		if p.Target != "direct" {
			waits = append(waits, p.ProxyWaitShare)
		}
	}
	slices.Sort(others)
	slices.Sort(waits)
	if len(others) == 0 || others[len(others)/2] < 0.1 {
		return
	}
	la := ""
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		la = strings.Join(strings.Fields(string(data))[:3], " ")
	}
	n := fmt.Sprintf("other processes used a median %.2f cores (up to %.2f) of the machine's %d during the phases "+
		"(load average %s at start, %s at the end)", others[len(others)/2], others[len(others)-1], runtime.NumCPU(),
		h.report.Config.LoadAverage, la)
	if len(waits) > 0 {
		n += fmt.Sprintf("; the proxies' threads waited for a CPU a median %.0f%% (up to %.0f%%) of a phase's wall time, "+
			"which inflates latency and CPU per request, least so at full load", 100*waits[len(waits)/2], 100*waits[len(waits)-1])
	}
	h.note("%s", n)
}
