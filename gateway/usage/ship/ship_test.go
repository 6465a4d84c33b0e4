package ship_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/usage/ship"
	"github.com/portico-gw/portico/gateway/usage/spool"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/testing/logbuf"
)

const (
	nodeID  = "node-1"
	spoolID = "0123456789abcdef0123456789abcdef"
)

// fakeSender keeps what it is sent; while fail is set, Send fails.
type fakeSender struct {
	mu       sync.Mutex
	fail     error
	attempts int
	got      []ship.Message
}

func (f *fakeSender) Send(ctx context.Context, msgs []ship.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.fail != nil {
		return f.fail
	}
	for _, m := range msgs {
		f.got = append(f.got, ship.Message{Key: slices.Clone(m.Key), Value: slices.Clone(m.Value)})
	}
	return nil
}

func (f *fakeSender) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

// windows decodes what the sender got.
func (f *fakeSender) windows(t *testing.T) []*quotav1.UsageWindow {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var ws []*quotav1.UsageWindow
	for _, m := range f.got {
		if string(m.Key) != nodeID {
			t.Errorf("message key %q, want %q", m.Key, nodeID)
		}
		w := &quotav1.UsageWindow{}
		if err := proto.Unmarshal(m.Value, w); err != nil {
			t.Fatalf("message does not decode: %v", err)
		}
		ws = append(ws, w)
	}
	return ws
}

func seqs(ws []*quotav1.UsageWindow) []uint64 {
	var s []uint64
	for _, w := range ws {
		s = append(s, w.GetSeq())
	}
	return s
}

func window(seq uint64, rows int) *quotav1.UsageWindow {
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC).Add(time.Duration(seq) * 10 * time.Second)
	w := &quotav1.UsageWindow{
		NodeId: nodeID, SpoolId: spoolID, Seq: seq, Parts: 1, Region: "eu",
		Start: timestamppb.New(start), End: timestamppb.New(start.Add(10 * time.Second)),
		Period: "2026-12",
	}
	for i := range rows {
		r := &quotav1.UsageRow{
			Caller:  &quotav1.Caller{KeyId: fmt.Sprintf("key-%06d", i), AppId: "app-" + strings.Repeat("x", 40), Tenant: "acme", Plan: "gold"},
			Product: "payments", RouteId: fmt.Sprintf("route-%03d", i%100), StatusClass: 2, Counted: uint64(i%7 + 1), Billable: uint64(i%7 + 1),
		}
		w.Rows = append(w.Rows, r)
		w.Counted += r.Counted
		w.Billable += r.Billable
		w.Latencies = append(w.Latencies, &quotav1.LatencyRow{Caller: r.Caller, RouteId: r.RouteId, Buckets: make([]uint64, 15)})
	}
	w.PeriodCounted, w.PeriodBillable = w.Counted*seq, w.Billable*seq
	return w
}

func openSpool(t *testing.T) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(t.TempDir(), spool.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	return sp
}

func appendWindows(t *testing.T, sp *spool.Spool, from, to uint64, rows int) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		b, err := proto.Marshal(window(seq, rows))
		if err != nil {
			t.Fatal(err)
		}
		if err := sp.Append(seq, b); err != nil {
			t.Fatal(err)
		}
	}
}

