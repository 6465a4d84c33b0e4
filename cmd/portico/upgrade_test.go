package main_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestGatewayUpgradeUnderLoad restarts a `portico gateway -config` node
// under load from clients that never retry (raw HTTP/1.1 keep-alive
// connections mixing GET and POST, and h2c), each time with a 2 s call in
// flight: first as a plain restart (SIGTERM, wait for the exit, start
// again), which refuses connections while the old process drains and the
// new one starts, then with three consecutive upgrades in place
// (SIGUSR2), which must neither refuse a connection nor fail a request.
// It logs the counts of both and every drain's time. Wall time: ~25 s.
func TestGatewayUpgradeUnderLoad(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ms, _ := strconv.Atoi(r.URL.Query().Get("sleep_ms")); ms > 0 {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		if r.Method == http.MethodPost {
			_, _ = io.Copy(w, r.Body)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(backend.Close)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "portico.yaml")
	cfg := fmt.Sprintf("version: one\nclusters: [{name: c, protocol: PROTOCOL_HTTP1, endpoints: [{address: %q}]}]\nroutes: [{id: r, team: t, path: \"/{x=**}\", cluster: c, auth: {public: true, reviewer: tests}}]\n"+
		// The load comes from one address.
		"rate_limiting: {anonymous: {disabled: true}}\n",
		strings.TrimPrefix(backend.URL, "http://"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	args := []string{"gateway", "-config", cfgPath, "-listen", "public=" + addr, "-drain-timeout", "10s"}
	out := newProcessLog(t)

	first := out.start(t, args...)
	out.waitLine(t, regexp.MustCompile(`msg=listening pool=public`))

	// Before: a plain restart.
	load := startLoad(t, addr)
	load.settle(t)
	slow := load.slowCall(2 * time.Second)
	time.Sleep(50 * time.Millisecond) // the call reaches the node
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	drained := out.waitLine(t, regexp.MustCompile(`msg=drained took=(\S+) drained=(\d+) cut=(\d+)`))
	waitExit(t, first.Process.Pid)
	out.start(t, args...)
	out.waitLine(t, regexp.MustCompile(`msg=listening pool=public`))
	load.settle(t)
	if err := <-slow; err != nil {
		t.Errorf("restart: the 2 s call in flight: %v", err)
	}
	before := load.stop()
	t.Logf("plain restart (SIGTERM, exit, start): %s; drain took %s (drained %s, cut %s)", before, drained[1], drained[2], drained[3])
	if before.refused == 0 {
		t.Errorf("plain restart refused no connection: the harness cannot tell")
	}

	// After: three upgrades in place.
	pid := out.lastPid()
	load = startLoad(t, addr)
	load.settle(t)
	for i := range 3 {
		slow := load.slowCall(2 * time.Second)
		time.Sleep(50 * time.Millisecond) // the call reaches the node
		if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		m := out.waitLine(t, regexp.MustCompile(`msg="upgrade: new process ready; this one drains" pid=(\d+)`))
		drained := out.waitLine(t, regexp.MustCompile(`msg=drained took=(\S+) drained=(\d+) cut=(\d+)`))
		waitExit(t, pid)
		if err := <-slow; err != nil {
			t.Errorf("upgrade %d: the 2 s call in flight: %v", i+1, err)
		}
		pid, _ = strconv.Atoi(m[1])
		load.settle(t)
		t.Logf("upgrade %d: the old process drained in %s (drained %s, cut %s); new pid %d", i+1, drained[1], drained[2], drained[3], pid)
	}
	after := load.stop()
	t.Logf("three upgrades in place (SIGUSR2): %s", after)
	if after.refused != 0 || after.failed != 0 || after.ok == 0 {
		t.Errorf("upgrades: %s, want 0 refused and 0 failed; first error: %v", after, after.firstErr)
	}
}

// TestGatewayUpgradeFailsAndServesOn: a new process that cannot start
// (here its config file no longer loads) is logged, and the old process
// keeps serving.
func TestGatewayUpgradeFailsAndServesOn(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(backend.Close)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "portico.yaml")
	cfg := fmt.Sprintf("version: one\nclusters: [{name: c, protocol: PROTOCOL_HTTP1, endpoints: [{address: %q}]}]\nroutes: [{id: r, team: t, path: \"/{x=**}\", cluster: c, auth: {public: true, reviewer: tests}}]\n",
		strings.TrimPrefix(backend.URL, "http://"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	out := newProcessLog(t)
	p := out.start(t, "gateway", "-config", cfgPath, "-listen", "public="+addr)
	out.waitLine(t, regexp.MustCompile(`msg=listening pool=public`))
	// The watcher would refuse the change and keep serving; the new
	// process has nothing older to serve and exits.
	if err := os.WriteFile(cfgPath, []byte("routes: [{id: r, pathh: /x}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	out.waitLine(t, regexp.MustCompile(`msg="upgrade failed; this process serves on".*ended before it was ready`))
	if code, body := get(t, "http://"+addr+"/x"); code != 200 || body != "ok" {
		t.Fatalf("after a failed upgrade: GET = %d %q, want 200 ok", code, body)
	}
}

// processLog runs portico processes with their output on one pipe, read
// line by line, so that a process an upgrade starts, which inherits it,
// writes there too; every process seen is killed at the end.
type processLog struct {
	r, w  *os.File
	lines chan string
	mu    sync.Mutex
	all   strings.Builder
	pids  []int
}

func newProcessLog(t *testing.T) *processLog {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	l := &processLog{r: r, w: w, lines: make(chan string, 10000)}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		pid := regexp.MustCompile(`msg="upgrade: new process started.*pid=(\d+)`)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := sc.Text()
			l.mu.Lock()
			l.all.WriteString(line + "\n")
			if m := pid.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[1])
				l.pids = append(l.pids, n)
			}
			l.mu.Unlock()
			select {
			case l.lines <- line:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		l.mu.Lock()
		pids := append([]int(nil), l.pids...)
		l.mu.Unlock()
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = w.Close()
		// The processes hold the write end until they are gone.
		select {
		case <-scanned:
		case <-time.After(10 * time.Second):
			t.Error("portico processes still hold their output 10s after SIGKILL")
		}
		_ = r.Close()
		checkRaces(t, "portico", l.output())
		if t.Failed() {
			t.Logf("portico output:\n%s", l.output())
		}
	})
	return l
}

func (l *processLog) output() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}

// start starts portico with args; its pid is killed at the end.
func (l *processLog) start(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(portico(t), args...)
	cmd.Stdout, cmd.Stderr = l.w, l.w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.pids = append(l.pids, cmd.Process.Pid)
	l.mu.Unlock()
	go func() { _ = cmd.Wait() }() // reaped, so that waitExit sees it go
	return cmd
}

// lastPid is the pid of the process started last, by the test or by an
// upgrade.
func (l *processLog) lastPid() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pids[len(l.pids)-1]
}

func (l *processLog) waitLine(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case line := <-l.lines:
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-deadline.C:
			t.Fatalf("no portico printed %v within 30s", re)
		}
	}
}

