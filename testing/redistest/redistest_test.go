package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-gw/portico/testing/redistest"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestStart(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	c := s.Client(t)
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx(t), "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v, want %q", got, err, "v")
	}
	for _, cfg := range []struct{ name, want string }{{"save", ""}, {"appendonly", "no"}, {"bind", "127.0.0.1"}} {
		got, err := c.ConfigGet(ctx(t), cfg.name).Result()
		if err != nil || got[cfg.name] != cfg.want {
			t.Errorf("CONFIG GET %s = %v, %v, want %q", cfg.name, got, err, cfg.want)
		}
	}
}

func TestKillRestart(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	addr := s.Addr()

	s.Kill()
	if err := c.Ping(ctx(t)).Err(); err == nil {
		t.Fatal("PING after Kill succeeded, want an error")
	}
	s.Kill() // a second Kill is a no-op

	s.Restart(t)
	if s.Addr() != addr {
		t.Errorf("Addr() after Restart = %s, want %s", s.Addr(), addr)
	}
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if err := c.Get(ctx(t), "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET k after Restart: err = %v, want redis.Nil (no persistence)", err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	if got := len(cl.Addrs()); got != 3 {
		t.Fatalf("len(Addrs()) = %d, want 3", got)
	}
	c := cl.Client(t)
	for i := range 300 {
		if err := c.Set(ctx(t), fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET key-%d: %v", i, err)
		}
	}
	var mu sync.Mutex
	var sizes []int64
	err := c.ForEachMaster(ctx(t), func(ctx context.Context, m *redis.Client) error {
		info, err := m.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: CLUSTER INFO = %q", m.Options().Addr, info)
		}
		n, err := m.DBSize(ctx).Result()
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, n := range sizes {
		if n == 0 {
			t.Errorf("a master holds no keys: sizes %v", sizes)
		}
		total += n
	}
	if len(sizes) != 3 || total != 300 {
		t.Errorf("keys per master = %v, want 3 masters holding 300 in all", sizes)
	}
}

func TestClusterNeedsThreeMasters(t *testing.T) {
	t.Parallel()
	r := runTB(t, func(tb testing.TB) { redistest.StartCluster(tb, 2) })
	if !r.failed || !strings.Contains(r.msg, "at least 3 masters") {
		t.Errorf("StartCluster(2): failed = %v, message %q; want a failure about 3 masters", r.failed, r.msg)
	}
}

func TestDelayProxy(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	p := redistest.DelayProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 50 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })

	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}
	p.SetDelay(200 * time.Millisecond)
	if err := c.Ping(ctx(t)).Err(); err == nil {
		t.Fatal("PING with a 200ms delay and a 50ms read timeout succeeded, want a timeout")
	}
	p.SetDelay(0)
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after SetDelay(0): %v", err)
	}
}

func TestMissingServer(t *testing.T) {
	// Not parallel: it changes PATH and CI.
	t.Setenv("PATH", t.TempDir())
	for _, tc := range []struct {
		ci         string
		wantFailed bool
	}{
		{ci: "", wantFailed: false},
		{ci: "true", wantFailed: true},
	} {
		t.Setenv("CI", tc.ci)
		r := runTB(t, func(tb testing.TB) { redistest.Start(tb) })
		if r.failed != tc.wantFailed || r.skipped == tc.wantFailed {
			t.Errorf("CI=%q: Start failed = %v, skipped = %v; want failed = %v", tc.ci, r.failed, r.skipped, tc.wantFailed)
		}
		if !strings.Contains(r.msg, "apt-get install") {
			t.Errorf("CI=%q: message %q does not say how to install redis-server", tc.ci, r.msg)
		}
	}
}

// fakeTB records how a helper ends the test instead of ending it.
type fakeTB struct {
	testing.TB
	mu      sync.Mutex
	failed  bool
	skipped bool
	msg     string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Cleanup(fn func()) { f.TB.Cleanup(fn) }
func (f *fakeTB) Fatal(args ...any) { f.end(&f.failed, fmt.Sprint(args...)) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.end(&f.failed, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Skip(args ...any) { f.end(&f.skipped, fmt.Sprint(args...)) }
func (f *fakeTB) Skipf(format string, args ...any) {
	f.end(&f.skipped, fmt.Sprintf(format, args...))
}

func (f *fakeTB) end(flag *bool, msg string) {
	f.mu.Lock()
	*flag, f.msg = true, msg
	f.mu.Unlock()
	runtime.Goexit()
}

type result struct {
	failed, skipped bool
	msg             string
}

// runTB runs fn with a fakeTB on its own goroutine, as testing does, so
// that Fatal and Skip can end it.
func runTB(t *testing.T, fn func(testing.TB)) result {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return result{f.failed, f.skipped, f.msg}
}
