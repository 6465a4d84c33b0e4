package usage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"github.com/portico-gw/portico/gateway/routestats"
)

// The window file's layout; the package comment describes it.
const (
	fileMagic   = 0x31575550 // "PUW1" read little-endian
	fileVersion = 1
	pageSize    = 4096

	numBuckets  = routestats.NumBuckets
	rowBytes    = 16             // counted, billable
	latBytes    = numBuckets * 8 // one histogram
	totalsBytes = 64             // counted, billable, padded to a cache line
	maxLanes    = 8

	// metaPerSlot is the room the file gives each slot's description on
	// average. Descriptions of typical ids take 60 to 150 bytes; when a
	// window's room runs out, new series fold as when MaxSeries is passed.
	metaPerSlot = 160

	// catchAllRows are the rows, one per status class, that take what
	// neither a row nor an overflow row has room for; slot 0 of the
	// latencies does the same for histograms.
	catchAllRows = 6
	catchAllLats = 1
)

// File header fields (offsets from the start of the file).
const (
	fhMagic       = 0
	fhVersion     = 4
	fhLanes       = 8
	fhCapacity    = 12
	fhMetaBytes   = 16
	fhHalfBytes   = 24
	fhSpoolID     = 32 // 64 bytes: the spool id, NUL-padded
	fhPeriod      = 96 // 8 bytes: "2006-01"
	fhCumCounted  = 104
	fhCumBillable = 112
	// A second period's counters: windows of one node can go back a
	// period (its clock offset measured, or corrected, across a period's
	// end) and then forward again, and each period's counters must go on
	// from where they were. Zero in a file written before it: no period.
	fhPeriod2      = 120
	fhCum2Counted  = 128
	fhCum2Billable = 136
)

// cumSlots are the offsets of the file header's two period counters:
// period, counted, billable.
var cumSlots = [2][3]int{{fhPeriod, fhCumCounted, fhCumBillable}, {fhPeriod2, fhCum2Counted, fhCum2Billable}}

// Half header fields (offsets from the start of a half).
const (
	hhState        = 0
	hhFlags        = 4
	hhEpoch        = 8
	hhStart        = 16 // unix ns, corrected clock
	hhEnd          = 24
	hhSeq          = 32
	hhChunks       = 40
	hhPeriod       = 48 // 8 bytes
	hhBaseCounted  = 56
	hhBaseBillable = 64
	hhClockOffset  = 72
	hhMetaUsed     = 80
	hhAlive        = 88
	hhChunkLimit   = 96 // the chunkLimit the window was split by
)

// Half states.
const (
	stateFree    = 0 // empty, ready to be opened
	stateOpen    = 1 // counting, or drained and not yet assigned a seq
	stateClosing = 2 // seq, chunks, period and base assigned; being spooled
	stateSpooled = 3 // every chunk appended; being zeroed
)

// flagRecovered marks a half that a previous process left behind.
const flagRecovered = 1

// layout is where things are in a window file of lanes and capacity.
type layout struct {
	lanes, capacity int
	metaBytes       int
	totalsOff       int // the offsets within a half
	metaOff         int
	rowsOff         int
	latsOff         int
	halfBytes       int
}

func roundPage(n int) int { return (n + pageSize - 1) &^ (pageSize - 1) }

func newLayout(lanes, capacity int) layout {
	l := layout{lanes: lanes, capacity: capacity}
	l.metaBytes = roundPage(capacity * 2 * metaPerSlot)
	l.totalsOff = pageSize
	l.metaOff = l.totalsOff + roundPage(lanes*totalsBytes)
	l.rowsOff = l.metaOff + l.metaBytes
	l.latsOff = l.rowsOff + roundPage(lanes*capacity*rowBytes)
	l.halfBytes = l.latsOff + roundPage(lanes*capacity*latBytes)
	return l
}

func (l layout) fileBytes() int    { return pageSize + 2*l.halfBytes }
func (l layout) halfOff(i int) int { return pageSize + i*l.halfBytes }

// mapping is a mapped window file.
type mapping struct {
	path string
	f    *os.File
	b    []byte
	l    layout
}

func (m *mapping) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&m.b[off])) }

