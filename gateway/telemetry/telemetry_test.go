package telemetry_test

import (
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/telemetry"
)

func TestParseTraceparent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", false},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"", false},
	} {
		tc2, ok := telemetry.ParseTraceparent(tc.in)
		if ok != tc.ok {
			t.Errorf("ParseTraceparent(%q) ok = %v, want %v", tc.in, ok, tc.ok)
			continue
		}
		if ok && strings.HasPrefix(tc.in, "00-") && tc2.String() != tc.in {
			t.Errorf("ParseTraceparent(%q).String() = %q", tc.in, tc2.String())
		}
	}
}

func TestChildKeepsTrace(t *testing.T) {
	t.Parallel()
	parent, _ := telemetry.ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	child := parent.Child()
	if child.TraceID != parent.TraceID || child.ParentID == parent.ParentID || !child.Sampled() {
		t.Errorf("Child() = %s from %s", child, parent)
	}
	if _, ok := telemetry.ParseTraceparent(telemetry.NewTrace(true).String()); !ok {
		t.Error("NewTrace does not produce a valid traceparent")
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	for id, ok := range map[string]bool{
		"abc": true, "0b5f7d3e-8c1a-4b59-9a0e-1c2d3e4f5a6b": true, "01HF8Z2X+/=_.:": true,
		"": false, "has space": false, "new\nline": false, strings.Repeat("a", 129): false, "é": false,
	} {
		if telemetry.ValidRequestID(id) != ok {
			t.Errorf("ValidRequestID(%q) = %v, want %v", id, !ok, ok)
		}
	}
	a, b := telemetry.NewRequestID(), telemetry.NewRequestID()
	if a == b || len(a) != 32 || !telemetry.ValidRequestID(a) {
		t.Errorf("NewRequestID = %q, %q", a, b)
	}
	if telemetry.RequestID("keep-me") != "keep-me" || telemetry.RequestID("bad id") == "bad id" {
		t.Error("RequestID does not keep valid ids and replace invalid ones")
	}
}

func FuzzParseTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz")
	f.Fuzz(func(t *testing.T, s string) {
		tc, ok := telemetry.ParseTraceparent(s)
		if !ok {
			return
		}
		again, ok := telemetry.ParseTraceparent(tc.String())
		if !ok || again != tc {
			t.Fatalf("ParseTraceparent(%q) = %v, but its String %q does not parse back", s, tc, tc.String())
		}
	})
}

func BenchmarkTraceChild(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		tc, _ := telemetry.ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		_ = tc.Child().String()
	}
}
