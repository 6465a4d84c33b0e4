package usage_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/usage"
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
