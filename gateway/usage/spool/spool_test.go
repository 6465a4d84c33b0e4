package spool_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/portico-gw/portico/gateway/usage/spool"
)

// quiet discards Open's recovery warnings.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// payload is the content the tests append under seq: its length varies with
// seq so that a record read from the wrong place cannot look right.
func payload(seq uint64) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("window %d;", seq)), 3+int(seq%5))
}

func open(t testing.TB, dir string, opts spool.Options) *spool.Spool {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s, err := spool.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s) = %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func appendRange(t testing.TB, s *spool.Spool, from, to uint64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		if err := s.Append(seq, payload(seq)); err != nil {
			t.Fatalf("Append(%d) = %v", seq, err)
		}
	}
}

// segments lists the segment files in dir.
func segments(t testing.TB, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// scanAll returns the sequence numbers Scan(from) visits, checking each
// payload.
func scanAll(t testing.TB, s *spool.Spool, from uint64) []uint64 {
	t.Helper()
	var seqs []uint64
	err := s.Scan(from, func(seq uint64, p []byte) error {
		if !bytes.Equal(p, payload(seq)) {
			t.Errorf("Scan: seq %d has payload %q, want %q", seq, p, payload(seq))
		}
		seqs = append(seqs, seq)
		return nil
	})
	if err != nil {
		t.Fatalf("Scan(%d) = %v", from, err)
	}
	return seqs
}

func seqRange(from, to uint64) []uint64 {
	var seqs []uint64
	for seq := from; seq <= to; seq++ {
		seqs = append(seqs, seq)
	}
	return seqs
}

// checkRecords fails unless Get returns the right payload for every seq in
// [from, to].
func checkRecords(t testing.TB, s *spool.Spool, from, to uint64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		got, err := s.Get(seq)
		if err != nil || !bytes.Equal(got, payload(seq)) {
			t.Fatalf("Get(%d) = %q, %v, want %q", seq, got, err, payload(seq))
		}
	}
}

func TestRoundTripAcrossSegments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := spool.Options{SegmentBytes: 512, NoSync: true}
	s := open(t, dir, opts)
	if s.Last() != 0 || s.First() != 0 || s.Size() != 0 {
		t.Fatalf("empty spool: Last %d First %d Size %d, want 0 0 0", s.Last(), s.First(), s.Size())
	}
	appendRange(t, s, 1, 40)
	checkRecords(t, s, 1, 40)
	if got := scanAll(t, s, 0); !slices.Equal(got, seqRange(1, 40)) {
		t.Errorf("Scan(0) = %v, want 1..40", got)
	}
	if got := scanAll(t, s, 25); !slices.Equal(got, seqRange(25, 40)) {
		t.Errorf("Scan(25) = %v, want 25..40", got)
	}
	if got := scanAll(t, s, 41); len(got) != 0 {
		t.Errorf("Scan(41) = %v, want nothing", got)
	}
	files := segments(t, dir)
	if len(files) < 4 {
		t.Fatalf("%d segment files, want several: %v", len(files), files)
	}
	if filepath.Base(files[0]) != "0000000000000001.seg" {
		t.Errorf("first segment is %s, want 0000000000000001.seg", files[0])
	}
	var onDisk int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 512 {
			t.Errorf("%s has %d bytes, past SegmentBytes 512", f, fi.Size())
		}
		onDisk += fi.Size()
	}
	if s.Size() != onDisk {
		t.Errorf("Size() = %d, want %d on disk", s.Size(), onDisk)
	}
	if _, err := s.Get(41); !errors.Is(err, spool.ErrNotFound) {
		t.Errorf("Get(41) = %v, want ErrNotFound", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if _, err := s.Get(1); !errors.Is(err, spool.ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}

	s = open(t, dir, opts)
	if s.Last() != 40 || s.First() != 1 || s.Size() != onDisk {
		t.Errorf("reopened: Last %d First %d Size %d, want 40 1 %d", s.Last(), s.First(), s.Size(), onDisk)
	}
	if r := s.Recovered(); r != (spool.Recovery{}) {
		t.Errorf("Recovered() = %+v after a clean close", r)
	}
	checkRecords(t, s, 1, 40)
	appendRange(t, s, 41, 45)
	checkRecords(t, s, 1, 45)
}

func TestAppendRejects(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), spool.Options{})
	appendRange(t, s, 1, 3)
	for _, tc := range []struct {
		name string
		seq  uint64
		n    int
		want error
	}{
		{"same seq", 3, 10, spool.ErrOutOfOrder},
		{"lower seq", 2, 10, spool.ErrOutOfOrder},
		{"seq 0", 0, 10, spool.ErrOutOfOrder},
		{"payload over MaxPayload", 4, spool.MaxPayload + 1, spool.ErrTooLarge},
	} {
		if err := s.Append(tc.seq, make([]byte, tc.n)); !errors.Is(err, tc.want) {
			t.Errorf("%s: Append(%d, %d bytes) = %v, want %v", tc.name, tc.seq, tc.n, err, tc.want)
		}
	}
	if s.Last() != 3 {
		t.Errorf("Last() = %d after rejected appends, want 3", s.Last())
	}
	if err := s.Append(10, make([]byte, spool.MaxPayload)); err != nil {
		t.Errorf("Append of MaxPayload bytes with a gap in seq = %v", err)
	}
}

