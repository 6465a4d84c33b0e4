package consume_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/quota/consume"
	"github.com/portico-gw/portico/quota/store"
	"github.com/portico-gw/portico/testing/kafkatest"
	"github.com/portico-gw/portico/testing/logbuf"
)

const (
	topic  = "usage-test"
	period = "2026-12"
	spool  = "0123456789abcdef"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// logger logs to buf at debug, or to nowhere when buf is nil.
func logger(buf *logbuf.Buffer) *slog.Logger {
	if buf == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(testCtx(t), "sqlite:"+filepath.Join(t.TempDir(), "quota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// window is seq of node's spool with n calls of key, all forwarded.
func window(node string, seq, n uint64, key string) *quotav1.UsageWindow {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(seq) * 10 * time.Second)
	return &quotav1.UsageWindow{
		NodeId: node, SpoolId: spool, Seq: seq, Parts: 1, Region: "eu",
		Start: timestamppb.New(start), End: timestamppb.New(start.Add(10 * time.Second)), Period: period,
		Rows: []*quotav1.UsageRow{{Caller: &quotav1.Caller{KeyId: key, AppId: "app", Tenant: "t"},
			Product: "p", RouteId: "r", StatusClass: 2, Counted: n, Billable: n}},
		Counted: n, Billable: n, PeriodCounted: n * seq, PeriodBillable: n * seq,
	}
}

func encode(t *testing.T, w *quotav1.UsageWindow) kafka.Message {
	t.Helper()
	b, err := proto.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return kafka.Message{Key: []byte(w.GetNodeId()), Value: b}
}

func writer(t *testing.T, c *kafkatest.Cluster) *kafka.Writer {
	w := &kafka.Writer{Addr: kafka.TCP(c.Addrs()...), Topic: topic, RequiredAcks: kafka.RequireAll,
		Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func produce(t *testing.T, w *kafka.Writer, msgs ...kafka.Message) {
	t.Helper()
	if err := w.WriteMessages(testCtx(t), msgs...); err != nil {
		t.Fatalf("WriteMessages: %v", err)
	}
}

// start runs a Consumer of the test topic until the test ends (or it is
// stopped with the returned func, which waits for Run to return).
func start(t *testing.T, c *kafkatest.Cluster, opts consume.Options) (*consume.Consumer, func()) {
	t.Helper()
	opts.Brokers, opts.Topic, opts.Group = c.Addrs(), topic, "quota-test"
	if opts.Logger == nil {
		opts.Logger = logger(nil)
	}
	con, err := consume.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- con.Run(context.Background()) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if err := con.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := <-ran; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return con, stop
}

// waitStats waits until ok holds for the consumer's stats.
func waitStats(t *testing.T, what string, stats func() consume.Stats, ok func(consume.Stats) bool) consume.Stats {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		s := stats()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: stats %+v", what, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wantTotal(t *testing.T, st *store.Store, key string, want uint64) {
	t.Helper()
	tot, err := st.Total(testCtx(t), store.Key{Subject: "key:" + key, Product: "p", Period: period})
	if err != nil {
		t.Fatalf("Total(%s): %v", key, err)
	}
	if tot.Counts.Counted != want || tot.Counts.Billable != want {
		t.Errorf("Total(%s) = counted %d billable %d, want %d", key, tot.Counts.Counted, tot.Counts.Billable, want)
	}
}

// TestEachWindowOnce produces every window twice, over three nodes and
// two partitions: each is applied once, each second copy is a duplicate,
// and the totals are the windows' sums.
func TestEachWindowOnce(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, 2, topic)
	st := openStore(t)
	w := writer(t, c)
	var msgs []kafka.Message
	want := map[string]uint64{}
	for _, node := range []string{"n1", "n2", "n3"} {
		for seq := uint64(1); seq <= 10; seq++ {
			key := fmt.Sprintf("k%d", seq%3)
			m := encode(t, window(node, seq, seq, key))
			msgs = append(msgs, m, m)
			want[key] += seq
		}
	}
	produce(t, w, msgs...)
	con, _ := start(t, c, consume.Options{Store: st})
	s := waitStats(t, "every message", con.Stats, func(s consume.Stats) bool { return s.Applied+s.Duplicates >= 60 })
	if s.Applied != 30 || s.Duplicates != 30 || s.Invalid != 0 {
		t.Errorf("Stats() = %+v, want 30 applied, 30 duplicates", s)
	}
	for key, n := range want {
		wantTotal(t, st, key, n)
	}
	seqs, err := st.Sequences(testCtx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range seqs {
		if q.Contiguous != 10 {
			t.Errorf("Sequences: %s contiguous %d, want 10", q.NodeID, q.Contiguous)
		}
	}
}

// TestRestartResumes stops a consumer and starts another of the same
// group: it goes on from the commits, losing nothing and not starting
// over.
func TestRestartResumes(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, 2, topic)
	st := openStore(t)
	w := writer(t, c)
	for seq := uint64(1); seq <= 20; seq++ {
		produce(t, w, encode(t, window("n1", seq, 1, "k1")))
	}
	first, stop := start(t, c, consume.Options{Store: st})
	waitStats(t, "the first batch", first.Stats, func(s consume.Stats) bool { return s.Applied == 20 })
	stop()
	for seq := uint64(21); seq <= 30; seq++ {
		produce(t, w, encode(t, window("n1", seq, 1, "k1")))
	}
	second, _ := start(t, c, consume.Options{Store: st})
	s := waitStats(t, "the second batch", second.Stats, func(s consume.Stats) bool { return s.Applied == 10 })
	// The first consumer's last commit may not have been made when it
	// stopped: that message is delivered again, once.
	if s.Duplicates > 1 {
		t.Errorf("second consumer's Stats() = %+v: it re-read what the first committed", s)
	}
	wantTotal(t, st, "k1", 30)
}

// TestBrokerDown takes the broker away under a running consumer and
// brings it back: the consumer goes on with what is produced after.
func TestBrokerDown(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, 1, topic)
	st := openStore(t)
	w := writer(t, c)
	produce(t, w, encode(t, window("n1", 1, 5, "k1")))
	con, _ := start(t, c, consume.Options{Store: st})
	waitStats(t, "the first window", con.Stats, func(s consume.Stats) bool { return s.Applied == 1 })

	c.SetDown(true)
	cuts := c.Cuts()
	// The consumer's connections are cut; wait until it has tried to
	// come back at least once and been refused.
	waitStats(t, "a refused reconnect", con.Stats, func(consume.Stats) bool { return c.Cuts() > cuts+1 })
	c.SetDown(false)
	for seq := uint64(2); seq <= 5; seq++ {
		produce(t, w, encode(t, window("n1", seq, 5, "k1")))
	}
	waitStats(t, "the windows after", con.Stats, func(s consume.Stats) bool { return s.Applied == 5 })
	wantTotal(t, st, "k1", 25)
}

// TestBrokerAwaySeconds keeps the broker away for six seconds, long
// enough for kafka-go to lose its group coordinator, whose connection
// ends with an io.EOF that FetchMessage passes on: the consumer once took
// it for its own reader's close and stopped for good, so that no window
// was applied after a Kafka outage of more than a few seconds.
func TestBrokerAwaySeconds(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, 1, topic)
	st := openStore(t)
	w := writer(t, c)
	produce(t, w, encode(t, window("n1", 1, 5, "k1")))
	con, _ := start(t, c, consume.Options{Store: st})
	waitStats(t, "the first window", con.Stats, func(s consume.Stats) bool { return s.Applied == 1 })

	// The outage's length is what the test is about, so it waits for it.
	c.SetDown(true)
	away := time.NewTimer(6 * time.Second)
	<-away.C
	c.SetDown(false)
	produce(t, w, encode(t, window("n1", 2, 5, "k1")))
	waitStats(t, "the window after the outage", con.Stats, func(s consume.Stats) bool { return s.Applied == 2 })
	wantTotal(t, st, "k1", 10)
}

// TestPoisonCommitted sends what can never be applied (no protobuf, an
// invalid window, a window the store refuses) among good windows: each
// is counted and committed, and the next member of the group never sees
// them again.
func TestPoisonCommitted(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, 1, topic)
	st := openStore(t)
	w := writer(t, c)
	invalid := window("n1", 2, 1, "k1")
	invalid.SpoolId = "not hex"
	refused := window("n1", 3, 1, "k1")
	refused.Counted = 7 // the rows add up to 1
	produce(t, w,
		encode(t, window("n1", 1, 1, "k1")),
		kafka.Message{Key: []byte("n1"), Value: []byte("\xff\xff\xff not a window")},
		encode(t, invalid),
		encode(t, refused),
		encode(t, window("n1", 2, 1, "k1")))
	var logs logbuf.Buffer
	con, stop := start(t, c, consume.Options{Store: st, Logger: logger(&logs)})
	s := waitStats(t, "every message", con.Stats, func(s consume.Stats) bool { return s.Applied+s.Invalid == 5 })
	if s.Applied != 2 || s.Invalid != 3 {
		t.Errorf("Stats() = %+v, want 2 applied, 3 invalid", s)
	}
	stop()
	if log := logs.String(); strings.Contains(log, "not a window") || strings.Count(log, "skipped") != 3 {
		t.Errorf("the log shows a payload, or not each skipped message:\n%s", log)
	}
	produce(t, w, encode(t, window("n1", 3, 1, "k1")))
	next, _ := start(t, c, consume.Options{Store: st})
	s = waitStats(t, "the next window", next.Stats, func(s consume.Stats) bool { return s.Applied == 1 })
	if s.Invalid != 0 {
		t.Errorf("the next consumer's Stats() = %+v: the poison was not committed", s)
	}
	wantTotal(t, st, "k1", 3)
}

// failing is a store that fails its first n applies as a database that
// is down does.
type failing struct {
	consume.Store
	n atomic.Int64
}

var errDown = errors.New("connection refused")

func (f *failing) Apply(ctx context.Context, w *quotav1.UsageWindow) (store.Applied, error) {
	if f.n.Add(-1) >= 0 {
		return store.Applied{}, errDown
	}
	return f.Store.Apply(ctx, w)
}

// TestStoreDownRetried: a window the store fails to apply is tried again
// until it goes in, and the partition waits for it.
func TestStoreDownRetried(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, 1, topic)
	st := openStore(t)
	f := &failing{Store: st}
	f.n.Store(3)
	w := writer(t, c)
	produce(t, w, encode(t, window("n1", 1, 2, "k1")), encode(t, window("n1", 2, 2, "k1")))
	con, _ := start(t, c, consume.Options{Store: f, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond})
	s := waitStats(t, "both windows", con.Stats, func(s consume.Stats) bool { return s.Applied == 2 })
	if s.Retries != 3 || s.Invalid != 0 {
		t.Errorf("Stats() = %+v, want 3 retries", s)
	}
	wantTotal(t, st, "k1", 4)
}

