package spool_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/usage/spool"
)

// written is a spool directory of records 1..last, closed, with where the
// last record sits.
type written struct {
	dir       string
	opts      spool.Options
	last      uint64
	lastFile  string // segment holding record last
	lastStart int64  // offset of record last in lastFile
	lastEnd   int64  // size of lastFile
}

func write(t *testing.T, opts spool.Options, last uint64) written {
	t.Helper()
	w := written{dir: t.TempDir(), opts: opts, last: last}
	s := open(t, w.dir, opts)
	appendRange(t, s, 1, last-1)
	files := segments(t, w.dir)
	before := files[len(files)-1]
	appendRange(t, s, last, last)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files = segments(t, w.dir)
	w.lastFile = files[len(files)-1]
	if w.lastFile == before {
		w.lastStart = fileSize(t, before) - int64(len(payload(last))) - 20
	}
	w.lastEnd = fileSize(t, w.lastFile)
	return w
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// checkDropped opens w after its last record was damaged and checks that
// exactly that record is gone, Recovered says so, and the spool goes on.
func checkDropped(t *testing.T, w written, cutBytes int64) {
	t.Helper()
	var logs bytes.Buffer
	opts := w.opts
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s := open(t, w.dir, opts)
	if s.Last() != w.last-1 {
		t.Fatalf("Last() = %d, want %d", s.Last(), w.last-1)
	}
	checkRecords(t, s, 1, w.last-1)
	if _, err := s.Get(w.last); !errors.Is(err, spool.ErrNotFound) {
		t.Errorf("Get(%d) = %v, want ErrNotFound", w.last, err)
	}
	r := s.Recovered()
	if r.File != w.lastFile || r.Offset != w.lastStart || r.Bytes != cutBytes || r.Reason == "" {
		t.Errorf("Recovered() = %+v, want %s at %d, %d bytes, with a reason", r, w.lastFile, w.lastStart, cutBytes)
	}
	if n := strings.Count(logs.String(), "torn tail"); n != 1 {
		t.Errorf("logged %d warnings about the torn tail, want 1: %s", n, logs.String())
	}
	if w.lastStart == 0 {
		if _, err := os.Stat(w.lastFile); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("segment %s left with no record was not removed: %v", w.lastFile, err)
		}
	} else if got := fileSize(t, w.lastFile); got != w.lastStart {
		t.Errorf("%s is %d bytes after recovery, want %d", w.lastFile, got, w.lastStart)
	}
	appendRange(t, s, w.last, w.last+1)
	s.Close()
	s = open(t, w.dir, w.opts)
	checkRecords(t, s, 1, w.last+1)
	if r := s.Recovered(); r != (spool.Recovery{}) {
		t.Errorf("second Open: Recovered() = %+v, want nothing", r)
	}
}

// layouts put the last record in the middle of a segment, and alone at the
// start of one.
var layouts = []struct {
	name string
	opts spool.Options
	last uint64
}{
	{"shared segment", spool.Options{SegmentBytes: 4096, NoSync: true}, 7},
	{"own segment", spool.Options{SegmentBytes: 100, NoSync: true}, 7},
}

func TestTornTail(t *testing.T) {
	t.Parallel()
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			probe := write(t, l.opts, l.last)
			if (probe.lastStart == 0) != (l.name == "own segment") {
				t.Fatalf("layout %s: last record at offset %d", l.name, probe.lastStart)
			}
			for cut := probe.lastStart + 1; cut < probe.lastEnd; cut++ {
				w := write(t, l.opts, l.last)
				if err := os.Truncate(w.lastFile, cut); err != nil {
					t.Fatal(err)
				}
				checkDropped(t, w, cut-w.lastStart)
				if t.Failed() {
					t.Fatalf("cut at %d of %d", cut, w.lastEnd)
				}
			}
		})
	}
}

func TestDamagedLastRecord(t *testing.T) {
	t.Parallel()
	// Offsets into the last record; negative ones count from its end.
	for _, tc := range []struct {
		name string
		at   int64
	}{
		{"magic", 0},
		{"length", 5},
		{"seq", 9},
		{"payload", 16},
		{"last payload byte", -5},
		{"crc", -1},
	} {
		for _, l := range layouts {
			t.Run(tc.name+"/"+l.name, func(t *testing.T) {
				t.Parallel()
				w := write(t, l.opts, l.last)
				at := w.lastStart + tc.at
				if tc.at < 0 {
					at = w.lastEnd + tc.at
				}
				flip(t, w.lastFile, at)
				checkDropped(t, w, w.lastEnd-w.lastStart)
			})
		}
	}
}

func TestGarbageAfterLastRecord(t *testing.T) {
	t.Parallel()
	w := write(t, spool.Options{SegmentBytes: 4096, NoSync: true}, 5)
	f, err := os.OpenFile(w.lastFile, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 40)) // what a machine crash can leave: zeros past the end
	f.Close()
	w.lastStart, w.last = w.lastEnd, 6 // as if a record 6 had been torn
	s := open(t, w.dir, w.opts)
	if r := s.Recovered(); r.Offset != w.lastEnd || r.Bytes != 40 {
		t.Errorf("Recovered() = %+v, want 40 bytes at %d", r, w.lastEnd)
	}
	checkRecords(t, s, 1, 5)
}

func TestDamagedEarlierSegment(t *testing.T) {
	t.Parallel()
	opts := spool.Options{SegmentBytes: 256, NoSync: true}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"flipped byte", func(t *testing.T, path string) { flip(t, path, fileSize(t, path)/2) }},
		{"truncated", func(t *testing.T, path string) { os.Truncate(path, fileSize(t, path)-3) }},
		{"emptied", func(t *testing.T, path string) { os.Truncate(path, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := write(t, opts, 20)
			files := segments(t, w.dir)
			if len(files) < 3 {
				t.Fatalf("%d segments, want at least 3", len(files))
			}
			victim := files[1]
			tc.damage(t, victim)
			s, err := spool.Open(w.dir, spool.Options{SegmentBytes: 256, Logger: quiet})
			if err == nil {
				s.Close()
				t.Fatalf("Open with %s damaged succeeded", victim)
			}
			var ce *spool.CorruptError
			if !errors.As(err, &ce) || ce.File != victim || !strings.Contains(err.Error(), victim) {
				t.Errorf("Open = %v, want a *CorruptError naming %s", err, victim)
			}
			// Nothing was cut: the files are as they were.
			if got := segments(t, w.dir); len(got) != len(files) {
				t.Errorf("failed Open left %d segments of %d", len(got), len(files))
			}
		})
	}
}

func TestGetRechecks(t *testing.T) {
	t.Parallel()
	w := write(t, spool.Options{SegmentBytes: 4096, NoSync: true}, 5)
	s := open(t, w.dir, w.opts)
	flip(t, w.lastFile, w.lastStart+18)
	var ce *spool.CorruptError
	if _, err := s.Get(5); !errors.As(err, &ce) {
		t.Errorf("Get of a record changed on disk = %v, want a *CorruptError", err)
	}
	if err := s.Scan(5, func(uint64, []byte) error { return nil }); !errors.As(err, &ce) {
		t.Errorf("Scan over a record changed on disk = %v, want a *CorruptError", err)
	}
	checkRecords(t, s, 1, 4)
}

func flip(t *testing.T, path string, at int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}
