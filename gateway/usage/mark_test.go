package usage_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/portico-gw/portico/gateway/usage"
)

// TestMarkKept: a mark SaveMark kept trims the spool again when it is
// opened, where the spool alone would bring back its last segment, and is
// the recorder's Mark; a mark of another spool is not.
func TestMarkKept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := open(t, dir, usage.Options{})
	for range 5 {
		if err := r.CloseWindow(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Spool().Trim(3); err != nil {
		t.Fatal(err)
	}
	if err := r.SaveMark(3); err != nil {
		t.Fatal(err)
	}
	if err := r.SaveMark(2); err != nil || r.Mark() != 3 {
		t.Errorf("SaveMark(2) after 3 = %v, Mark() = %d; want nil, 3", err, r.Mark())
	}
	id := r.SpoolID()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	r = open(t, dir, usage.Options{})
	if r.Mark() != 3 || r.Spool().First() != 4 {
		t.Errorf("reopened: Mark() = %d, spool First() = %d; want 3, 4", r.Mark(), r.Spool().First())
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	// A mark of another spool (the spool was lost and made anew) is
	// ignored.
	if err := os.WriteFile(filepath.Join(dir, "MARK"), []byte("0123456789abcdef0123456789abcdef 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = open(t, dir, usage.Options{})
	if r.SpoolID() != id || r.Mark() != 0 || r.Spool().First() != 1 {
		t.Errorf("a mark of another spool: Mark() = %d, First() = %d; want 0, 1", r.Mark(), r.Spool().First())
	}
}

// TestMarkAboveSpool: a spool that lost its segments (an operator freed
// the disk, an older copy of it) while SPOOLID and MARK stayed starts over
// under a new spool id, so its next windows take seqs the quota service
// does not have; and SaveMark refuses a mark above the spool.
func TestMarkAboveSpool(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := open(t, dir, usage.Options{NoSync: true})
	for range 5 {
		r.Record(call{key: "k", status: 200}.record(time.Now()))
		if err := r.CloseWindow(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SaveMark(6); err == nil {
		t.Error("SaveMark(6) of a spool whose last window is 5 succeeded")
	}
	if err := r.SaveMark(5); err != nil {
		t.Fatal(err)
	}
	old := r.SpoolID()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "spool", "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	for _, s := range segs {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	r = open(t, dir, usage.Options{NoSync: true})
	r.Record(call{key: "k", status: 200}.record(time.Now()))
	if err := r.CloseWindow(); err != nil {
		t.Fatal(err)
	}
	if r.SpoolID() == old {
		t.Errorf("the spool kept its id %s after losing the windows up to its mark", old)
	}
	if r.Mark() != 0 {
		t.Errorf("Mark() = %d on the new spool, want 0", r.Mark())
	}
	ws := windows(t, r.Spool())
	if len(ws) == 0 || ws[0].GetSeq() != 1 || ws[0].GetSpoolId() != r.SpoolID() {
		t.Fatalf("the new spool's windows = %v", ws)
	}
}
