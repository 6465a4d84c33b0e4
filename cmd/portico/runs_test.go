package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunsStopTogether: when one run fails, the others are stopped, run
// returns once every one has returned, with the failure; a run that
// returns nil early stops nothing.
func TestRunsStopTogether(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var stopped atomic.Int32
	r := &runs{}
	r.add(func(context.Context) error { return nil }) // done at once, like tuneGC with GOGC set
	for range 2 {
		r.add(func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(10 * time.Millisecond) // a drain: run must wait for it
			stopped.Add(1)
			return nil
		})
	}
	r.add(func(context.Context) error {
		time.Sleep(20 * time.Millisecond)
		return boom
	})
	done := make(chan error, 1)
	go func() { done <- r.run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, boom) {
			t.Errorf("run = %v, want the failure", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after one run failed")
	}
	if n := stopped.Load(); n != 2 {
		t.Errorf("run returned with %d of 2 runs stopped", n)
	}
}

// TestRunsContextEnd: the process's context ending stops every run, and
// run returns nil.
func TestRunsContextEnd(t *testing.T) {
	t.Parallel()
	r := &runs{}
	r.add(func(ctx context.Context) error { <-ctx.Done(); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.run(ctx); err != nil {
		t.Errorf("run = %v, want nil", err)
	}
}
