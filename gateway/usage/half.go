package usage

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// half is one of the window file's two windows, as the recorder uses it.
// The hot path counts into the half of the current epoch; the closer owns
// the other.
type half struct {
	i      int
	m      *mapping
	b      []byte // the half's bytes in the mapping
	hdr    []byte
	cap    uintptr
	totals unsafe.Pointer
	rows   unsafe.Pointer
	lats   unsafe.Pointer

	// inflight counts, per lane, the Record calls counting into the half
	// now; the closer waits for it to reach zero after switching epochs.
	// The padding keeps its cache lines apart from the fields above, which
	// every call reads.
	_        [64]byte
	inflight [maxLanes]struct {
		n atomic.Int64
		_ [56]byte
	}
	_ [64]byte

	// mu guards describing new series (and what follows).
	mu       sync.Mutex
	nRows    int // slots used
	nLats    int
	metaUsed int
	folded   map[rowKey]uint32 // overflow rows (route "") and histograms
	foldedL  map[rowKey]uint32
	scratch  []byte
	foldedN  atomic.Uint64 // series folded in this window
}

func newHalf(m *mapping, i int) *half {
	off := m.l.halfOff(i)
	b := m.b[off : off+m.l.halfBytes]
	return &half{
		i: i, m: m, b: b, hdr: b[:pageSize],
		cap:     uintptr(m.l.capacity),
		totals:  unsafe.Pointer(&b[m.l.totalsOff]),
		rows:    unsafe.Pointer(&b[m.l.rowsOff]),
		lats:    unsafe.Pointer(&b[m.l.latsOff]),
		folded:  map[rowKey]uint32{},
		foldedL: map[rowKey]uint32{},
	}
}

func (h *half) u32(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&h.hdr[off])) }
func (h *half) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&h.hdr[off])) }

func (h *half) state() uint32     { return h.u32(hhState).Load() }
func (h *half) setState(s uint32) { h.u32(hhState).Store(s) }
func (h *half) epoch() uint64     { return h.u64(hhEpoch).Load() }
func (h *half) start() time.Time  { return time.Unix(0, int64(h.u64(hhStart).Load())) }
func (h *half) end() time.Time    { return time.Unix(0, int64(h.u64(hhEnd).Load())) }

// setEnd ends the window at t, or at its start if t is before it: a
// clock offset set backwards while the window was open (a node found to
// be ahead) puts the corrected clock before the start, and a window that
// ends before it starts is one the quota store refuses, a gap for ever.
func (h *half) setEnd(t time.Time) {
	if s := h.start(); t.Before(s) {
		t = s
	}
	h.u64(hhEnd).Store(uint64(t.UnixNano()))
}
func (h *half) setAlive(t time.Time) { h.u64(hhAlive).Store(uint64(t.UnixNano())) }
func (h *half) alive() time.Time     { return time.Unix(0, int64(h.u64(hhAlive).Load())) }
func (h *half) recovered() bool      { return h.u32(hhFlags).Load()&flagRecovered != 0 }
func (h *half) clockOffset() time.Duration {
	return time.Duration(int64(h.u64(hhClockOffset).Load()))
}
func (h *half) drained() bool {
	var n int64
	for i := range h.inflight {
		n += h.inflight[i].n.Load()
	}
	return n == 0
}

// open readies the free half for the window of epoch e starting at start,
// and describes its catch-all rows. The hot path has not reached it yet.
func (h *half) open(e uint64, start time.Time, offset time.Duration) {
	h.u64(hhEpoch).Store(e)
	h.u64(hhStart).Store(uint64(start.UnixNano()))
	h.u64(hhEnd).Store(0)
	h.u64(hhSeq).Store(0)
	h.u64(hhChunks).Store(0)
	h.u64(hhClockOffset).Store(uint64(int64(offset)))
	h.u64(hhAlive).Store(uint64(start.UnixNano()))
	h.u32(hhFlags).Store(0)
	h.mu.Lock()
	h.nRows, h.nLats, h.metaUsed = 0, 0, 0
	h.u64(hhMetaUsed).Store(0)
	for c := range catchAllRows {
		h.describe(kindRow, &rowKey{class: uint8(c)})
	}
	h.describe(kindLat, &rowKey{})
	h.mu.Unlock()
	h.setState(stateOpen)
}

// describe writes the description of the next slot of kind and returns
// the slot; false if the half has no room left for it. The caller holds
// h.mu.
func (h *half) describe(kind uint8, k *rowKey) (uint32, bool) {
	n := &h.nRows
	if kind == kindLat {
		n = &h.nLats
	}
	if *n >= h.m.l.capacity {
		return 0, false
	}
	c := k.clipped()
	h.scratch = appendMeta(h.scratch[:0], kind, uint32(*n), &c)
	meta := h.b[h.m.l.metaOff : h.m.l.metaOff+h.m.l.metaBytes]
	if h.metaUsed+len(h.scratch) > len(meta) {
		return 0, false
	}
	copy(meta[h.metaUsed:], h.scratch)
	h.metaUsed += len(h.scratch)
	// Publish the description only once it is whole.
	h.u64(hhMetaUsed).Store(uint64(h.metaUsed))
	slot := uint32(*n)
	*n++
	return slot, true
}