func TestFullUntilTrimmed(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), spool.Options{SegmentBytes: 1024, MaxBytes: 4096, NoSync: true})
	p := make([]byte, 200) // 220 bytes a record, 4 a segment
	var seq uint64
	for {
		seq++
		err := s.Append(seq, p)
		if errors.Is(err, spool.ErrFull) {
			break
		}
		if err != nil {
			t.Fatalf("Append(%d) = %v", seq, err)
		}
		if seq > 100 {
			t.Fatal("no ErrFull after 100 appends")
		}
	}
	if s.Size() > 4096 || s.Size()+220 <= 4096 {
		t.Errorf("full at Size() = %d, want within one record of MaxBytes 4096", s.Size())
	}
	if s.Last() != seq-1 {
		t.Errorf("Last() = %d after ErrFull, want %d", s.Last(), seq-1)
	}
	if err := s.Trim(seq - 1); err != nil {
		t.Fatalf("Trim(%d) = %v", seq-1, err)
	}
	if err := s.Append(seq, p); err != nil {
		t.Errorf("Append(%d) after Trim = %v", seq, err)
	}
}

func TestOptionsChecked(t *testing.T) {
	t.Parallel()
	for _, opts := range []spool.Options{
		{SegmentBytes: -1},
		{MaxBytes: -1},
		{SegmentBytes: 1 << 20, MaxBytes: 1<<21 - 1},
		{SegmentBytes: 1 << 31}, // twice the default MaxBytes
	} {
		if s, err := spool.Open(t.TempDir(), opts); err == nil {
			s.Close()
			t.Errorf("Open with %+v succeeded", opts)
		}
	}
}

func TestTrim(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := spool.Options{SegmentBytes: 256, NoSync: true}
	s := open(t, dir, opts)
	appendRange(t, s, 1, 30)
	before := segments(t, dir)
	sizeBefore := s.Size()

	// Trim to the middle of a segment: the segments wholly at or below
	// the mark go, the one holding it stays.
	if err := s.Trim(17); err != nil {
		t.Fatalf("Trim(17) = %v", err)
	}
	after := segments(t, dir)
	var want []string
	for i, f := range before {
		if i+1 == len(before) || firstSeq(t, before[i+1]) > 18 {
			want = append(want, f)
		}
	}
	if !slices.Equal(after, want) || len(after) == len(before) {
		t.Errorf("after Trim(17) segments %v, want %v (from %v)", names(after), names(want), names(before))
	}
	if s.Size() >= sizeBefore {
		t.Errorf("Size() = %d after Trim, was %d", s.Size(), sizeBefore)
	}
	for _, seq := range []uint64{1, 16, 17} {
		if _, err := s.Get(seq); !errors.Is(err, spool.ErrNotFound) {
			t.Errorf("Get(%d) after Trim(17) = %v, want ErrNotFound", seq, err)
		}
	}
	checkRecords(t, s, 18, 30)
	if s.First() != 18 || s.Last() != 30 {
		t.Errorf("First %d Last %d after Trim(17), want 18 30", s.First(), s.Last())
	}
	if got := scanAll(t, s, 2); !slices.Equal(got, seqRange(18, 30)) {
		t.Errorf("Scan(2) after Trim(17) = %v, want 18..30", got)
	}

	// Trimming everything keeps the segment being written to, so Last
	// survives a restart.
	if err := s.Trim(1000); err != nil {
		t.Fatalf("Trim(1000) = %v", err)
	}
	if got := segments(t, dir); len(got) != 1 || got[0] != before[len(before)-1] {
		t.Errorf("after Trim(1000) segments %v, want only %s", names(got), before[len(before)-1])
	}
	if s.First() != 0 || s.Last() != 30 {
		t.Errorf("First %d Last %d after Trim(1000), want 0 30", s.First(), s.Last())
	}
	if got := scanAll(t, s, 0); len(got) != 0 {
		t.Errorf("Scan(0) after Trim(1000) = %v, want nothing", got)
	}
	if err := s.Append(30, payload(30)); !errors.Is(err, spool.ErrOutOfOrder) {
		t.Errorf("Append(30) after Trim(1000) = %v, want ErrOutOfOrder", err)
	}
	s.Close()
	s = open(t, dir, opts)
	if s.Last() != 30 {
		t.Errorf("Last() = %d after Trim(1000) and reopen, want 30", s.Last())
	}
}

