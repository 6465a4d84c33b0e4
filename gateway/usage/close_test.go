package usage_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/usage"
)

// TestRecordAfterClose calls Record on several goroutines across Close:
// nothing crashes, and every call is either in a window or counted late.
func TestRecordAfterClose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := open(t, dir, usage.Options{})
	var calls atomic.Uint64
	var closed atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for after := 0; after < 1000; {
				// A call begun once Close has returned is surely late.
				wasClosed := closed.Load()
				r.Record(call{key: "k", status: 200}.record(time.Now()))
				calls.Add(1)
				if wasClosed {
					after++
				}
			}
		})
	}
	for deadline := time.Now().Add(30 * time.Second); calls.Load() < 10000; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d calls in 30 s", calls.Load())
		}
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	closed.Store(true)
	wg.Wait()
	if err := r.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	if err := r.CloseWindow(); err != usage.ErrClosed {
		t.Errorf("CloseWindow() after Close = %v, want ErrClosed", err)
	}
	late := r.Stats().Late
	got, _ := counted(spooled(t, dir)...)
	if got+late != calls.Load() || late < 4000 {
		t.Errorf("windows count %d, late %d, of %d calls; want all, at least 4000 late", got, late, calls.Load())
	}
}

// TestSeal: Seal spools the open window and leaves the spool open to read
// it from; calls after it are late; Close after it adds nothing.
func TestSeal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := open(t, dir, usage.Options{})
	for range 3 {
		r.Record(call{key: "k", status: 200}.record(time.Now()))
	}
	if err := r.Seal(); err != nil {
		t.Fatalf("Seal() = %v", err)
	}
	if err := r.Seal(); err != nil {
		t.Errorf("second Seal() = %v", err)
	}
	r.Record(call{key: "k", status: 200}.record(time.Now()))
	ws := windows(t, r.Spool())
	if got, _ := counted(ws...); got != 3 || r.Stats().Late != 1 {
		t.Errorf("after Seal: the spool counts %d, late %d; want 3, 1", got, r.Stats().Late)
	}
	last := r.Spool().Last()
	if err := r.CloseWindow(); err != usage.ErrClosed {
		t.Errorf("CloseWindow() after Seal = %v, want ErrClosed", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if ws := spooled(t, dir); len(ws) == 0 || ws[len(ws)-1].GetSeq() != last {
		t.Errorf("Close after Seal spooled more: last seq %d, want %d", ws[len(ws)-1].GetSeq(), last)
	}
	if err := r.Seal(); err != usage.ErrClosed {
		t.Errorf("Seal() after Close = %v, want ErrClosed", err)
	}
}
