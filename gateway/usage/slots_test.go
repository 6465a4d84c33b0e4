package usage_test

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/usage"
	"github.com/portico-gw/portico/gateway/usage/spool"
)

// TestOpenDirSlots: OpenDir takes the first slot no recorder holds, a
// directory from before slots being the first; Adopt opens a released
// slot without opening a window, and leaves its generation as it was.
func TestOpenDirSlots(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := usage.Options{NodeID: "node-1", NoSync: true, Logger: slog.New(slog.DiscardHandler), MaxSeries: 64}
	legacy := open(t, dir, usage.Options{}) // files in dir itself
	if err := legacy.Close(); err != nil {
		t.Fatal(err)
	}
	first, err := usage.OpenDir(dir, opts)
	if err != nil || first.Dir() != dir {
		t.Fatalf("OpenDir on a directory from before slots = %v, %v; want the directory itself", first, err)
	}
	t.Cleanup(func() { first.Close() })
	second, err := usage.OpenDir(dir, opts)
	if err != nil || second.Dir() != filepath.Join(dir, "0") || second.SpoolID() == first.SpoolID() {
		t.Fatalf("OpenDir beside it = %v, %v; want slot 0 with a spool of its own", second, err)
	}
	t.Cleanup(func() { second.Close() })
	if slots, err := usage.Slots(dir); err != nil || len(slots) != 2 || slots[0] != dir {
		t.Errorf("Slots() = %v, %v; want %s and its slot 0", slots, err, dir)
	}
	if _, err := usage.Adopt(dir, opts); !errors.Is(err, spool.ErrLocked) {
		t.Errorf("Adopt of a held slot = %v, want spool.ErrLocked", err)
	}

	for range 3 {
		first.Record(call{key: "k", status: 200}.record(time.Now()))
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	gen, err := usage.Generation(dir)
	if err != nil || gen == 0 {
		t.Fatalf("Generation() = %d, %v; want one above 0", gen, err)
	}
	a, err := usage.Adopt(dir, opts)
	if err != nil {
		t.Fatalf("Adopt of a released slot = %v", err)
	}
	last := a.Spool().Last()
	if got, _ := counted(windows(t, a.Spool())...); got != 3 || a.Waiting() {
		t.Errorf("adopted spool counts %d (waiting %v), want 3", got, a.Waiting())
	}
	a.Record(call{key: "k", status: 200}.record(time.Now()))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if ws := spooled(t, dir); ws[len(ws)-1].GetSeq() != last {
		t.Errorf("the adopted recorder spooled a window: last seq %d, want %d", ws[len(ws)-1].GetSeq(), last)
	}
	if g, err := usage.Generation(dir); err != nil || g != gen {
		t.Errorf("Generation() after Adopt = %d, %v; want %d", g, err, gen)
	}
}