// start runs a shipper until the test ends.
func start(t *testing.T, opts ship.Options) *ship.Shipper {
	t.Helper()
	opts.NodeID, opts.SpoolID = nodeID, spoolID
	if opts.MinBackoff == 0 {
		opts.MinBackoff, opts.MaxBackoff = time.Millisecond, 5*time.Millisecond
	}
	s, err := ship.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestShipsInOrder(t *testing.T) {
	t.Parallel()
	sp := openSpool(t)
	appendWindows(t, sp, 1, 40, 3)
	f := &fakeSender{}
	s := start(t, ship.Options{Spool: sp, Sender: f, Batch: 7})
	waitFor(t, "40 windows", func() bool { return s.Stats().Shipped == 40 })

	appendWindows(t, sp, 41, 45, 3)
	s.Notify()
	waitFor(t, "45 windows", func() bool { return s.Stats().Shipped == 45 })

	ws := f.windows(t)
	want := make([]uint64, 45)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	if got := seqs(ws); !slices.Equal(got, want) {
		t.Errorf("shipped seqs %v, want %v", got, want)
	}
	if !proto.Equal(ws[9], window(10, 3)) {
		t.Errorf("window 10 shipped as %v, want %v", ws[9], window(10, 3))
	}
	st := s.Stats()
	if st.Next != 46 || st.Pending != 0 || st.Messages != 45 || st.Failures != 0 {
		t.Errorf("Stats() = %+v, want Next 46, Pending 0, Messages 45, Failures 0", st)
	}
}

// TestWindowsChannel: the recorder's signal wakes the shipper.
func TestWindowsChannel(t *testing.T) {
	t.Parallel()
	sp := openSpool(t)
	f := &fakeSender{}
	windows := make(chan struct{}, 1)
	s := start(t, ship.Options{Spool: sp, Sender: f, Windows: windows})
	for seq := uint64(1); seq <= 3; seq++ {
		appendWindows(t, sp, seq, seq, 1)
		windows <- struct{}{}
		waitFor(t, fmt.Sprintf("window %d", seq), func() bool { return s.Stats().Shipped == seq })
	}
}

func TestParts(t *testing.T) {
	t.Parallel()
	sp := openSpool(t)
	big := window(2, 6000)
	b, _ := proto.Marshal(big)
	if len(b) < ship.DefaultMaxMessageBytes+ship.DefaultMaxMessageBytes/4 {
		t.Fatalf("the test's big window takes %d bytes, want well over %d", len(b), ship.DefaultMaxMessageBytes)
	}
	appendWindows(t, sp, 1, 1, 2)
	if err := sp.Append(2, b); err != nil {
		t.Fatal(err)
	}
	appendWindows(t, sp, 3, 3, 2)
	f := &fakeSender{}
	s := start(t, ship.Options{Spool: sp, Sender: f})
	waitFor(t, "3 windows", func() bool { return s.Stats().Shipped == 3 })

	f.mu.Lock()
	for i, m := range f.got {
		if len(m.Value) > ship.DefaultMaxMessageBytes {
			t.Errorf("message %d takes %d bytes, over %d", i, len(m.Value), ship.DefaultMaxMessageBytes)
		}
	}
	f.mu.Unlock()
	ws := f.windows(t)
	parts := ws[1 : len(ws)-1]
	if len(parts) < 2 || ws[0].GetSeq() != 1 || ws[len(ws)-1].GetSeq() != 3 {
		t.Fatalf("shipped seqs %v, want 1, parts of 2 (at least 2), 3", seqs(ws))
	}
	v, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	var rows []*quotav1.UsageRow
	var lats []*quotav1.LatencyRow
	for i, p := range parts {
		if err := v.Validate(p); err != nil {
			t.Errorf("part %d: %v", i, err)
		}
		if p.GetSeq() != 2 || p.GetPart() != uint32(i) || p.GetParts() != uint32(len(parts)) {
			t.Errorf("part %d: seq %d part %d of %d, want seq 2 part %d of %d", i, p.GetSeq(), p.GetPart(), p.GetParts(), i, len(parts))
		}
		head := proto.Clone(p).(*quotav1.UsageWindow)
		head.Rows, head.Latencies, head.Part, head.Parts = nil, nil, 0, 0
		want := proto.Clone(big).(*quotav1.UsageWindow)
		want.Rows, want.Latencies, want.Part, want.Parts = nil, nil, 0, 0
		if !proto.Equal(head, want) {
			t.Errorf("part %d's header %v, want the window's %v", i, head, want)
		}
		rows = append(rows, p.GetRows()...)
		lats = append(lats, p.GetLatencies()...)
	}
	whole := proto.Clone(big).(*quotav1.UsageWindow)
	whole.Rows, whole.Latencies = rows, lats
	if !proto.Equal(whole, big) {
		t.Errorf("the parts' rows do not put the window back together: %d rows, %d latencies of %d", len(rows), len(lats), len(big.Rows))
	}
	if st := s.Stats(); st.Messages != uint64(len(ws)) {
		t.Errorf("Stats().Messages = %d, want %d", st.Messages, len(ws))
	}
}

func TestSplitOneRowParts(t *testing.T) {
	t.Parallel()
	w := window(1, 3)
	b, _ := proto.Marshal(w)
	// A bound under two rows: each row (and latency row) goes alone.
	parts, err := ship.Split(b, proto.Size(window(1, 0))+proto.Size(w.Rows[0])+20)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 6 {
		t.Fatalf("Split into %d parts, want 6 (3 rows, 3 latency rows)", len(parts))
	}
	if got, _ := ship.Split(b, len(b)); len(got) != 1 || &got[0][0] != &b[0] {
		t.Errorf("Split of a window that fits = %d parts, want the payload itself", len(got))
	}
	if _, err := ship.Split([]byte{0xff, 0xff}, 1); err == nil {
		t.Errorf("Split of garbage: no error")
	}
}

// TestRetry: while the sender fails the windows wait in the spool, new
// ones join them, and once it recovers all are shipped in order.
func TestRetry(t *testing.T) {
	t.Parallel()
	sp := openSpool(t)
	appendWindows(t, sp, 1, 3, 1)
	f := &fakeSender{}
	f.setFail(errors.New("kafka down"))
	var logs logbuf.Buffer
	s := start(t, ship.Options{Spool: sp, Sender: f, Batch: 2, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitFor(t, "retries", func() bool { return s.Stats().Failures >= 5 })
	appendWindows(t, sp, 4, 6, 1)
	s.Notify()
	st := s.Stats()
	if st.Shipped != 0 || st.Pending != 6 || st.LastError != "kafka down" {
		t.Errorf("Stats() while failing = %+v, want Shipped 0, Pending 6, LastError %q", st, "kafka down")
	}
	f.setFail(nil)
	waitFor(t, "6 windows", func() bool { return s.Stats().Shipped == 6 })
	if got := seqs(f.windows(t)); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6}) {
		t.Errorf("shipped seqs %v, want 1 to 6", got)
	}
	if st := s.Stats(); st.LastError != "" || st.Pending != 0 {
		t.Errorf("Stats() after recovery = %+v, want no LastError, Pending 0", st)
	}
	if n := strings.Count(logs.String(), "shipping windows failed"); n != 1 {
		t.Errorf("logged the failure %d times, want once:\n%s", n, logs.String())
	}
}

func TestTrim(t *testing.T) {
	t.Parallel()
	sp := openSpool(t)
	appendWindows(t, sp, 1, 5, 1)
	f := &fakeSender{}
	f.setFail(errors.New("down"))
	var onTrim atomic.Uint64
	s := start(t, ship.Options{Spool: sp, Sender: f, OnTrim: func(seq uint64) { onTrim.Store(onTrim.Load()*10 + seq) }})
	waitFor(t, "a failure", func() bool { return s.Stats().Failures > 0 })

	// Marks of another node, of another spool, are not the node's.
	s.Trim(&configv1.UsageMark{NodeId: "node-2", SpoolId: spoolID, Seq: 5})
	s.Trim(&configv1.UsageMark{NodeId: nodeID, SpoolId: "fedcba9876543210", Seq: 5})
	// The node's own: windows 1 to 3 were committed (an earlier run of
	// the node shipped them), and are neither kept nor shipped again.
	s.Trim(&configv1.UsageMark{NodeId: nodeID, SpoolId: spoolID, Seq: 3})
	waitFor(t, "the trim", func() bool { return s.Stats().Trimmed == 3 })
	if first := sp.First(); first != 4 {
		t.Errorf("spool First() = %d after the mark 3, want 4", first)
	}
	s.Trim(&configv1.UsageMark{NodeId: nodeID, SpoolId: spoolID, Seq: 2}) // older: nothing
	f.setFail(nil)
	waitFor(t, "2 windows", func() bool { return s.Stats().Shipped == 2 })
	if got := seqs(f.windows(t)); !slices.Equal(got, []uint64{4, 5}) {
		t.Errorf("shipped seqs %v, want 4, 5", got)
	}
	if st := s.Stats(); st.Trimmed != 3 || st.Next != 6 {
		t.Errorf("Stats() = %+v, want Trimmed 3, Next 6", st)
	}
	if got := onTrim.Load(); got != 3 {
		t.Errorf("OnTrim called with %d (digits in order), want 3 once", got)
	}
}

func TestResend(t *testing.T) {
	t.Parallel()
	sp := openSpool(t)
	appendWindows(t, sp, 1, 6, 1)
	f := &fakeSender{}
	var logs logbuf.Buffer
	s := start(t, ship.Options{Spool: sp, Sender: f, Batch: 2, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitFor(t, "6 windows", func() bool { return s.Stats().Shipped == 6 })

	s.Resend(2, 4)
	waitFor(t, "3 re-sent", func() bool { return s.Stats().Resent == 3 })
	s.Trim(&configv1.UsageMark{NodeId: nodeID, SpoolId: spoolID, Seq: 2})
	// 1 and 2 are trimmed; 7 and on are not spooled yet.
	s.Resend(1, 9)
	waitFor(t, "4 more re-sent", func() bool { return s.Stats().Resent == 7 })
	if got := seqs(f.windows(t)); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 2, 3, 4, 3, 4, 5, 6}) {
		t.Errorf("shipped seqs %v, want 1 to 6, then 2 to 4, then 3 to 6", got)
	}
	if !strings.Contains(logs.String(), "already trimmed") || !strings.Contains(logs.String(), "from=1 to=2") {
		t.Errorf("the skipped windows are not logged:\n%s", logs.String())
	}
	if st := s.Stats(); st.Shipped != 6 {
		t.Errorf("Stats().Shipped = %d, want 6 (re-sends apart)", st.Shipped)
	}
}

// TestRestart: a shipper started on a spool ships from its first record,
// committed or not, since only a mark says what the quota service has.
func TestRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sp, err := spool.Open(dir, spool.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	appendWindows(t, sp, 1, 4, 1)
	f := &fakeSender{}
	opts := ship.Options{Spool: sp, Sender: f, NodeID: nodeID, SpoolID: spoolID, MinBackoff: time.Millisecond}
	s, _ := ship.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, "4 windows", func() bool { return s.Stats().Shipped == 4 })
	s.Trim(&configv1.UsageMark{NodeId: nodeID, SpoolId: spoolID, Seq: 2})
	waitFor(t, "the trim", func() bool { return s.Stats().Trimmed == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sp.Close()

	sp = openSpool2(t, dir)
	f2 := &fakeSender{}
	opts.Spool, opts.Sender = sp, f2
	s2 := start(t, opts)
	// The spool forgets trims across a restart (its last segment comes
	// back whole); the mark comes again from the fast lane.
	s2.Trim(&configv1.UsageMark{NodeId: nodeID, SpoolId: spoolID, Seq: 2})
	waitFor(t, "the windows again", func() bool { return s2.Stats().Next == 5 })
	got := seqs(f2.windows(t))
	if len(got) == 0 || got[len(got)-1] != 4 || !slices.Contains(got, 3) {
		t.Errorf("after the restart shipped %v, want at least 3 and 4 again", got)
	}
}

func openSpool2(t *testing.T, dir string) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(dir, spool.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	return sp
}

func TestNewRequires(t *testing.T) {
	t.Parallel()
	sp := openSpool(t)
	for _, opts := range []ship.Options{
		{Sender: &fakeSender{}, NodeID: nodeID, SpoolID: spoolID},
		{Spool: sp, NodeID: nodeID, SpoolID: spoolID},
		{Spool: sp, Sender: &fakeSender{}, SpoolID: spoolID},
		{Spool: sp, Sender: &fakeSender{}, NodeID: nodeID},
	} {
		if _, err := ship.New(opts); err == nil {
			t.Errorf("New(%+v): no error", opts)
		}
	}
}

func TestSenderFunc(t *testing.T) {
	t.Parallel()
	sp := openSpool(t)
	appendWindows(t, sp, 1, 2, 1)
	var mu sync.Mutex
	var got int
	s := start(t, ship.Options{Spool: sp, Sender: ship.SenderFunc(func(ctx context.Context, msgs []ship.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got += len(msgs)
		return nil
	})})
	waitFor(t, "2 windows", func() bool { return s.Stats().Shipped == 2 })
	mu.Lock()
	defer mu.Unlock()
	if got != 2 {
		t.Errorf("the func was sent %d messages, want 2", got)
	}
}

// TestFlush: a stopping node ships what is left from where its shipper
// was, and gives up when its time is up.
func TestFlush(t *testing.T) {
	t.Parallel()
	sp := openSpool(t)
	appendWindows(t, sp, 1, 5, 1)
	fails := 2
	var got []uint64
	sender := ship.SenderFunc(func(ctx context.Context, msgs []ship.Message) error {
		if fails > 0 {
			fails--
			return errors.New("not yet")
		}
		for _, m := range msgs {
			w := &quotav1.UsageWindow{}
			if err := proto.Unmarshal(m.Value, w); err != nil {
				return err
			}
			got = append(got, w.GetSeq())
		}
		return nil
	})
	s, err := ship.New(ship.Options{Spool: sp, Sender: sender, NodeID: nodeID, SpoolID: spoolID, From: 3, Batch: 2,
		MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if !slices.Equal(got, []uint64{3, 4, 5}) {
		t.Errorf("Flush shipped %v, want 3, 4, 5", got)
	}
	if st := s.Stats(); st.Failures != 2 || st.Pending != 0 {
		t.Errorf("Stats() = %+v, want 2 failures, none pending", st)
	}

	appendWindows(t, sp, 6, 6, 1)
	fails = 1 << 30
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if err := s.Flush(short); err == nil || !strings.Contains(err.Error(), "windows 6 to 6 not shipped") {
		t.Errorf("Flush with the sender down = %v, want window 6 not shipped", err)
	}
}

// TestMarkAboveLast: a usage mark above the spool's last window (forged,
// or of a history of the spool this disk no longer has) is ignored: the
// windows the spool holds and the ones spooled after it are all shipped,
// and nothing is trimmed or saved.
func TestMarkAboveLast(t *testing.T) {
	t.Parallel()
	sp := openSpool(t)
	appendWindows(t, sp, 1, 5, 1)
	f := &fakeSender{}
	f.setFail(errors.New("down"))
	var saved atomic.Uint64
	s := start(t, ship.Options{Spool: sp, Sender: f, OnTrim: func(seq uint64) { saved.Store(seq) }})
	waitFor(t, "a failure", func() bool { return s.Stats().Failures > 0 })
	s.Trim(&configv1.UsageMark{NodeId: nodeID, SpoolId: spoolID, Seq: 1 << 40})
	s.Trim(&configv1.UsageMark{NodeId: nodeID, SpoolId: spoolID, Seq: 6})
	f.setFail(nil)
	appendWindows(t, sp, 6, 8, 1)
	s.Notify()
	waitFor(t, "windows 1 to 8 shipped", func() bool { return len(f.windows(t)) >= 8 })
	if got := seqs(f.windows(t)); !slices.Equal(got[:8], []uint64{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Errorf("shipped %v, want 1 to 8", got)
	}
	if st := s.Stats(); st.Trimmed != 0 || saved.Load() != 0 {
		t.Errorf("trimmed %d, saved %d after marks above the spool, want 0", st.Trimmed, saved.Load())
	}
}

// TestResendBounded: a window asked for again and again while the
// sender is down is sent once, and the ranges Resend queues stay bounded
// however many a caller sends; a range beyond the spool is cut at its
// last window.
func TestResendBounded(t *testing.T) {
	t.Parallel()
	sp := openSpool(t)
	appendWindows(t, sp, 1, 100, 1)
	f := &fakeSender{}
	s := start(t, ship.Options{Spool: sp, Sender: f, Batch: 10})
	waitFor(t, "100 windows", func() bool { return s.Stats().Shipped == 100 })
	f.setFail(errors.New("down"))
	for range 50 {
		s.Resend(1, 100)
	}
	for i := uint64(1); i <= 100; i++ {
		s.Resend(i, i)   // inside the range queued: nothing more
		s.Resend(i, 1e9) // beyond the spool: cut at 100
	}
	f.setFail(nil)
	waitFor(t, "100 re-sent", func() bool { return s.Stats().Resent >= 100 })
	s.Resend(1, 1) // queued last: once it is sent, everything before is
	waitFor(t, "the last re-send", func() bool { return s.Stats().Resent >= 101 })
	if got := s.Stats().Resent; got != 101 {
		t.Errorf("Stats().Resent = %d, want 101: each window once, then the last ask", got)
	}
}
