package usage_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/portico-gw/portico/gateway/usage"
	"github.com/portico-gw/portico/gateway/usage/spool"
)

// TestSpoolFull fills the spool: windows go on counting, nothing is lost,
// and the waiting windows are spooled once there is room again.
func TestSpoolFull(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := open(t, dir, usage.Options{SpoolBytes: 1024})
	c := call{key: "k", route: "r", product: "p", status: 200, forwarded: true}
	calls := 0
	record := func(n int) {
		for range n {
			r.Record(c.record(t0))
			calls++
		}
	}
	var err error
	for i := 0; i < 50 && err == nil; i++ {
		record(1)
		err = r.CloseWindow()
	}
	if !errors.Is(err, spool.ErrFull) {
		t.Fatalf("CloseWindow() = %v after filling the spool, want ErrFull", err)
	}
	if s := r.Stats(); !s.SpoolFull || s.SpoolFullTotal != 1 {
		t.Errorf("Stats() = %+v, want SpoolFull, SpoolFullTotal 1", s)
	}
	// Still full: the open window goes on counting.
	record(10)
	if err := r.CloseWindow(); !errors.Is(err, spool.ErrFull) {
		t.Fatalf("CloseWindow() = %v while full, want ErrFull", err)
	}
	record(10)
	if s := r.Stats(); !s.SpoolFull || s.SpoolFullTotal != 1 {
		t.Errorf("Stats() = %+v, want SpoolFull, still one episode", s)
	}
	ws := windows(t, r.Spool())
	if err := r.Spool().Trim(r.Spool().Last()); err != nil {
		t.Fatal(err)
	}
	if err := r.CloseWindow(); err != nil {
		t.Fatalf("CloseWindow() = %v after Trim", err)
	}
	if s := r.Stats(); s.SpoolFull || s.SpoolFullTotal != 1 {
		t.Errorf("Stats() = %+v after Trim, want not SpoolFull", s)
	}
	more := windows(t, r.Spool())
	if len(more) != 2 || more[0].GetSeq() != ws[len(ws)-1].GetSeq()+1 {
		t.Fatalf("after Trim the spool holds %d windows from seq %d, want the 2 that waited from %d", len(more), more[0].GetSeq(), ws[len(ws)-1].GetSeq()+1)
	}
	ws = append(ws, more...)
	if got, _ := counted(ws...); got != uint64(calls) || ws[len(ws)-1].GetPeriodCounted() != got {
		t.Errorf("windows count %d calls, period counter %d; want %d", got, ws[len(ws)-1].GetPeriodCounted(), calls)
	}

	// Full again at Close: the window stays in the file, and the next Open
	// (with room, and another MaxSeries, so a window file of another
	// layout) spools it.
	for i := 0; i < 50 && !r.Stats().SpoolFull; i++ {
		record(1)
		r.CloseWindow()
	}
	record(3)
	last := r.Spool().Last()
	if err := r.Close(); err != nil {
		t.Errorf("Close() = %v with the spool full, want nil", err)
	}
	r2 := open(t, dir, usage.Options{SpoolBytes: 1 << 20, MaxSeries: 100})
	rest := windows(t, r2.Spool())
	var after []int
	for _, w := range rest {
		if w.GetSeq() > ws[len(ws)-1].GetSeq() {
			ws = append(ws, w)
			after = append(after, int(w.GetSeq()))
		}
	}
	if got, _ := counted(ws...); got != uint64(calls) {
		t.Errorf("after reopening, windows count %d calls, want %d (seqs %v spooled after %d)", got, calls, after, last)
	}
	if s := r2.Stats(); s.Recovered != 2 {
		t.Errorf("reopened Stats().Recovered = %d, want 2", s.Recovered)
	}
	for range 7 {
		r2.Record(c.record(t0))
	}
	if err := r2.CloseWindow(); err != nil {
		t.Fatal(err)
	}
	ws2 := windows(t, r2.Spool())
	if got := ws2[len(ws2)-1].GetPeriodCounted(); got != uint64(calls+7) {
		t.Errorf("period counter %d in the new window file, want %d", got, calls+7)
	}
}

// TestBadWindowFile opens a directory whose window file is not one: it is
// set aside, and counting starts afresh.
func TestBadWindowFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "window.map"), []byte("not a window file"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := open(t, dir, usage.Options{})
	r.Record(call{key: "k", status: 200}.record(t0))
	if err := r.CloseWindow(); err != nil {
		t.Fatal(err)
	}
	if got, _ := counted(windows(t, r.Spool())...); got != 1 {
		t.Errorf("windows count %d calls, want 1", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "window.map.bad")); err != nil || string(b) != "not a window file" {
		t.Errorf("window.map.bad holds %q, %v; want the old file", b, err)
	}
}

