package distribution

import (
	"testing"
	"time"
)

func TestClockOffset(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name                    string
		sent, received, arrived time.Time
		want                    time.Duration
		ok                      bool
	}{
		{"in step, no delay", t0, t0, t0, 0, true},
		{"in step, symmetric legs", t0, t0.Add(10 * time.Millisecond), t0.Add(20 * time.Millisecond), 0, true},
		{"control ahead 2 min", t0, t0.Add(2*time.Minute + 10*time.Millisecond), t0.Add(20 * time.Millisecond), 2 * time.Minute, true},
		{"control behind 2 min", t0, t0.Add(-2*time.Minute + 10*time.Millisecond), t0.Add(20 * time.Millisecond), -2 * time.Minute, true},
		// received − (sent+arrived)/2, here 5 ms − 15 ms: the asymmetric
		// legs' error is half the difference, as NTP's.
		{"slow return leg", t0, t0.Add(5 * time.Millisecond), t0.Add(30 * time.Millisecond), -10 * time.Millisecond, true},
		{"years apart", t0, t0.AddDate(100, 0, 0), t0.Add(time.Second), t0.AddDate(100, 0, 0).Sub(t0) - 500*time.Millisecond, true},
		{"arrived before sent", t0, t0, t0.Add(-time.Millisecond), 0, false},
	} {
		got, ok := clockOffset(c.sent, c.received, c.arrived)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: clockOffset = %v, %v, want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
