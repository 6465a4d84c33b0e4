package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/portico-gw/portico/testing/gobuild"
)

// process is a child the harness started: the backend, a proxy, a build. It
// runs in its own process group, which stop kills as a whole; the kernel
// kills it too if the harness dies (Pdeathsig), and the harness's own
// children also exit when their stdin closes.
type process struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.Closer // nil for programs that are not ours
	stderr *tail
	exited chan struct{}
	err    error // valid once exited is closed
}

// pid is the id of the process (taskset executes the program in its place,
// so it is the same before and after).
func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// failure describes how the process ended, with the end of its stderr.
func (p *process) failure() error {
	return fmt.Errorf("%s exited (%v); stderr:\n%s", p.name, p.err, p.stderr.String())
}

// stop kills the process group and waits for it, at most five seconds.
func (p *process) stop() {
	if p.stdin != nil {
		_ = p.stdin.Close()
	}
	if p.alive() {
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	}
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
	}
}

type startSpec struct {
	name string
	// core pins the process with taskset when ≥ 0 and pinning is on.
	core int
	env  []string
	argv []string
	// ours marks the harness's own binary: it gets a stdin pipe that
	// keeps it alive and answers "listening ADDR" on stdout.
	ours bool
}

// start starts a child and, for our own children, waits for the address it
// listens on. The process is registered with the harness, which stops it on
// return from Run.
func (h *harness) start(ctx context.Context, s startSpec) (*process, string, error) {
	argv := s.argv
	if h.taskset != "" && s.core >= 0 {
		argv = append([]string{h.taskset, "-c", fmt.Sprint(s.core)}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// Pdeathsig fires when the OS thread that started the child ends,
	// which in a Go program is when the process does: nothing here locks
	// a goroutine to a thread and lets it exit locked.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	cmd.Env = append(os.Environ(), s.env...)
	p := &process{name: s.name, cmd: cmd, stderr: newTail(32 << 10), exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	var stdout io.ReadCloser
	if s.ours {
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, "", err
		}
		p.stdin = in
		if stdout, err = cmd.StdoutPipe(); err != nil {
			return nil, "", err
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting %s: %w", s.name, err)
	}
	h.mu.Lock()
	h.procs = append(h.procs, p)
	h.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	if !s.ours {
		return p, "", nil
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				addr <- a
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	timeout := time.NewTimer(15 * time.Second)
	defer timeout.Stop()
	select {
	case a := <-addr:
		return p, a, nil
	case <-p.exited:
		return nil, "", p.failure()
	case <-timeout.C:
		p.stop()
		return nil, "", fmt.Errorf("%s did not report its address within 15s; stderr:\n%s", s.name, p.stderr.String())
	case <-ctx.Done():
		p.stop()
		return nil, "", ctx.Err()
	}
}

// startListening starts a program that is told which port to bind (the
// gateway, nginx): it picks a free port, starts, and waits until GET path
// answers 200. A port taken between the pick and the bind is retried.
func (h *harness) startListening(ctx context.Context, s startSpec, args func(addr string) []string, path, header string) (*process, string, error) {
	base := s.argv
	var lastErr error
	for range 5 {
		addr, err := freeAddr()
		if err != nil {
			return nil, "", err
		}
		s.argv = append(append([]string(nil), base...), args(addr)...)
		p, _, err := h.start(ctx, s)
		if err != nil {
			return nil, "", err
		}
		err = waitReady(ctx, p, addr, path, header)
		if err == nil {
			return p, addr, nil
		}
		p.stop()
		lastErr = err
		if !strings.Contains(p.stderr.String(), "address already in use") {
			break
		}
	}
	return nil, "", lastErr
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// waitReady polls GET path on addr until it answers 200, the process exits
// or 30 seconds pass.
// waitReady polls GET path on addr (with the extra header lines, "Name:
// value\r\n" each) until it answers 200, p dies, or 30 s pass.
func waitReady(ctx context.Context, p *process, addr, path, header string) error {
	client := &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
		Timeout:   time.Second,
	}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		if !p.alive() {
			return p.failure()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(strings.TrimSpace(header), "\r\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
			}
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s on %s not ready within 30s (last: %s); stderr:\n%s", p.name, addr, last, p.stderr.String())
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tail keeps the last bytes written to it and counts lines.
type tail struct {
	mu    sync.Mutex
	limit int
	buf   []byte
	lines int
	cut   bool
}

func newTail(limit int) *tail { return &tail{limit: limit} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range p {
		if c == '\n' {
			t.lines++
		}
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return len(p), nil
}

// String returns what is kept, marked when older output was dropped.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "[…]" + string(t.buf)
	}
	return string(t.buf)
}

// Lines is the number of lines written so far.
func (t *tail) Lines() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lines
}

// lastLines returns up to n of the last complete lines kept.
func (t *tail) lastLines(n int) []string {
	s := strings.TrimRight(t.String(), "\n")
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	return lines[max(0, len(lines)-n):]
}

// buildGateway builds ./cmd/portico of the module in dir into out.
func buildGateway(ctx context.Context, dir, out string) error {
	cmd := gobuild.Command(ctx, dir, "-o", out, "./cmd/portico")
	cmd.WaitDelay = 5 * time.Second
	output, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build ./cmd/portico: %w\n%s", err, output)
	}
	return nil
}

// moduleDir finds the root of the module around the working directory.
func moduleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module: set Options.ModuleDir or Options.Gateway")
	}
	return strings.TrimSuffix(mod, "/go.mod"), nil
}
