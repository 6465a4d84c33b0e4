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
