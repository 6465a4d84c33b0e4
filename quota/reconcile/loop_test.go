package reconcile_test

import (
	"context"
	"testing"
	"time"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/quota/reconcile"
	"github.com/portico-gw/portico/testing/testclock"
)

// timer is Loop's After in a test: each wait is handed to the test,
// which moves the clock and fires it.
type timer struct {
	waits chan time.Duration
	fire  chan time.Time
}

func (tm *timer) after(d time.Duration) <-chan time.Time {
	tm.waits <- d
	return tm.fire
}

// TestLoop: the loop reconciles the current period and the previous one
// until it is final, wakes hourly and at a period's end + grace, closes
// the period then, and stops with its ctx.
func TestLoop(t *testing.T) {
	t.Parallel()
	st := sqliteStore(t)
	n1 := newNode(st, "n1")
	n1.emit(t, at("2026-10-31T23:59:50Z"), row(k1, "payments", 2, 1, 1))
	n1.emit(t, at("2026-11-30T23:59:50Z"), row(k1, "payments", 2, 1, 1))
	n1.emit(t, at("2026-12-01T00:00:00Z"), row(k1, "payments", 2, 1, 1))

	clock := testclock.New(at("2026-11-30T23:00:00Z"))
	tm := &timer{waits: make(chan time.Duration, 16), fire: make(chan time.Time)}
	reports := make(chan *quotav1.ReconcileReport, 16)
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Now: clock.Now, After: tm.after,
		Observe: func(rep *quotav1.ReconcileReport, err error) {
			if err != nil {
				t.Errorf("a run failed: %v", err)
			}
			reports <- rep
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Loop(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// run returns the next report, which must be of period.
	run := func(period string) *quotav1.ReconcileReport {
		t.Helper()
		select {
		case rep := <-reports:
			if rep.GetPeriod() != period {
				t.Fatalf("a run over %s, want %s", rep.GetPeriod(), period)
			}
			return rep
		case <-time.After(10 * time.Second):
			t.Fatalf("no run over %s", period)
		}
		return nil
	}
	wait := func(want time.Duration) {
		t.Helper()
		select {
		case d := <-tm.waits:
			if d != want {
				t.Fatalf("the loop waits %v, want %v", d, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the loop does not wait")
		}
	}

	// October (previous, ended) closes; November is reconciled.
	if rep := run("2026-10"); !rep.GetFinalised() {
		t.Errorf("October: %v", rep)
	}
	run(nov)
	wait(time.Hour)

	// At November's end: not closed yet (the grace); the loop wakes at
	// end + grace.
	clock.Set(at("2026-12-01T00:00:00Z"))
	tm.fire <- clock.Now()
	if rep := run(nov); rep.GetFinalised() || len(rep.GetBlocked()) != 0 {
		t.Errorf("November within the grace, not asked to close: %v", rep)
	}
	run(dec)
	wait(2*time.Minute + time.Millisecond)

	clock.Add(2*time.Minute + time.Millisecond)
	tm.fire <- clock.Now()
	if rep := run(nov); !rep.GetFinalised() {
		t.Errorf("November at its close: %v", rep)
	}
	run(dec)
	wait(time.Hour)

	// November is final: only December from now on.
	clock.Add(time.Hour)
	tm.fire <- clock.Now()
	run(dec)
	wait(time.Hour)
	cancel()
	<-done
	select {
	case rep := <-reports:
		t.Errorf("a run after the end: %v", rep)
	default:
	}
}
