package fastlane_test

import (
	"time"

	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/portico-gw/portico/gateway/auth/keytable"
	"github.com/portico-gw/portico/gateway/fastlane"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

const (
	spoolA = "0123456789abcdef"
	spoolB = "fedcba9876543210"
)

func usageMark(rev uint64, node, spool string, seq uint64) *configv1.FastLaneEntry {
	return &configv1.FastLaneEntry{Rev: rev, Entry: &configv1.FastLaneEntry_UsageMark{
		UsageMark: &configv1.UsageMark{NodeId: node, SpoolId: spool, Seq: seq}}}
}

func mark(node, spool string, seq uint64) *configv1.UsageMark {
	return &configv1.UsageMark{NodeId: node, SpoolId: spool, Seq: seq}
}

// TestUsageMarks: each spool's newest mark reaches the hook once, in the
// order applied; an older or repeated mark does not; the key service's
// entries beside them are applied as ever, and MaxRev is theirs.
func TestUsageMarks(t *testing.T) {
	t.Parallel()
	var keys int
	l := fastlane.New(fastlane.Options{Now: func() time.Time { return t0 }, SetKeys: func(*keytable.Table) { keys++ }})
	var got []*configv1.UsageMark
	l.OnUsageMark(func(m *configv1.UsageMark) { got = append(got, m) })

	if err := l.Apply([]*configv1.FastLaneEntry{usageMark(100, "node-1", spoolA, 5), key(3, record("k1")), usageMark(101, "node-2", spoolA, 9)}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// Older and equal revisions of a spool's mark change nothing, however
	// high their seq; another spool of the same node is its own entry.
	if err := l.Apply([]*configv1.FastLaneEntry{usageMark(99, "node-1", spoolA, 50), usageMark(100, "node-1", spoolA, 50), usageMark(1, "node-1", spoolB, 2)}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := l.Apply([]*configv1.FastLaneEntry{usageMark(102, "node-1", spoolA, 8)}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := []*configv1.UsageMark{mark("node-1", spoolA, 5), mark("node-2", spoolA, 9), mark("node-1", spoolB, 2), mark("node-1", spoolA, 8)}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("marks passed to the hook (-want +got):\n%s", diff)
	}
	if m, ok := l.UsageMark("node-1", spoolA); !ok || m.GetSeq() != 8 {
		t.Errorf("UsageMark(node-1, A) = %v, %v, want seq 8", m, ok)
	}
	if _, ok := l.UsageMark("node-3", spoolA); ok {
		t.Error("UsageMark of a node with no mark: ok")
	}
	if keys != 1 || l.Keys().Len() != 1 {
		t.Errorf("the key entry beside the marks: SetKeys called %d times, %d keys; want 1, 1", keys, l.Keys().Len())
	}
	if got := l.MaxRev(); got != 3 {
		t.Errorf("MaxRev() = %d, want 3: the quota service's revisions are not the key service's", got)
	}
}

// TestUsageMarkHookLate: a hook set after marks arrived is passed the
// marks held; removing it stops the calls.
func TestUsageMarkHookLate(t *testing.T) {
	t.Parallel()
	l := fastlane.New(fastlane.Options{})
	if err := l.Apply([]*configv1.FastLaneEntry{usageMark(2, "node-2", spoolA, 4), usageMark(1, "node-1", spoolA, 3)}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	var got []*configv1.UsageMark
	l.OnUsageMark(func(m *configv1.UsageMark) { got = append(got, m) })
	want := []*configv1.UsageMark{mark("node-1", spoolA, 3), mark("node-2", spoolA, 4)}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("marks passed when the hook is set (-want +got):\n%s", diff)
	}
	l.OnUsageMark(nil)
	if err := l.Apply([]*configv1.FastLaneEntry{usageMark(3, "node-1", spoolA, 9)}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(got) != 2 {
		t.Errorf("the hook removed was called: %v", got[2:])
	}
}

// TestUsageMarkRefused: a mark that names no spool is refused and named;
// the rest of the update is applied.
func TestUsageMarkRefused(t *testing.T) {
	t.Parallel()
	l := fastlane.New(fastlane.Options{})
	var got []*configv1.UsageMark
	l.OnUsageMark(func(m *configv1.UsageMark) { got = append(got, m) })
	err := l.Apply([]*configv1.FastLaneEntry{usageMark(1, "", spoolA, 1), usageMark(0, "node-1", spoolA, 1), usageMark(2, "node-1", spoolA, 6)})
	if !fastlane.Refused(err) {
		t.Fatalf("Apply = %v, want refused entries", err)
	}
	if want := []*configv1.UsageMark{mark("node-1", spoolA, 6)}; !cmp.Equal(want, got, protocmp.Transform()) {
		t.Errorf("hook got %v, want %v", got, want)
	}
}

// TestSignedSnapshotMarks: a usage mark in the key service's signed
// snapshot is dropped; its keys are applied.
func TestSignedSnapshotMarks(t *testing.T) {
	t.Parallel()
	var keys int
	l := fastlane.New(fastlane.Options{Now: func() time.Time { return t0 }, SetKeys: func(*keytable.Table) { keys++ }})
	var got []*configv1.UsageMark
	l.OnUsageMark(func(m *configv1.UsageMark) { got = append(got, m) })
	entries := []*configv1.FastLaneEntry{usageMark(100, "node-1", spoolA, 1<<40), key(3, record("k1"))}
	if err := l.ApplySigned(1, entries); err != nil {
		t.Fatalf("ApplySigned: %v", err)
	}
	if len(got) != 0 {
		t.Errorf("marks from the signed snapshot reached the hook: %v", got)
	}
	if m, ok := l.UsageMark("node-1", spoolA); ok {
		t.Errorf("UsageMark(node-1, A) = %v after a signed snapshot", m)
	}
	if keys == 0 || len(entries) != 2 {
		t.Errorf("the snapshot's key was not applied (%d key sets), or its entries changed (%d)", keys, len(entries))
	}
}
