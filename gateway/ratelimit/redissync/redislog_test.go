package redissync_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-gw/portico/gateway/ratelimit"
	"github.com/portico-gw/portico/gateway/ratelimit/redissync"
)

// redisLogChild names the environment variable that makes
// TestRedisLogRouted the child process.
const redisLogChild = "REDISSYNC_TEST_REDIS_LOG_CHILD"

// redisLogPeriod is the child's limit on go-redis's lines, in place of
// 10 s.
const redisLogPeriod = 300 * time.Millisecond

// TestRedisLogRouted: while Redis refuses connections, go-redis's own
// lines reach the Runner's Logger as warnings, at most one per period,
// each after the first counting the lines left out, and none reaches
// stderr. go-redis has one logger per process, which the first Syncer
// sets, so the Runner runs in a child process: a Runner in this one might
// not be the first. Wall time about 1.5 s.
func TestRedisLogRouted(t *testing.T) {
	if os.Getenv(redisLogChild) != "" {
		runRedisLogChild(t)
		return
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRedisLogRouted$", "-test.count=1")
	cmd.Env = append(os.Environ(), redisLogChild+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the child: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("the child wrote to stderr, around slog:\n%s", stderr.String())
	}

	type record struct {
		Time       time.Time
		Level, Msg string
		Line       string
		Suppressed *int
	}
	var got []record
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "{") {
			continue // the test framework's own lines
		}
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("child line %q: %v", sc.Text(), err)
		}
		if r.Msg == "redis client problem" {
			got = append(got, r)
		}
	}
	// The child runs 1.2 s: a first warning at once, then one per 300 ms
	// at most, and go-redis tries the dial every 100 ms sync and more.
	if len(got) < 2 || len(got) > 5 {
		t.Fatalf("%d warnings of go-redis lines in 1.2s, want 2 to 5 (one per %v); child output:\n%s", len(got), redisLogPeriod, stdout.String())
	}
	left := 0
	for i, r := range got {
		if r.Level != "WARN" || !strings.Contains(r.Line, "connection refused") || strings.HasPrefix(r.Line, "redis:") || r.Suppressed == nil {
			t.Errorf("warning %d = %+v, want WARN with go-redis's refused dial, its prefix cut, and suppressed", i, r)
			continue
		}
		left += *r.Suppressed
		if i == 0 {
			if *r.Suppressed != 0 {
				t.Errorf("first warning suppressed=%d, want 0", *r.Suppressed)
			}
			continue
		}
		if gap := r.Time.Sub(got[i-1].Time); gap < redisLogPeriod {
			t.Errorf("warning %d came %v after the one before, want at least %v", i, gap, redisLogPeriod)
		}
		if *r.Suppressed == 0 {
			t.Errorf("warning %d suppressed=0, want the lines left out since warning %d", i, i-1)
		}
	}
	t.Logf("%d warnings for %d go-redis lines", len(got), len(got)+left)
}

// runRedisLogChild runs a Runner, with traffic on a global limit, against
// a closed port for 1.2 s, logging JSON to stdout.
func runRedisLogChild(t *testing.T) {
	redissync.SetRedisLogEvery(redisLogPeriod)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	tbl := ratelimit.NewTable(ratelimit.Options{ExpectedNodes: 2})
	t.Cleanup(tbl.Close)
	r := &redissync.Runner{
		Table: tbl, Client: client, Node: "node-0", Logger: slog.New(slog.NewJSONHandler(os.Stdout, nil)),
		Settings: func() (time.Duration, time.Duration) { return 100 * time.Millisecond, 50 * time.Millisecond },
	}
	ctx, cancel := context.WithTimeout(t.Context(), 1200*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	l := &ratelimit.Limit{ID: "plan/gold/default", Name: "default", Rate: 100, Burst: 100, Global: true}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		tbl.Take(l, "app-1")
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	<-done
}
