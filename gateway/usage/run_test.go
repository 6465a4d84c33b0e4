package usage_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/usage"
	"github.com/portico-gw/portico/testing/testclock"
)

// TestRun lets Run close windows on the clock: they meet at multiples of
// Window, and Windows signals each.
func TestRun(t *testing.T) {
	t.Parallel()
	const window = 20 * time.Millisecond
	dir := t.TempDir()
	r, err := usage.Open(dir, usage.Options{NodeID: "node-1", Window: window, SyncInterval: 5 * time.Millisecond, MaxSeries: 64})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.Run(ctx); err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
	calls := 0
	deadline := time.After(30 * time.Second)
	for r.Spool().Last() < 3 {
		r.Record(call{key: "k", status: 200}.record(time.Now()))
		calls++
		select {
		case <-r.Windows():
		case <-deadline:
			t.Fatalf("after 30 s the spool holds %d windows", r.Spool().Last())
		}
	}
	cancel()
	wg.Wait()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	ws := spooled(t, dir)
	for i, w := range ws[1:] {
		start, end := w.GetStart().AsTime(), w.GetEnd().AsTime()
		if !start.Equal(ws[i].GetEnd().AsTime()) || start.Truncate(window) != start {
			t.Errorf("window %d starts at %v, want the end of the one before (%v), a multiple of %v", w.GetSeq(), start, ws[i].GetEnd().AsTime(), window)
		}
		// A late timer (a busy machine) may skip a multiple: the window
		// then spans more than one Window.
		if w.GetSeq() < uint64(len(ws)) && (end.Truncate(window) != end || !end.After(start)) {
			t.Errorf("window %d spans %v to %v, want one multiple of %v to a later one", w.GetSeq(), start, end, window)
		}
	}
	if got, _ := counted(ws...); got != uint64(calls) {
		t.Errorf("windows count %d calls, want %d", got, calls)
	}
}

// TestLateTimer: a window closes at the latest multiple of Window the
// clock has passed, so a timer that fires late, even by more than a
// Window, leaves every boundary on a multiple.
func TestLateTimer(t *testing.T) {
	t.Parallel()
	const window = 10 * time.Second
	t0 := time.Date(2026, 11, 30, 23, 59, 30, 0, time.UTC)
	clock := testclock.New(t0.Add(time.Second))
	dir := t.TempDir()
	r, err := usage.Open(dir, usage.Options{NodeID: "node-1", Window: window, NoSync: true, MaxSeries: 64, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	for _, step := range []struct {
		at   time.Time     // the multiple Run's timer waited for
		late time.Duration // how late it fired
	}{
		{t0.Add(window), 3 * time.Millisecond},
		{t0.Add(2 * window), 25 * time.Second}, // past the period's end
		{t0.Add(5 * window), window - time.Millisecond},
	} {
		r.Record(call{key: "k", status: 200}.record(clock.Now()))
		clock.Set(step.at.Add(step.late))
		if err := r.RotateAt(step.at); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	ws := spooled(t, dir)
	want := []time.Time{t0.Add(window), t0.Add(4 * window), t0.Add(5 * window)}
	if len(ws) < len(want) {
		t.Fatalf("spooled %d windows, want at least %d", len(ws), len(want))
	}
	for i, end := range want {
		if got := ws[i].GetEnd().AsTime(); !got.Equal(end) {
			t.Errorf("window %d ends at %v, want %v", ws[i].GetSeq(), got, end)
		}
		if i > 0 && !ws[i].GetStart().AsTime().Equal(want[i-1]) {
			t.Errorf("window %d starts at %v, want %v", ws[i].GetSeq(), ws[i].GetStart().AsTime(), want[i-1])
		}
	}
}

// TestSynced runs with syncing on: msync and fsync work on the files.
func TestSynced(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, err := usage.Open(dir, usage.Options{NodeID: "node-1", MaxSeries: 64})
	if err != nil {
		t.Fatal(err)
	}
	r.Record(call{key: "k", status: 200}.record(time.Now()))
	if err := r.Sync(); err != nil {
		t.Fatalf("Sync() = %v", err)
	}
	if err := r.CloseWindow(); err != nil {
		t.Fatalf("CloseWindow() = %v", err)
	}
	r.Record(call{key: "k", status: 200}.record(time.Now()))
	if err := r.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if got, _ := counted(spooled(t, dir)...); got != 2 {
		t.Errorf("windows count %d calls, want 2", got)
	}
}

// TestPeriodCountersGoBack: a node whose clock is 2 min ahead opens
// windows of December before its offset is measured; once it is, its
// windows go back to November, then on to December again. Each period's
// node counters go on from its own last window, so that in every period
// the windows add up to the counters its last window carries, which the
// reconciler checks.
func TestPeriodCountersGoBack(t *testing.T) {
	t.Parallel()
	node := time.Date(2026, 12, 1, 0, 0, 5, 0, time.UTC) // true time Nov 30 23:58:05
	clock := testclock.New(node)
	r := open(t, t.TempDir(), usage.Options{Now: clock.Now})
	step := func(calls int, at time.Duration) {
		t.Helper()
		for range calls {
			r.Record(call{key: "k", status: 200, forwarded: true}.record(clock.Now()))
		}
		clock.Set(node.Add(at))
		if err := r.CloseWindow(); err != nil {
			t.Fatal(err)
		}
	}
	step(5, 10*time.Second) // window 1: December, the offset unknown
	r.SetClockOffset(-2 * time.Minute)
	step(3, 20*time.Second)               // window 2: opened before the offset, December
	step(4, 2*time.Minute+10*time.Second) // window 3: Nov 30 23:58:25 corrected
	step(7, 2*time.Minute+20*time.Second) // window 4: December again
	step(2, 2*time.Minute+30*time.Second) // window 5: December
	type got struct {
		period  string
		counted uint64
		node    uint64
	}
	var ws []got
	for _, w := range windows(t, r.Spool()) {
		ws = append(ws, got{w.GetPeriod(), w.GetCounted(), w.GetPeriodCounted()})
	}
	want := []got{{"2026-12", 5, 5}, {"2026-12", 3, 8}, {"2026-11", 4, 4}, {"2026-12", 7, 15}, {"2026-12", 2, 17}}
	if !slices.Equal(ws, want) {
		t.Errorf("windows (period, counted, node counter) = %v, want %v", ws, want)
	}
}
