package billing_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/usage"
	"github.com/portico-gw/portico/gateway/usage/kafka"
	"github.com/portico-gw/portico/gateway/usage/ship"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// nodeToken is the nodes' credential on the control plane's streams.
const nodeToken = "billing-test-node-token-0123456789abcdef"

// nodeConfig is everything a node is started with, in process or in a
// child process (as JSON in childEnv), so that both run the same node.
type nodeConfig struct {
	ID, Region string
	// Dir is the usage directory; a restarted node is given the same.
	Dir        string
	ControlURL string
	Brokers    []string
	Topic      string
	Window     time.Duration
	// Shift is the whole test's clock, real time plus Shift (see world);
	// Skew is this node's own error on top of it.
	Shift, Skew time.Duration
}

func (c nodeConfig) now() time.Time { return time.Now().Add(c.Shift + c.Skew) }

// twice is a Sender that delivers every batch twice, as a producer
// retrying a batch whose acknowledgement was lost does.
type twice struct {
	ship.Sender
	extra atomic.Uint64 // the messages sent a second time
}

func (s *twice) Send(ctx context.Context, msgs []ship.Message) error {
	if err := s.Sender.Send(ctx, msgs); err != nil {
		return err
	}
	if err := s.Sender.Send(ctx, msgs); err != nil {
		return err
	}
	s.extra.Add(uint64(len(msgs)))
	return nil
}

// newNode builds the node of cfg on ln. close closes its Kafka writer;
// call it after the node's Run returned.
func newNode(cfg nodeConfig, ln net.Listener, log *slog.Logger) (n *gateway.Node, tw *twice, close func(), err error) {
	ks, err := kafka.New(kafka.Options{Brokers: cfg.Brokers, Topic: cfg.Topic, Logger: log})
	if err != nil {
		return nil, nil, nil, err
	}
	tw = &twice{Sender: ks}
	n, err = gateway.New(gateway.Options{
		Logger:       log,
		Listeners:    []gateway.Listener{{Pool: "public", Listener: ln}},
		DrainTimeout: 5 * time.Second,
		Now:          cfg.now,
		Control:      &gateway.ControlOptions{URL: cfg.ControlURL, Token: nodeToken, NodeID: cfg.ID, Region: cfg.Region},
		Usage: &gateway.UsageOptions{
			Dir: cfg.Dir, Window: cfg.Window, NoSync: true, Sender: tw,
			// Long enough for a Kafka that is up: a node that stops ships
			// its last window, which the test waits for.
			FlushTimeout: 30 * time.Second,
		},
	})
	if err != nil {
		_ = ks.Close()
		return nil, nil, nil, err
	}
	return n, tw, func() { _ = ks.Close() }, nil
}

// nodeStats is what a node says of itself: the calls its handler
// returned from (each one counted by then: the node counts a call in the
// handler's last step), and its usage recorder's and shipper's counters.
type nodeStats struct {
	Served uint64
	Usage  usage.Stats
	Ship   ship.Stats
	Extra  uint64 // messages its Sender sent twice
}

// node is a running node, in process or a child process.
type node interface {
	id() string
	url() string
	stats(t *testing.T) nodeStats
	// stop stops the node gracefully (it ships its last window) and
	// returns its stats after.
	stop(t *testing.T) nodeStats
}

// localNode is a node in the test's process.
type localNode struct {
	cfg    nodeConfig
	n      *gateway.Node
	tw     *twice
	addr   string
	cancel context.CancelFunc
	done   chan error
	closeK func()
	once   sync.Once
	final  nodeStats
}

