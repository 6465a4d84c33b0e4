package load

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// target is something the load generator sends requests to; proc is nil
// for the backend itself ("direct").
type target struct {
	name   string
	addr   string
	header string // extra request header lines the load sends
	proc   *process
}

// startTargets starts the backend and the proxies in front of it.
func (h *harness) startTargets(ctx context.Context) ([]*target, error) {
	var err error
	h.backend, h.backendAddr, err = h.start(ctx, startSpec{
		name: "backend", core: loadCPU, env: h.env(), ours: true,
		argv: []string{h.self, ChildCommand, "backend", "-lifetime", h.lifetime.String()},
	})
	if err != nil {
		return nil, err
	}
	h.pinned("backend", h.backend)
	h.config = filepath.Join(h.dir, "portico.json")
	if err := writeGatewayConfig(h.config, h.backendAddr, h.opts.Routes); err != nil {
		return nil, err
	}
	if h.opts.AuthKeys >= 0 {
		h.authConfig = filepath.Join(h.dir, "portico-auth.json")
		if h.authKey, err = writeAuthGatewayConfig(h.authConfig, h.backendAddr, h.opts.Routes, h.opts.AuthKeys, false); err != nil {
			return nil, err
		}
		if !h.opts.NoRateLimit {
			h.rlConfig = filepath.Join(h.dir, "portico-rl.json")
			if h.rlKey, err = writeAuthGatewayConfig(h.rlConfig, h.backendAddr, h.opts.Routes, h.opts.AuthKeys, true); err != nil {
				return nil, err
			}
		}
	}
	targets := []*target{{name: "direct", addr: h.backendAddr}}
	for _, start := range []func(context.Context) (*target, error){h.startBaseline, h.startGateway, h.startAuthGateway, h.startLimitGateway, h.startUsageGateway, h.startNginx} {
		t, err := start(ctx)
		if err != nil {
			return nil, err
		}
		if t != nil {
			targets = append(targets, t)
			h.pinned(t.name, t.proc)
		}
	}
	for _, t := range targets {
		h.report.Config.Targets = append(h.report.Config.Targets, t.name)
	}
	h.logf("targets: %s", strings.Join(h.report.Config.Targets, ", "))
	return targets, nil
}

func targetNamed(ts []*target, name string) *target {
	for _, t := range ts {
		if t.name == name {
			return t
		}
	}
	panic("no target " + name)
}

func (h *harness) startBaseline(ctx context.Context) (*target, error) {
	argv := []string{h.self, ChildCommand, "baseline", "-backend", h.backendAddr, "-lifetime", h.lifetime.String()}
	if h.opts.BaselineBufferPool {
		argv = append(argv, "-buffer-pool")
	}
	p, addr, err := h.start(ctx, startSpec{name: "baseline", core: proxyCPU, env: h.env(), ours: true, argv: argv})
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, p, addr, benchPath, ""); err != nil {
		return nil, err
	}
	return &target{name: "baseline", addr: addr, proc: p}, nil
}

func (h *harness) startGateway(ctx context.Context) (*target, error) {
	return h.startPortico(ctx, "gateway", h.config, "")
}

// startAuthGateway starts the gateway-auth target: the same routes, an
// API key table of Options.AuthKeys keys, and a bench route that requires
// one.
func (h *harness) startAuthGateway(ctx context.Context) (*target, error) {
	if h.authConfig == "" {
		return nil, nil
	}
	return h.startPortico(ctx, "gateway-auth", h.authConfig, "X-Api-Key: "+h.authKey+"\r\n")
}

// startLimitGateway starts the gateway-rl target: gateway-auth's config
// with a per-caller rate limit on the plan that never refuses.
func (h *harness) startLimitGateway(ctx context.Context) (*target, error) {
	if h.rlConfig == "" {
		return nil, nil
	}
	return h.startPortico(ctx, "gateway-rl", h.rlConfig, "X-Api-Key: "+h.rlKey+"\r\n")
}

// startUsageGateway starts the gateway-usage target: gateway-rl (or
// gateway-auth, without rate limits) counting every call's usage into
// 10 s windows spooled under the run's directory, so that the two
// differ by the usage recorder alone. No Kafka: shipping happens off the
// request path, and the spool holds a run's windows many times over.
func (h *harness) startUsageGateway(ctx context.Context) (*target, error) {
	if h.opts.NoUsage || h.authConfig == "" {
		return nil, nil
	}
	config, key := h.rlConfig, h.rlKey
	if config == "" {
		config, key = h.authConfig, h.authKey
	}
	dir := filepath.Join(h.dir, "usage")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return h.startPortico(ctx, "gateway-usage", config, "X-Api-Key: "+key+"\r\n", "-usage-dir", dir)
}

func (h *harness) startPortico(ctx context.Context, name, config, header string, args ...string) (*target, error) {
	spec := startSpec{name: name, core: proxyCPU, env: h.env(), argv: append([]string{
		h.gateway, "gateway", "-config", config, "-log-level", "warn",
		"-read-header-timeout", h.opts.ReadHeaderTimeout.String(),
	}, args...)}
	start := time.Now()
	p, addr, err := h.startListening(ctx, spec, func(addr string) []string {
		return []string{"-listen", "public=" + addr}
	}, benchPath, header)
	if err != nil {
		return nil, err
	}
	h.logf("%s ready on %s in %.2fs (%d routes)", name, addr, time.Since(start).Seconds(), h.opts.Routes+1)
	return &target{name: name, addr: addr, header: header, proc: p}, nil
}
