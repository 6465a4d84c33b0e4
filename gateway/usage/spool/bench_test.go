package spool_test

import (
	"testing"

	"github.com/portico-gw/portico/gateway/usage/spool"
)

// BenchmarkAppend appends 4 KiB windows, trimming as a shipper's
// high-water mark would so the disk does not fill.
func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct {
		name   string
		noSync bool
	}{
		{"fsync", false},
		{"nosync", true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := open(b, b.TempDir(), spool.Options{SegmentBytes: 4 << 20, MaxBytes: 64 << 20, NoSync: bc.noSync})
			p := make([]byte, 4096)
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			var seq uint64
			for b.Loop() {
				seq++
				if err := s.Append(seq, p); err != nil {
					b.Fatal(err)
				}
				if seq%2048 == 0 {
					if err := s.Trim(seq - 1024); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