func startLocal(t *testing.T, cfg nodeConfig) *localNode {
	t.Helper()
	n, tw, closeK, err := newNode(cfg, gatewaytest.Listen(t), gatewaytest.Logger())
	if err != nil {
		t.Fatalf("node %s: %v", cfg.ID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &localNode{cfg: cfg, n: n, tw: tw, addr: n.Addrs()[0].String(), cancel: cancel, done: make(chan error, 1), closeK: closeK}
	go func() { l.done <- n.Run(ctx) }()
	t.Cleanup(func() { l.stop(t) })
	return l
}

func (l *localNode) id() string  { return l.cfg.ID }
func (l *localNode) url() string { return "http://" + l.addr }

func (l *localNode) stats(*testing.T) nodeStats {
	rec, sh, _ := l.n.UsageStats()
	return nodeStats{Usage: rec, Ship: sh, Extra: l.tw.extra.Load()}
}

func (l *localNode) stop(t *testing.T) nodeStats {
	l.once.Do(func() {
		l.cancel()
		select {
		case err := <-l.done:
			if err != nil {
				t.Errorf("node %s: Run: %v", l.cfg.ID, err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("node %s did not stop within 60 s", l.cfg.ID)
		}
		l.closeK()
		l.final = l.stats(t)
	})
	return l.final
}

// The child process: the test binary run again with childEnv set runs
// TestHelperNode, which runs a node of the config in childEnv until
// SIGTERM (or dies by SIGKILL).
const childEnv = "PORTICO_BILLING_NODE"

// The lines the child writes on its stdout.
const (
	childAddrs = "BILLING-NODE-ADDRS "
	childFinal = "BILLING-NODE-FINAL "
)

// TestHelperNode is the child process of the tests that kill a node; it
// is skipped unless one of them runs it.
//
// It serves the node's handler on a listener of its own, wrapped to count
// every call the handler returned from, and its stats on another, and
// writes both addresses on stdout. The count is the node's own word that
// a call is counted: the node records a call (usage.Recorder.Record) in
// the last step of its handler, and a client may see the answer before
// that step ran.
func TestHelperNode(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("the billing tests run this as their child process")
	}
	var cfg nodeConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	own, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, tw, closeK, err := newNode(cfg, own, log)
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Uint64
	h := n.Handler("public")
	front := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		served.Add(1)
	}), ReadHeaderTimeout: 10 * time.Second}
	stats := func() nodeStats {
		rec, sh, _ := n.UsageStats()
		return nodeStats{Served: served.Load(), Usage: rec, Ship: sh, Extra: tw.extra.Load()}
	}
	statsSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(stats())
	}), ReadHeaderTimeout: 10 * time.Second}
	lnFront, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lnStats, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = front.Serve(lnFront) }()
	go func() { _ = statsSrv.Serve(lnStats) }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	fmt.Printf("%s%s %s\n", childAddrs, lnFront.Addr(), lnStats.Addr())
	<-ctx.Done()
	// The front first: the node drains what it serves itself.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = front.Shutdown(sctx)
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	closeK()
	b, _ := json.Marshal(stats())
	fmt.Printf("%s%s\n", childFinal, b)
	_ = statsSrv.Close()
}

// childNode is a node in a child process.
type childNode struct {
	cfg       nodeConfig
	cmd       *exec.Cmd
	front     string
	statsAddr string
	out       *syncBuffer
	final     chan nodeStats
	exited    chan error
	once      sync.Once
	stopped   nodeStats
	client    *http.Client
}

// syncBuffer is the child's output, written by its pipes' copiers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func startChild(t *testing.T, cfg nodeConfig) *childNode {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperNode$", "-test.count=1", "-test.timeout=20m")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	c := &childNode{cfg: cfg, cmd: cmd, out: &syncBuffer{}, final: make(chan nodeStats, 1), exited: make(chan error, 1),
		client: &http.Client{Timeout: 10 * time.Second}}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = c.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = fmt.Fprintln(c.out, line)
			if a, ok := strings.CutPrefix(line, childAddrs); ok {
				addrs <- a
			}
			if f, ok := strings.CutPrefix(line, childFinal); ok {
				var s nodeStats
				if err := json.Unmarshal([]byte(f), &s); err == nil {
					c.final <- s
				}
			}
		}
	}()
	go func() {
		<-scanned
		c.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		c.wait()
	})
	select {
	case a := <-addrs:
		c.front, c.statsAddr, _ = strings.Cut(a, " ")
	case err := <-c.exited:
		t.Fatalf("node %s (child) exited before serving: %v; output:\n%s", cfg.ID, err, c.out)
	case <-time.After(60 * time.Second):
		t.Fatalf("node %s (child) did not serve within 60 s; output:\n%s", cfg.ID, c.out)
	}
	return c
}

// wait waits for the child to exit and returns how it ended (nil if
// it was waited for before).
func (c *childNode) wait() error {
	var err error
	c.once.Do(func() { err = <-c.exited })
	return err
}

func (c *childNode) id() string  { return c.cfg.ID }
func (c *childNode) url() string { return "http://" + c.front }

func (c *childNode) stats(t *testing.T) nodeStats {
	t.Helper()
	resp, err := c.client.Get("http://" + c.statsAddr)
	if err != nil {
		t.Fatalf("node %s (child) stats: %v; output:\n%s", c.cfg.ID, err, c.out)
	}
	defer resp.Body.Close()
	var s nodeStats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatalf("node %s (child) stats: %v", c.cfg.ID, err)
	}
	return s
}

// kill SIGKILLs the child and waits until it is gone.
func (c *childNode) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := c.wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("node %s (child) ended with %v, want SIGKILL", c.cfg.ID, err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("node %s (child) ended with %v, want SIGKILL", c.cfg.ID, err)
	}
}

func (c *childNode) stop(t *testing.T) nodeStats {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("node %s (child): %v", c.cfg.ID, err)
	}
	select {
	case s := <-c.final:
		c.stopped = s
	case <-time.After(90 * time.Second):
		t.Fatalf("node %s (child) did not stop within 90 s; output:\n%s", c.cfg.ID, c.out)
	}
	if err := c.wait(); err != nil {
		t.Fatalf("node %s (child) ended with %v; output:\n%s", c.cfg.ID, err, c.out)
	}
	return c.stopped
}