func (m *mapping) period() string { return cstring(m.b[fhPeriod : fhPeriod+8]) }
func (m *mapping) spoolID() string {
	return cstring(m.b[fhSpoolID : fhSpoolID+64])
}

// cum returns the node's counters of period through the last window of
// it spooled; zero for a period it holds none of.
func (m *mapping) cum(period string) (counted, billable uint64) {
	for _, sl := range cumSlots {
		if period != "" && cstring(m.b[sl[0]:sl[0]+8]) == period {
			return m.u64(sl[1]).Load(), m.u64(sl[2]).Load()
		}
	}
	return 0, 0
}

// setCum records the node's counters of period through the last window
// spooled: in the slot of that period, else in an empty one, else in the
// one of the earlier period.
func (m *mapping) setCum(period string, counted, billable uint64) {
	at := -1
	for i, sl := range cumSlots {
		if cstring(m.b[sl[0]:sl[0]+8]) == period {
			at = i
			break
		}
	}
	if at < 0 {
		p0, p1 := cstring(m.b[fhPeriod:fhPeriod+8]), cstring(m.b[fhPeriod2:fhPeriod2+8])
		at = 0
		if p0 != "" && (p1 == "" || p1 < p0) {
			at = 1
		}
	}
	sl := cumSlots[at]
	putCString(m.b[sl[0]:sl[0]+8], period)
	m.u64(sl[1]).Store(counted)
	m.u64(sl[2]).Store(billable)
}