// rowSlot gives k a slot for a row in this half: its own while there are
// fewer than max rows, else its overflow row's, else the catch-all of its
// class. The caller holds h.mu.
func (h *half) rowSlot(k *rowKey, max int) uint32 {
	if h.nRows < catchAllRows+max {
		if slot, ok := h.describe(kindRow, k); ok {
			return slot
		}
	}
	h.foldedN.Add(1)
	f := k.folded()
	if slot, ok := h.folded[f]; ok {
		return slot
	}
	if slot, ok := h.describe(kindRow, &f); ok {
		h.folded[f] = slot
		return slot
	}
	return uint32(k.class) // the catch-all rows take slots 0 to 5
}

// latSlot does for a latency histogram what rowSlot does for a row; the
// overflow histogram of a caller has route "", the catch-all is slot 0.
func (h *half) latSlot(k *rowKey, max int) uint32 {
	if h.nLats < catchAllLats+max {
		if slot, ok := h.describe(kindLat, k); ok {
			return slot
		}
	}
	f := *k
	f.route = ""
	if slot, ok := h.foldedL[f]; ok {
		return slot
	}
	if slot, ok := h.describe(kindLat, &f); ok {
		h.foldedL[f] = slot
		return slot
	}
	return 0
}

// add counts one call in lane: in row slot rs, in latency bucket b of
// histogram ls, and in the half's own totals.
func (h *half) add(lane uintptr, rs, ls uint32, b int, billable bool) {
	row := unsafe.Add(h.rows, (lane*h.cap+uintptr(rs))*rowBytes)
	tot := unsafe.Add(h.totals, lane*totalsBytes)
	(*atomic.Uint64)(row).Add(1)
	(*atomic.Uint64)(tot).Add(1)
	if billable {
		(*atomic.Uint64)(unsafe.Add(row, 8)).Add(1)
		(*atomic.Uint64)(unsafe.Add(tot, 8)).Add(1)
	}
	lat := unsafe.Add(h.lats, ((lane*h.cap+uintptr(ls))*numBuckets+uintptr(b))*8)
	(*atomic.Uint64)(lat).Add(1)
}

// rowCounts sums slot's row counters over the lanes.
func (h *half) rowCounts(slot uint32) (counted, billable uint64) {
	for l := range uintptr(h.m.l.lanes) {
		row := unsafe.Add(h.rows, (l*h.cap+uintptr(slot))*rowBytes)
		counted += (*atomic.Uint64)(row).Load()
		billable += (*atomic.Uint64)(unsafe.Add(row, 8)).Load()
	}
	return counted, billable
}

// latCounts adds slot's histogram, summed over the lanes, to into.
func (h *half) latCounts(slot uint32, into []uint64) {
	for l := range uintptr(h.m.l.lanes) {
		base := unsafe.Add(h.lats, (l*h.cap+uintptr(slot))*numBuckets*8)
		for b := range numBuckets {
			into[b] += (*atomic.Uint64)(unsafe.Add(base, b*8)).Load()
		}
	}
}

// totalCounts sums the half's own totals over the lanes.
func (h *half) totalCounts() (counted, billable uint64) {
	for l := range uintptr(h.m.l.lanes) {
		tot := unsafe.Add(h.totals, l*totalsBytes)
		counted += (*atomic.Uint64)(tot).Load()
		billable += (*atomic.Uint64)(unsafe.Add(tot, 8)).Load()
	}
	return counted, billable
}

// slotsUsed is how many row and histogram slots the half's descriptions
// name (for a half a previous process left, whose Go state is gone).
func (h *half) slotsUsed() (rows, lats int) {
	used := min(int(h.u64(hhMetaUsed).Load()), h.m.l.metaBytes)
	eachMeta(h.b[h.m.l.metaOff:h.m.l.metaOff+used], h.m.l.capacity, func(m meta) {
		if m.kind == kindRow {
			rows = max(rows, int(m.slot)+1)
		} else {
			lats = max(lats, int(m.slot)+1)
		}
	})
	return rows, lats
}

// reset zeroes what the half's last window used and frees it.
func (h *half) reset() {
	rows, lats := h.slotsUsed()
	h.mu.Lock()
	rows, lats = max(rows, h.nRows), max(lats, h.nLats)
	l := h.m.l
	for lane := range l.lanes {
		r := l.rowsOff + lane*l.capacity*rowBytes
		clear(h.b[r : r+rows*rowBytes])
		t := l.latsOff + lane*l.capacity*latBytes
		clear(h.b[t : t+lats*latBytes])
	}
	clear(h.b[l.totalsOff : l.totalsOff+l.lanes*totalsBytes])
	used := min(int(h.u64(hhMetaUsed).Load()), l.metaBytes)
	clear(h.b[l.metaOff : l.metaOff+max(used, h.metaUsed)])
	h.nRows, h.nLats, h.metaUsed = 0, 0, 0
	clear(h.folded)
	clear(h.foldedL)
	h.foldedN.Store(0)
	h.mu.Unlock()
	h.u64(hhMetaUsed).Store(0)
	h.u64(hhSeq).Store(0)
	h.u64(hhChunks).Store(0)
	h.u32(hhFlags).Store(0)
	h.setState(stateFree)
}
