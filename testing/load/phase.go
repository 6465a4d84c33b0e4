package load

import (
	"context"
	"fmt"
	"os"
	"time"
)

// warm runs t at full load for Options.Warmup, unmeasured.
func (h *harness) warm(ctx context.Context, t *target) error {
	g, err := newGenerator(ctx, phaseSpec{addr: t.addr, header: t.header, conns: h.opts.Conns, duration: h.opts.Warmup, grace: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("warming up %s: %w", t.name, err)
	}
	defer g.close()
	r := g.run(ctx)
	if r.errors() > 0 {
		h.note("warm-up of %s: %d errors (%s)", t.name, r.errors(), r.firstErr)
	}
	return ctx.Err()
}

// sample is the CPU time of the processes a phase involves.
type sample struct {
	proxy, backend, self cpuTimes
	// machine is the CPU time of everything on the machine.
	machine time.Duration
}

func (h *harness) sample(t *target) (sample, error) {
	var s sample
	var err error
	if t.proc != nil {
		if s.proxy, err = readCPU(t.proc.pid()); err != nil {
			return s, fmt.Errorf("reading the CPU time of %s: %w", t.name, err)
		}
	}
	if s.backend, err = readCPU(h.backend.pid()); err != nil {
		return s, fmt.Errorf("reading the CPU time of the backend: %w", err)
	}
	if s.self, err = readCPU(os.Getpid()); err != nil {
		return s, fmt.Errorf("reading the CPU time of the harness: %w", err)
	}
	if s.machine, err = readMachineBusy(); err != nil {
		return s, err
	}
	return s, nil
}

// phase runs one measured phase against t.
func (h *harness) phase(ctx context.Context, t *target, spec phaseSpec) (Phase, error) {
	if t.proc != nil && !t.proc.alive() {
		return Phase{}, t.proc.failure()
	}
	if !h.backend.alive() {
		return Phase{}, h.backend.failure()
	}
	g, err := newGenerator(ctx, spec)
	if err != nil {
		return Phase{}, err
	}
	defer g.close()
	before, err := h.sample(t)
	if err != nil {
		return Phase{}, err
	}
	r := g.run(ctx)
	after, err := h.sample(t)
	if err != nil {
		return Phase{}, err
	}
	if err := ctx.Err(); err != nil {
		return Phase{}, err
	}
	if t.proc != nil && !t.proc.alive() {
		return Phase{}, t.proc.failure()
	}
	return phaseOf(t.name, spec, r, before, after), nil
}

func phaseOf(name string, spec phaseSpec, r *loadResult, before, after sample) Phase {
	p := Phase{
		Target:     name,
		Rate:       spec.rate,
		Requests:   r.answered(),
		Errors:     r.errors(),
		FirstError: r.firstErr,
		Seconds:    r.elapsed.Seconds(),
		RPS:        r.rps(),
		Latency:    latencyOf(&r.latency),
	}
	if spec.rate > 0 {
		p.SendLagP99 = us(r.lag.Quantile(0.99))
	}
	for s, n := range r.statuses {
		if p.Statuses == nil {
			p.Statuses = map[string]uint64{}
		}
		p.Statuses[fmt.Sprint(s)] = n
	}
	proxy, backend, self := after.proxy.sub(before.proxy), after.backend.sub(before.backend), after.self.sub(before.self)
	p.PreciseCPU = backend.Precise && self.Precise
	wall := r.elapsed.Seconds()
	if n := float64(r.answered()); n > 0 {
		p.BackendCPUPerRequest = us(backend.Run) / n
		if name != "direct" {
			p.ProxyCPUPerRequest = us(proxy.Run) / n
			p.PreciseCPU = p.PreciseCPU && proxy.Precise
		}
	}
	if wall > 0 {
		ours := proxy.Run + backend.Run + self.Run
		p.OthersShare = max(0, (after.machine-before.machine-ours).Seconds()/wall)
		p.Core0Share = (backend.Run + self.Run).Seconds() / wall
		if name != "direct" {
			p.ProxyCPUShare = proxy.Run.Seconds() / wall
			p.ProxyWaitShare = proxy.Wait.Seconds() / wall
		}
	}
	return p
}