// waitExit waits until process pid is gone (or a zombie: a process an
// upgrade started is reaped by whoever adopts it).
func waitExit(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("portico %d still runs 30s on", pid)
}

// load is a set of clients that never retry: a failed call is counted and
// the next one starts on a new connection.
type load struct {
	addr     string
	stopc    chan struct{}
	wg       sync.WaitGroup
	ok       atomic.Int64
	refused  atomic.Int64
	failed   atomic.Int64
	firstErr atomic.Value
	h2c      *http.Client
}

type loadResult struct {
	ok, refused, failed int64
	firstErr            any
}

func (r loadResult) String() string {
	return fmt.Sprintf("%d calls answered, %d connections refused, %d calls failed", r.ok, r.refused, r.failed)
}

// startLoad runs 6 HTTP/1.1 clients (GET and POST in turn, keep-alive) and
// 2 h2c clients, each paced to a call every 5 ms, until stop.
func startLoad(t *testing.T, addr string) *load {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: protocols}
	t.Cleanup(tr.CloseIdleConnections)
	l := &load{addr: addr, stopc: make(chan struct{}), h2c: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
	for i := range 6 {
		l.wg.Go(func() { l.http1(i) })
	}
	for range 2 {
		l.wg.Go(l.http2)
	}
	t.Cleanup(func() { l.stop() })
	return l
}