func firstSeq(t testing.TB, path string) uint64 {
	t.Helper()
	var seq uint64
	if _, err := fmt.Sscanf(filepath.Base(path), "%016x.seg", &seq); err != nil {
		t.Fatalf("segment name %s: %v", path, err)
	}
	return seq
}

func names(paths []string) []string {
	var out []string
	for _, p := range paths {
		out = append(out, filepath.Base(p))
	}
	return out
}

func TestOneSpoolPerDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir, spool.Options{})
	if s2, err := spool.Open(dir, spool.Options{}); !errors.Is(err, spool.ErrLocked) {
		if err == nil {
			s2.Close()
		}
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	s.Close()
	open(t, dir, spool.Options{})
}

func TestConcurrentAppendAndRead(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), spool.Options{SegmentBytes: 4096, NoSync: true})
	const n = 2000
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for seq := uint64(1); seq <= n; seq++ {
			if err := s.Append(seq, payload(seq)); err != nil {
				t.Errorf("Append(%d) = %v", seq, err)
				return
			}
			if seq%300 == 0 {
				if err := s.Trim(seq - 200); err != nil {
					t.Errorf("Trim(%d) = %v", seq-200, err)
					return
				}
			}
		}
	}()
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				// A reader sees every record in order, up to what was
				// appended when it began, but for those a Trim took
				// meanwhile.
				var prev uint64
				err := s.Scan(0, func(seq uint64, p []byte) error {
					if seq <= prev {
						return fmt.Errorf("seq %d after %d", seq, prev)
					}
					if prev != 0 && seq != prev+1 {
						if _, err := s.Get(prev + 1); !errors.Is(err, spool.ErrNotFound) {
							return fmt.Errorf("seq %d after %d, but Get(%d) = %v", seq, prev, prev+1, err)
						}
					}
					if !bytes.Equal(p, payload(seq)) {
						return fmt.Errorf("seq %d: payload %q", seq, p)
					}
					prev = seq
					return nil
				})
				if err != nil {
					t.Errorf("Scan = %v", err)
					return
				}
				if last := s.Last(); last > 0 {
					got, err := s.Get(last)
					if err == nil && !bytes.Equal(got, payload(last)) {
						t.Errorf("Get(%d) = %q", last, got)
					}
				}
			}
		}()
	}
	wg.Wait()
	if s.Last() != n {
		t.Errorf("Last() = %d, want %d", s.Last(), n)
	}
}

func TestScanStopsOnError(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), spool.Options{})
	appendRange(t, s, 1, 5)
	stop := errors.New("stop")
	var seen []uint64
	err := s.Scan(1, func(seq uint64, _ []byte) error {
		seen = append(seen, seq)
		if seq == 3 {
			return stop
		}
		return nil
	})
	if err != stop || !slices.Equal(seen, []uint64{1, 2, 3}) {
		t.Errorf("Scan = %v after %v, want stop after [1 2 3]", err, seen)
	}
	// fn may append; Scan does not chase what it appends.
	seen = nil
	err = s.Scan(4, func(seq uint64, _ []byte) error {
		seen = append(seen, seq)
		return s.Append(seq+100, payload(seq+100))
	})
	if err != nil || !slices.Equal(seen, []uint64{4, 5}) {
		t.Errorf("Scan appending = %v after %v, want nil after [4 5]", err, seen)
	}
	if s.Last() != 105 {
		t.Errorf("Last() = %d, want 105", s.Last())
	}
}