// TestDrop: the fault hook skips a window, committed and counted, never
// applied.
func TestDrop(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, 1, topic)
	st := openStore(t)
	w := writer(t, c)
	produce(t, w, encode(t, window("n1", 1, 1, "k1")), encode(t, window("n1", 2, 1, "k1")), encode(t, window("n1", 3, 1, "k1")))
	con, _ := start(t, c, consume.Options{Store: st, Drop: func(w *quotav1.UsageWindow) bool { return w.GetSeq() == 2 }})
	s := waitStats(t, "every window", con.Stats, func(s consume.Stats) bool { return s.Applied+s.Dropped == 3 })
	if s.Dropped != 1 {
		t.Errorf("Stats() = %+v, want 1 dropped", s)
	}
	wantTotal(t, st, "k1", 2)
	seqs, err := st.Sequences(testCtx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 1 || seqs[0].Contiguous != 1 || len(seqs[0].Missing) != 1 || seqs[0].Missing[0] != 2 {
		t.Errorf("Sequences() = %+v, want contiguous 1, 2 missing", seqs)
	}
}

// TestLocal runs the in-process path: applied, duplicate, invalid (nil:
// sending again would not mend it), and a store that fails (an error:
// the sender keeps the window).
func TestLocal(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	f := &failing{Store: st}
	var marks atomic.Int64
	l, err := consume.NewLocal(consume.Options{Store: f, Logger: logger(nil),
		OnApply: func(_ *quotav1.UsageWindow, a store.Applied) {
			if a.Mark != nil {
				marks.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	one, err := proto.Marshal(window("n1", 1, 4, "k1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := l.Deliver(ctx, one); err != nil {
			t.Fatalf("Deliver #%d: %v", i+1, err)
		}
	}
	if err := l.Deliver(ctx, []byte("\xffjunk")); err != nil {
		t.Errorf("Deliver(junk) = %v, want nil (skipped)", err)
	}
	f.n.Store(1)
	two, err := proto.Marshal(window("n1", 2, 4, "k1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Deliver(ctx, two); !errors.Is(err, errDown) {
		t.Errorf("Deliver with the store down = %v, want %v", err, errDown)
	}
	if err := l.Deliver(ctx, two); err != nil {
		t.Errorf("Deliver again: %v", err)
	}
	if got, want := l.Stats(), (consume.Stats{Applied: 2, Duplicates: 1, Invalid: 1}); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
	if marks.Load() != 2 {
		t.Errorf("OnApply saw %d marks, want 2", marks.Load())
	}
	wantTotal(t, st, "k1", 8)
}

// gated is a store whose applies wait until open is closed.
type gated struct {
	consume.Store
	open chan struct{}
}

func (g *gated) Apply(ctx context.Context, w *quotav1.UsageWindow) (store.Applied, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return store.Applied{}, ctx.Err()
	}
	return g.Store.Apply(ctx, w)
}

// TestReady: Ready says no while windows that waited on the topic when
// it was first asked are not all applied, over every partition, and yes
// once they are, and from then on.
func TestReady(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, 3, topic)
	st := openStore(t)
	w := writer(t, c)
	var msgs []kafka.Message
	for _, node := range []string{"n1", "n2", "n3", "n4"} {
		for seq := uint64(1); seq <= 5; seq++ {
			msgs = append(msgs, encode(t, window(node, seq, 1, "k1")))
		}
	}
	produce(t, w, msgs...)
	g := &gated{Store: st, open: make(chan struct{})}
	con, _ := start(t, c, consume.Options{Store: g})
	err := con.Ready(testCtx(t))
	if err == nil || !strings.Contains(err.Error(), "not all applied yet") {
		t.Fatalf("Ready before any apply = %v, want the windows not applied", err)
	}
	close(g.open)
	deadline := time.Now().Add(90 * time.Second)
	for con.Ready(testCtx(t)) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Ready = %v after a minute and a half, stats %+v", con.Ready(testCtx(t)), con.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Ready: every window that waited is in.
	if s := con.Stats(); s.Applied != 20 {
		t.Errorf("Stats() when ready = %+v, want all 20 applied", s)
	}
	wantTotal(t, st, "k1", 20)
	// Windows produced after it was first asked do not make it unready.
	produce(t, w, encode(t, window("n1", 6, 1, "k1")))
	if err := con.Ready(testCtx(t)); err != nil {
		t.Errorf("Ready after more windows = %v, want nil", err)
	}
}

// TestReadyEmpty: a topic that holds nothing, or does not exist, is
// ready at once; brokers that do not answer are not.
func TestReadyEmpty(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, 2, topic)
	for _, tp := range []string{topic, "no-such-topic"} {
		con, err := consume.New(consume.Options{Brokers: c.Addrs(), Topic: tp, Group: "ready-test", Store: openStore(t), Logger: logger(nil)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = con.Close() })
		if err := con.Ready(testCtx(t)); err != nil {
			t.Errorf("Ready of %s = %v, want nil", tp, err)
		}
	}
	c.SetDown(true)
	t.Cleanup(func() { c.SetDown(false) })
	con, err := consume.New(consume.Options{Brokers: c.Addrs(), Topic: topic, Group: "ready-test-2", Store: openStore(t), Logger: logger(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = con.Close() })
	if err := con.Ready(testCtx(t)); err == nil || !strings.Contains(err.Error(), "not known yet") {
		t.Errorf("Ready with the brokers down = %v, want not known", err)
	}
}