func (l *load) stop() loadResult {
	select {
	case <-l.stopc:
	default:
		close(l.stopc)
	}
	l.wg.Wait()
	return loadResult{ok: l.ok.Load(), refused: l.refused.Load(), failed: l.failed.Load(), firstErr: l.firstErr.Load()}
}

func (l *load) fail(refused bool, err error) {
	if refused {
		l.refused.Add(1)
	} else {
		l.failed.Add(1)
	}
	l.firstErr.CompareAndSwap(nil, err.Error())
}

// settle waits until calls succeed again (after a restart).
func (l *load) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n := l.ok.Load(); l.ok.Load() < n+100; {
		if time.Now().After(deadline) {
			t.Fatal("the load's calls did not succeed within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slowCall makes one GET that the backend answers after d, on its own
// connection, and reports how it ended.
func (l *load) slowCall(d time.Duration) <-chan error {
	errc := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", l.addr)
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(d + 10*time.Second))
		fmt.Fprintf(c, "GET /slow?sleep_ms=%d HTTP/1.1\r\nHost: x\r\n\r\n", d.Milliseconds())
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		errc <- err
	}()
	return errc
}

// http1 is one raw HTTP/1.1 client: one connection, kept alive until the
// server closes it (Connection: close, or EOF while idle is a failure: a
// client that never retries has no way to tell it apart).
func (l *load) http1(worker int) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var (
		c  net.Conn
		br *bufio.Reader
	)
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for n := 0; ; n++ {
		select {
		case <-l.stopc:
			return
		case <-tick.C:
		}
		if c == nil {
			var err error
			c, err = net.DialTimeout("tcp", l.addr, 5*time.Second)
			if err != nil {
				l.fail(errors.Is(err, syscall.ECONNREFUSED), err)
				continue
			}
			br = bufio.NewReader(c)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		body := fmt.Sprintf("worker %d call %d", worker, n)
		var err error
		if n%2 == 0 {
			_, err = fmt.Fprintf(c, "GET /get HTTP/1.1\r\nHost: x\r\n\r\n")
			body = "ok"
		} else {
			_, err = fmt.Fprintf(c, "POST /post HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
		var resp *http.Response
		if err == nil {
			resp, err = http.ReadResponse(br, nil)
		}
		if err == nil {
			var b []byte
			b, err = io.ReadAll(resp.Body)
			if err == nil && (resp.StatusCode != 200 || string(b) != body) {
				err = fmt.Errorf("status %d body %q, want 200 %q", resp.StatusCode, b, body)
			}
		}
		if err != nil {
			l.fail(false, err)
		} else {
			l.ok.Add(1)
		}
		if err != nil || resp.Close {
			c.Close()
			c = nil
		}
	}
}

// http2 is one h2c client (Go's transport, which only retries a call the
// server said it did not process, as GOAWAY does).
func (l *load) http2() {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-l.stopc:
			return
		case <-tick.C:
		}
		var (
			resp *http.Response
			err  error
			want = "ok"
		)
		if n%2 == 0 {
			resp, err = l.h2c.Get("http://" + l.addr + "/get")
		} else {
			want = "h2 call " + strconv.Itoa(n)
			// A strings.Reader, so that the transport can send the body
			// again: a stream the old process's GOAWAY says it never
			// processed (its id is above the GOAWAY's last stream id) may
			// be sent again on a new connection, RFC 9113 section 8.7,
			// and every HTTP/2 client does. That is the protocol's, not
			// a retry of the client's: no request is processed twice.
			resp, err = l.h2c.Post("http://"+l.addr+"/post", "text/plain", strings.NewReader(want))
		}
		if err != nil {
			l.fail(errors.Is(err, syscall.ECONNREFUSED), err)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && (resp.StatusCode != 200 || string(b) != want) {
			err = fmt.Errorf("status %d body %q, want 200 %q", resp.StatusCode, b, want)
		}
		if err != nil {
			l.fail(false, err)
			continue
		}
		l.ok.Add(1)
	}
}
