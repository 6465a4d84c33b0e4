package proxy

import (
	"testing"
	"time"
)

func TestGRPCTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1S", time.Second, true},
		{"100m", 100 * time.Millisecond, true},
		{"99999999n", 99999999, true},
		{"2H", 2 * time.Hour, true},
		{"5u", 5 * time.Microsecond, true},
		{"99999999H", time.Duration(1<<63 - 1), true},
		{"", 0, false}, {"S", 0, false}, {"1", 0, false}, {"1s", 0, false}, {"-1S", 0, false}, {"123456789S", 0, false},
	} {
		got, ok := parseGRPCTimeout(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseGRPCTimeout(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	for _, d := range []time.Duration{0, 1, 999 * time.Microsecond, time.Millisecond, 15 * time.Second, 30 * time.Hour, 4000 * time.Hour} {
		s := formatGRPCTimeout(d)
		back, ok := parseGRPCTimeout(s)
		if !ok || back > d || (d >= time.Second && back < d-time.Second) || (d < time.Second && d >= time.Millisecond && back < d-time.Millisecond) {
			t.Errorf("formatGRPCTimeout(%v) = %q → %v: want a valid value no larger than %v", d, s, back, d)
		}
	}
}
