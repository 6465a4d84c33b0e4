package spool

import (
	"encoding/binary"
	"hash/crc32"
)

// The layout of one record; the package comment describes it.
const (
	headerLen = 16 // magic, payload length, seq
	crcLen    = 4
	frameLen  = headerLen + crcLen
)

// magic is the bytes 'P' 'S' 'P' 0x01 read as a little-endian uint32. The
// last byte is the format version.
const magic = 0x01505350

// MaxPayload is the largest payload Append takes: 16 MiB.
const MaxPayload = 16 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordLen is the bytes a record with an n-byte payload takes on disk.
func recordLen(n int) int64 { return int64(frameLen + n) }

// encode appends the record for seq and payload to buf.
func encode(buf []byte, seq uint64, payload []byte) []byte {
	start := len(buf)
	buf = binary.LittleEndian.AppendUint32(buf, magic)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(payload)))
	buf = binary.LittleEndian.AppendUint64(buf, seq)
	buf = append(buf, payload...)
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf[start:], castagnoli))
}

// header is a decoded record header.
type header struct {
	magic uint32
	n     uint32
	seq   uint64
}

func decodeHeader(b []byte) header {
	return header{
		magic: binary.LittleEndian.Uint32(b[0:4]),
		n:     binary.LittleEndian.Uint32(b[4:8]),
		seq:   binary.LittleEndian.Uint64(b[8:16]),
	}
}

// check returns why a record with this header cannot be read, or "" if the
// header is well formed. The CRC is checked separately, once the payload is
// read.
func (h header) check() string {
	switch {
	case h.magic != magic:
		return "bad magic"
	case h.n > MaxPayload:
		return "bad payload length"
	}
	return ""
}