// TestMaxSeries passes the bound on a window's rows: the calls fold into
// overflow rows, and past those into the catch-all rows, counted exactly.
func TestMaxSeries(t *testing.T) {
	t.Parallel()
	r := open(t, t.TempDir(), usage.Options{MaxSeries: 4})
	for i := range 20 {
		r.Record(call{key: "k", route: fmt.Sprintf("r%02d", i), product: "p", status: 200}.record(t0))
	}
	if err := r.CloseWindow(); err != nil {
		t.Fatal(err)
	}
	w := windows(t, r.Spool())[0]
	want := map[string][2]uint64{"k/// p  2xx": {16, 0}}
	for i := range 4 {
		want[fmt.Sprintf("k/// p r%02d 2xx", i)] = [2]uint64{1, 0}
	}
	if got := rows(w); !equal(got, want) {
		t.Errorf("rows = %v, want %v", got, want)
	}
	if n := len(w.GetLatencies()); n != 5 {
		t.Errorf("%d latency rows, want 5 (4 routes and the overflow)", n)
	}
	if s := r.Stats(); s.Folded != 16 {
		t.Errorf("Stats().Folded = %d, want 16", s.Folded)
	}

	// 200 callers: 4 rows, then as many overflow rows as the file has
	// room for (a quarter of MaxSeries plus 64), then the catch-all.
	for i := range 200 {
		r.Record(call{key: fmt.Sprintf("k%03d", i), route: "r", product: "p", status: 200}.record(t0))
	}
	if err := r.CloseWindow(); err != nil {
		t.Fatal(err)
	}
	w = windows(t, r.Spool())[1]
	got := rows(w)
	if c, _ := counted(w); c != 200 || got["///   2xx"][0] != 200-4-65 {
		t.Errorf("window counts %d calls, %d in the catch-all row; want 200, %d", c, got["///   2xx"][0], 200-4-65)
	}
}

// TestSplitWindow spools a window larger than a spool record as several.
func TestSplitWindow(t *testing.T) {
	defer usage.SetChunkLimit(1000)()
	r := open(t, t.TempDir(), usage.Options{})
	for i := range 100 {
		r.Record(call{key: "k", route: fmt.Sprintf("route-%03d", i), product: "p", status: 200, forwarded: true}.record(t0))
	}
	if err := r.CloseWindow(); err != nil {
		t.Fatal(err)
	}
	ws := windows(t, r.Spool())
	if len(ws) < 3 {
		t.Fatalf("window spooled as %d records, want several", len(ws))
	}
	var sum uint64
	for _, w := range ws {
		sum += w.GetCounted()
		if !w.GetStart().AsTime().Equal(ws[0].GetStart().AsTime()) || w.GetPeriodCounted() != sum {
			t.Errorf("record %d: start %v period counter %d, want %v %d", w.GetSeq(), w.GetStart().AsTime(), w.GetPeriodCounted(), ws[0].GetStart().AsTime(), sum)
		}
	}
	if c, _ := counted(ws...); c != 100 || sum != 100 {
		t.Errorf("records count %d calls (Counted %d), want 100", c, sum)
	}
}

// TestReopen closes and opens again: the spool id stays, seqs and the
// period counters go on.
func TestReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := newClock(t0)
	r := open(t, dir, usage.Options{Now: clk.Now})
	id := r.SpoolID()
	for range 3 {
		r.Record(call{key: "k", status: 200}.record(t0))
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = open(t, dir, usage.Options{Now: clk.Now})
	if r.SpoolID() != id {
		t.Errorf("SpoolID() = %q after reopening, want %q", r.SpoolID(), id)
	}
	for range 2 {
		r.Record(call{key: "k", status: 200}.record(t0))
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	ws := spooled(t, dir)
	if len(ws) != 2 || ws[1].GetSeq() != 2 || ws[1].GetPeriodCounted() != 5 || ws[0].GetRecovered() || ws[1].GetRecovered() {
		t.Errorf("windows %v, want seqs 1 and 2, period counters 3 and 5, none recovered", ws)
	}

	// A lost spool starts a new id, its seqs and counters from 1.
	if err := removeAll(filepath.Join(dir, "spool")); err != nil {
		t.Fatal(err)
	}
	r = open(t, dir, usage.Options{Now: clk.Now})
	if r.SpoolID() == id {
		t.Errorf("SpoolID() = %q for a new spool, want a new id", id)
	}
	r.Record(call{key: "k", status: 200}.record(t0))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	ws = spooled(t, dir)
	if len(ws) != 1 || ws[0].GetSeq() != 1 || ws[0].GetPeriodCounted() != 1 || ws[0].GetSpoolId() == id {
		t.Errorf("new spool's windows %v, want seq 1, period counter 1, the new spool id", ws)
	}
}

func removeAll(path string) error { return os.RemoveAll(path) }

// TestIdleSeriesForgotten: a row used in neither of the last two windows
// is dropped from the recorder's memory, and counted again when it comes
// back.
func TestIdleSeriesForgotten(t *testing.T) {
	t.Parallel()
	r := open(t, t.TempDir(), usage.Options{})
	a, b := call{key: "a", status: 200}, call{key: "b", status: 200}
	r.Record(a.record(t0))
	r.Record(b.record(t0))
	if err := r.CloseWindow(); err != nil {
		t.Fatal(err)
	}
	r.Record(a.record(t0))
	if err := r.CloseWindow(); err != nil {
		t.Fatal(err)
	}
	if got := r.Stats().Series; got != 1 {
		t.Errorf("Stats().Series = %d after b was idle for a window, want 1", got)
	}
	r.Record(b.record(t0))
	if err := r.CloseWindow(); err != nil {
		t.Fatal(err)
	}
	ws := windows(t, r.Spool())
	if got := rows(ws...); got["b///   2xx"][0] != 2 || got["a///   2xx"][0] != 2 {
		t.Errorf("rows = %v, want a and b counted twice", got)
	}
}
