package spool

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strconv"
	"strings"
)

// segmentExt ends the name of every segment file; the rest of the name is
// the first sequence number in it as 16 lower-case hex digits, so that a
// directory listing sorts in sequence order.
const segmentExt = ".seg"

func segmentName(first uint64) string {
	return fmt.Sprintf("%016x%s", first, segmentExt)
}

// parseSegmentName returns the first sequence number a segment file's name
// gives, and false for any other file.
func parseSegmentName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, segmentExt)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	first, err := strconv.ParseUint(hex, 16, 64)
	if err != nil || segmentName(first) != name {
		return 0, false
	}
	return first, true
}

// segment is one file of the spool. Only the last segment is written to;
// first and path never change, and last and size change only under both
// of the Spool's locks.
type segment struct {
	first uint64 // seq of the first record, as in the name
	last  uint64 // seq of the last record
	path  string
	f     *os.File
	size  int64 // bytes of whole, checked records
}

// entry locates one record for Get and Scan.
type entry struct {
	seq uint64
	seg *segment
	off int64  // where the record starts in seg's file
	n   uint32 // payload length
}

// scanResult is what scanSegment found in one file.
type scanResult struct {
	entries []entry
	end     int64  // offset just past the last good record
	reason  string // why the record at end is bad; "" if the file ended cleanly
}

// scanSegment reads seg's file from the start, checking each record's
// framing, CRC and sequence number (the first must equal seg.first, every
// one must be greater than the one before it, starting from prev). It stops
// at the first record that does not check out. An error is an I/O failure,
// not damage.
func scanSegment(seg *segment, prev uint64) (scanResult, error) {
	var res scanResult
	fi, err := seg.f.Stat()
	if err != nil {
		return res, err
	}
	size := fi.Size()
	br := bufio.NewReaderSize(io.NewSectionReader(seg.f, 0, size), 1<<16)
	var hb [headerLen]byte
	var cb [crcLen]byte
	for res.end < size {
		rest := size - res.end
		if rest < frameLen {
			res.reason = "record header runs past end of file"
			return res, nil
		}
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			return res, err
		}
		h := decodeHeader(hb[:])
		if res.reason = h.check(); res.reason != "" {
			return res, nil
		}
		if recordLen(int(h.n)) > rest {
			res.reason = "record runs past end of file"
			return res, nil
		}
		sum := crc32.Update(0, castagnoli, hb[:])
		for left := int(h.n); left > 0; {
			b, err := br.Peek(min(left, br.Size()))
			if err != nil {
				return res, err
			}
			sum = crc32.Update(sum, castagnoli, b)
			if _, err := br.Discard(len(b)); err != nil {
				return res, err
			}
			left -= len(b)
		}
		if _, err := io.ReadFull(br, cb[:]); err != nil {
			return res, err
		}
		switch {
		case binary.LittleEndian.Uint32(cb[:]) != sum:
			res.reason = "bad crc"
		case len(res.entries) == 0 && h.seq != seg.first:
			res.reason = fmt.Sprintf("first seq %d in a segment named for %d", h.seq, seg.first)
		case h.seq <= prev:
			res.reason = fmt.Sprintf("seq %d after %d", h.seq, prev)
		}
		if res.reason != "" {
			return res, nil
		}
		res.entries = append(res.entries, entry{seq: h.seq, seg: seg, off: res.end, n: h.n})
		prev = h.seq
		res.end += recordLen(int(h.n))
	}
	return res, nil
}

// read returns the payload of the record e names, checking it again so a
// record that changed on disk since Open is reported, never returned.
func (e entry) read() ([]byte, error) {
	buf := make([]byte, recordLen(int(e.n)))
	if _, err := e.seg.f.ReadAt(buf, e.off); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &CorruptError{File: e.seg.path, Offset: e.off, Reason: "record runs past end of file"}
		}
		return nil, fmt.Errorf("spool: read seq %d: %w", e.seq, err)
	}
	body := buf[:headerLen+int(e.n)]
	h := decodeHeader(body)
	reason := h.check()
	switch {
	case reason != "":
	case h.n != e.n || h.seq != e.seq:
		reason = "record changed since open"
	case binary.LittleEndian.Uint32(buf[len(body):]) != crc32.Checksum(body, castagnoli):
		reason = "bad crc"
	}
	if reason != "" {
		return nil, &CorruptError{File: e.seg.path, Offset: e.off, Reason: reason}
	}
	return body[headerLen:len(body):len(body)], nil
}
