package backoff_test

import (
	"testing"
	"time"

	"github.com/portico-gw/portico/internal/backoff"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := backoff.Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	for _, bound := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		bound *= time.Millisecond
		if got := b.Bound(); got != bound {
			t.Fatalf("Bound() = %v, want %v", got, bound)
		}
		w := b.Next()
		if w < bound/2 || w > bound {
			t.Errorf("Next() = %v, want within [%v, %v]", w, bound/2, bound)
		}
	}
	b.Reset()
	if w := b.Next(); w > 100*time.Millisecond {
		t.Errorf("Next() after Reset = %v, want at most Min", w)
	}

	// The waits are drawn, not fixed.
	seen := map[time.Duration]bool{}
	for range 50 {
		c := backoff.Backoff{Min: time.Second, Max: time.Second}
		seen[c.Next()] = true
	}
	if len(seen) < 10 {
		t.Errorf("50 first waits took %d values: no jitter", len(seen))
	}
}
