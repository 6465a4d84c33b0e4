package spool_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/portico-gw/portico/gateway/usage/spool"
)

// FuzzOpen writes arbitrary bytes as the only segment file and opens it.
// Open must not panic, and must either fail or keep a prefix of the file
// made of records that check out by the format in the package comment,
// which this test decodes on its own.
func FuzzOpen(f *testing.F) {
	valid := segmentBytes(f, 1, 2, 3)
	f.Add([]byte{})
	f.Add(valid)
	f.Add(valid[:len(valid)-3])
	f.Add(append(bytes.Clone(valid), 0, 0, 0, 0))
	f.Add(segmentBytes(f, 2, 3)) // first seq not the name's
	f.Add(append(segmentBytes(f, 1, 2), segmentBytes(f, 2)...))
	f.Add([]byte("PSP\x01\xff\xff\xff\x7f"))

	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "0000000000000001.seg")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := spool.Open(dir, spool.Options{NoSync: true, Logger: quiet})
		if err != nil {
			return
		}
		defer s.Close()

		var off int
		prev := uint64(0)
		err = s.Scan(0, func(seq uint64, p []byte) error {
			if !recordAt(data, off, seq, p) {
				t.Fatalf("Scan returned seq %d (%d bytes) that is not the record at offset %d", seq, len(p), off)
			}
			if seq <= prev || (prev == 0 && seq != 1) {
				t.Fatalf("Scan returned seq %d after %d", seq, prev)
			}
			prev = seq
			off += 20 + len(p)
			return nil
		})
		if err != nil {
			t.Fatalf("Scan = %v", err)
		}
		if s.Last() != prev {
			t.Fatalf("Last() = %d, Scan ended at %d", s.Last(), prev)
		}
		// What was not returned was cut away, and accounted for.
		r := s.Recovered()
		if int64(off)+r.Bytes != int64(len(data)) || (r.Bytes > 0 && r.Offset != int64(off)) {
			t.Fatalf("kept %d bytes, Recovered() = %+v, of %d", off, r, len(data))
		}
		if s.Size() != int64(off) {
			t.Fatalf("Size() = %d, kept %d", s.Size(), off)
		}
		if err := s.Append(prev+1, []byte("next")); err != nil && !errors.Is(err, spool.ErrOutOfOrder) {
			t.Fatalf("Append after Open = %v", err)
		}
	})
}

// recordAt reports whether data holds, at off, a whole record for seq and p
// with a good CRC-32C.
func recordAt(data []byte, off int, seq uint64, p []byte) bool {
	end := off + 16 + len(p) + 4
	if off < 0 || end > len(data) {
		return false
	}
	r := data[off:end]
	body := r[:16+len(p)]
	return string(r[:4]) == "PSP\x01" &&
		binary.LittleEndian.Uint32(r[4:8]) == uint32(len(p)) &&
		binary.LittleEndian.Uint64(r[8:16]) == seq &&
		bytes.Equal(body[16:], p) &&
		binary.LittleEndian.Uint32(r[len(body):]) == crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))
}

// segmentBytes returns the bytes of a segment file holding seqs, as the
// spool writes it.
func segmentBytes(tb testing.TB, seqs ...uint64) []byte {
	tb.Helper()
	dir := tb.TempDir()
	s := open(tb, dir, spool.Options{})
	for _, seq := range seqs {
		if err := s.Append(seq, payload(seq)); err != nil {
			tb.Fatal(err)
		}
	}
	s.Close()
	files := segments(tb, dir)
	if len(files) != 1 {
		tb.Fatalf("%d segments, want 1", len(files))
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		tb.Fatal(err)
	}
	return data
}