func (m *mapping) setSpoolID(id string) {
	putCString(m.b[fhSpoolID:fhSpoolID+64], id)
	for _, sl := range cumSlots {
		putCString(m.b[sl[0]:sl[0]+8], "")
		m.u64(sl[1]).Store(0)
		m.u64(sl[2]).Store(0)
	}
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func putCString(dst []byte, s string) {
	clear(dst)
	copy(dst, s)
}

// syncHeaders writes the file header and both half headers to disk.
func (m *mapping) syncHeaders() error {
	if err := syncMapped(m.b[:pageSize]); err != nil {
		return err
	}
	for i := range 2 {
		off := m.l.halfOff(i)
		if err := syncMapped(m.b[off : off+pageSize]); err != nil {
			return err
		}
	}
	return nil
}

func (m *mapping) close() error {
	err := unmap(m.b)
	m.b = nil
	return errors.Join(err, m.f.Close())
}

// createMap makes a fresh window file at path with layout l, its header
// carrying spoolID and the node's period counters, and maps it. It is
// written beside path and renamed over it, so a crash leaves either the
// old file or the whole new one.
func createMap(path string, l layout, spoolID, period string, counted, billable uint64, noSync bool) (*mapping, error) {
	tmp := path + ".new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("usage: create window file: %w", err)
	}
	fail := func(err error) (*mapping, error) {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("usage: create window file: %w", err)
	}
	// The file is sparse: only the pages a window touches take room.
	if err := f.Truncate(int64(l.fileBytes())); err != nil {
		return fail(err)
	}
	b, err := mapFile(f, l.fileBytes())
	if err != nil {
		return fail(err)
	}
	m := &mapping{path: path, f: f, b: b, l: l}
	binary.LittleEndian.PutUint32(b[fhMagic:], fileMagic)
	binary.LittleEndian.PutUint32(b[fhVersion:], fileVersion)
	binary.LittleEndian.PutUint32(b[fhLanes:], uint32(l.lanes))
	binary.LittleEndian.PutUint32(b[fhCapacity:], uint32(l.capacity))
	binary.LittleEndian.PutUint64(b[fhMetaBytes:], uint64(l.metaBytes))
	binary.LittleEndian.PutUint64(b[fhHalfBytes:], uint64(l.halfBytes))
	putCString(b[fhSpoolID:fhSpoolID+64], spoolID)
	m.setCum(period, counted, billable)
	if !noSync {
		if err := syncMapped(b[:pageSize]); err != nil {
			unmap(b)
			return fail(err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		unmap(b)
		return fail(err)
	}
	if !noSync {
		if err := syncDir(filepath.Dir(path)); err != nil {
			m.close()
			return nil, fmt.Errorf("usage: create window file: %w", err)
		}
	}
	return m, nil
}

// errBadMap reports a window file that is not one this package wrote.
var errBadMap = errors.New("not a window file")

// openMap maps the window file at path as its header describes it.
func openMap(path string) (*mapping, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	hdr := make([]byte, 128)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %v", errBadMap, err)
	}
	le := binary.LittleEndian
	lanes, capacity := int(le.Uint32(hdr[fhLanes:])), int(le.Uint32(hdr[fhCapacity:]))
	switch {
	case le.Uint32(hdr[fhMagic:]) != fileMagic || le.Uint32(hdr[fhVersion:]) != fileVersion:
		f.Close()
		return nil, fmt.Errorf("%w: bad magic or version", errBadMap)
	case lanes < 1 || lanes > maxLanes || lanes&(lanes-1) != 0 || capacity < catchAllRows+2 || capacity > 1<<28:
		f.Close()
		return nil, fmt.Errorf("%w: bad lanes %d or capacity %d", errBadMap, lanes, capacity)
	}
	l := newLayout(lanes, capacity)
	if le.Uint64(hdr[fhMetaBytes:]) != uint64(l.metaBytes) || le.Uint64(hdr[fhHalfBytes:]) != uint64(l.halfBytes) || fi.Size() != int64(l.fileBytes()) {
		f.Close()
		return nil, fmt.Errorf("%w: sizes do not match the layout", errBadMap)
	}
	b, err := mapFile(f, l.fileBytes())
	if err != nil {
		f.Close()
		return nil, err
	}
	return &mapping{path: path, f: f, b: b, l: l}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// A description (meta record) names what a slot of a half counts:
//
//	offset  size  field
//	0       4     length n of the whole record, a multiple of 8
//	4       4     CRC-32C of bytes 8 to n
//	8       1     kind: 1 a row, 2 a latency histogram
//	9       1     status class (rows)
//	10      2     zero
//	12      4     slot
//	16      12    lengths of the six strings, 2 bytes each
//	28      ...   key id, app id, tenant, plan, product, route id; zero padding
const (
	metaHeader = 28
	kindRow    = 1
	kindLat    = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendMeta appends the description of slot to buf.
func appendMeta(buf []byte, kind uint8, slot uint32, k *rowKey) []byte {
	start := len(buf)
	strs := [6]string{k.keyID, k.appID, k.tenant, k.plan, k.product, k.route}
	buf = append(buf, make([]byte, metaHeader)...)
	h := buf[start:]
	h[8], h[9] = kind, k.class
	binary.LittleEndian.PutUint32(h[12:], slot)
	for i, s := range strs {
		binary.LittleEndian.PutUint16(h[16+2*i:], uint16(len(s)))
	}
	for _, s := range strs {
		buf = append(buf, s...)
	}
	for (len(buf)-start)%8 != 0 {
		buf = append(buf, 0)
	}
	n := len(buf) - start
	binary.LittleEndian.PutUint32(buf[start:], uint32(n))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(buf[start+8:], castagnoli))
	return buf
}

// meta is one description read back.
type meta struct {
	kind uint8
	slot uint32
	key  rowKey
}

// eachMeta calls fn for each description in b, stopping at the first that
// does not check out (a machine crash can leave the last ones torn), and
// returns where the good ones end.
func eachMeta(b []byte, capacity int, fn func(meta)) (end int) {
	le := binary.LittleEndian
	off := 0
	for off+metaHeader <= len(b) {
		n := int(le.Uint32(b[off:]))
		if n < metaHeader || n%8 != 0 || off+n > len(b) {
			break
		}
		r := b[off : off+n]
		if le.Uint32(r[4:]) != crc32.Checksum(r[8:], castagnoli) {
			break
		}
		m := meta{kind: r[8], slot: le.Uint32(r[12:])}
		m.key.class = r[9]
		if int(m.slot) >= capacity || m.kind != kindRow && m.kind != kindLat || m.key.class > 5 {
			break
		}
		var strs [6]string
		at := metaHeader
		for i := range strs {
			l := int(le.Uint16(r[16+2*i:]))
			if at+l > n {
				return off
			}
			strs[i] = string(r[at : at+l])
			at += l
		}
		m.key.keyID, m.key.appID, m.key.tenant, m.key.plan, m.key.product, m.key.route =
			strs[0], strs[1], strs[2], strs[3], strs[4], strs[5]
		fn(m)
		off += n
	}
	return off
}
