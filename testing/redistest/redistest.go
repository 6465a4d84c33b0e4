// Package redistest runs real redis-server processes for tests: a single
// server, a Redis Cluster on loopback, and a TCP proxy that delays traffic
// to one of them.
//
// Every server is a child process of the test binary, bound to 127.0.0.1,
// with persistence off and its own temporary directory; t.Cleanup kills it.
// When redis-server is not on PATH the test is skipped, or fails if the
// environment variable CI is set, so that CI never passes by skipping.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// InstallHint is how to install redis-server on the Debian machines the
// tests run on.
const InstallHint = "apt-get update && apt-get install -y --no-install-recommends redis-server"

const (
	// startTimeout bounds how long a server may take to answer PING.
	startTimeout = 10 * time.Second
	// portAttempts is how often a start is retried when the free port it
	// picked was taken by someone else before redis-server bound it.
	portAttempts = 5
)

var errAddrInUse = errors.New("address already in use")

// Server is one redis-server process. Its methods may be called from
// several goroutines.
type Server struct {
	bin     string
	dir     string
	port    int
	busPort int // cluster bus port, 0 for a server outside a cluster

	mu   sync.Mutex
	proc *process // nil while killed
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

// Start starts a redis-server on a free loopback port and waits until it
// answers PING. The server is killed when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

func start(t testing.TB, cluster bool) *Server {
	t.Helper()
	s := &Server{bin: binary(t), dir: t.TempDir()}
	var err error
	for range portAttempts {
		s.port = freePort(t)
		if cluster {
			s.busPort = freePort(t)
		}
		if err = s.launch(); !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// binary returns the path of redis-server, or ends the test: with Fatal
// under CI, with Skip elsewhere.
func binary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err == nil {
		return path
	}
	msg := "redistest: redis-server not found on PATH; install it with: " + InstallHint
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set, so this fails instead of skipping)")
	}
	t.Skip(msg)
	return ""
}

// freePort returns a loopback TCP port that was free a moment ago.
// redis-server cannot bind port 0, so the port is found by binding one here
// and closing it; a start that then loses the race is retried.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Addr is the server's host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Client returns a client of the server with default options, closed when
// the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// Kill kills the server with SIGKILL and waits for it to exit. Its data is
// lost. Killing a killed server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	s.proc.cmd.Process.Kill()
	<-s.proc.done
	s.proc = nil
}

// Restart kills the server if it is running and starts it again on the
// same port (and cluster bus port) with the same directory, so a cluster
// node rejoins its cluster. It waits until the server answers PING.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	var err error
	for range portAttempts {
		if err = s.launch(); !errors.Is(err, errAddrInUse) {
			break
		}
		// Someone took the port while the server was down; nothing but
		// waiting for them to let go of it can help.
		wait(250 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("redistest: restart %s: %v", s.Addr(), err)
	}
}

func wait(d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	<-timer.C
}

// launch starts the process on s.port and waits until it answers PING.
// It returns errAddrInUse when the port was taken.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return fmt.Errorf("%s is already running", s.Addr())
	}
	logPath := filepath.Join(s.dir, "redis.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()

	args := []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(s.port),
		"--dir", s.dir,
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "no",
		"--logfile", "",
	}
	if s.busPort != 0 {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(s.busPort),
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout = log
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.done)
	}()

	deadline := time.Now().Add(startTimeout)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-p.done:
			out, _ := os.ReadFile(logPath)
			if strings.Contains(string(out), "Address already in use") {
				return errAddrInUse
			}
			return fmt.Errorf("redis-server on %s exited: %s\n%s", s.Addr(), cmd.ProcessState, out)
		case <-ticker.C:
		}
		if ping(s.Addr()) {
			s.proc = p
			return nil
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-p.done
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("redis-server on %s did not answer PING within %v\n%s", s.Addr(), startTimeout, out)
		}
	}
}

// ping reports whether a server answers PING with PONG at addr. It speaks
// RESP directly so that readiness does not depend on a client's retries.
func ping(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}

// do runs one command on a short-lived client of addr.
func do(ctx context.Context, addr string, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	return c.Do(ctx, args...).Result()
}
