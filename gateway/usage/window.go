package usage

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/usage/spool"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
)

// testHook, when set (by tests), is called at the points of closing a
// window that a crash must survive: "assigned" (the seq is in the file,
// nothing appended), "appended" (after each spool record), "spooled" (the
// window is marked spooled).
var testHook func(point string)

func hook(point string) {
	if testHook != nil {
		testHook(point)
	}
}

// chunkLimit is the most a window's rows and histograms may take in one
// spool record; a window with more is spooled as several records with
// consecutive seqs, each a window of its own over the same time.
var chunkLimit atomic.Int64

func init() { chunkLimit.Store(spool.MaxPayload - 64<<10) }

func periodOf(t time.Time) string { return t.UTC().Format("2006-01") }

// content is what a drained half holds, read back.
type content struct {
	rows []*quotav1.UsageRow
	lats []*quotav1.LatencyRow
	// counted and billable are the half's own totals, counted on the hot
	// path beside the rows.
	counted, billable uint64
}

func caller(k *rowKey) *quotav1.Caller {
	return &quotav1.Caller{KeyId: k.keyID, AppId: k.appID, Tenant: k.tenant, Plan: k.plan}
}

// read reads h's rows and histograms, merging those of equal keys and
// leaving out the empty ones. h must be drained.
func (h *half) read() content {
	var c content
	rowAt, latAt := map[rowKey]int{}, map[rowKey]int{}
	used := min(int(h.u64(hhMetaUsed).Load()), h.m.l.metaBytes)
	eachMeta(h.b[h.m.l.metaOff:h.m.l.metaOff+used], h.m.l.capacity, func(m meta) {
		switch m.kind {
		case kindRow:
			counted, billable := h.rowCounts(m.slot)
			if counted == 0 && billable == 0 {
				return
			}
			if i, ok := rowAt[m.key]; ok {
				c.rows[i].Counted += counted
				c.rows[i].Billable += billable
				return
			}
			rowAt[m.key] = len(c.rows)
			c.rows = append(c.rows, &quotav1.UsageRow{
				Caller: caller(&m.key), Product: m.key.product, RouteId: m.key.route,
				StatusClass: uint32(m.key.class), Counted: counted, Billable: billable,
			})
		case kindLat:
			var b [numBuckets]uint64
			h.latCounts(m.slot, b[:])
			if b == [numBuckets]uint64{} {
				return
			}
			if i, ok := latAt[m.key]; ok {
				for j, n := range b {
					c.lats[i].Buckets[j] += n
				}
				return
			}
			latAt[m.key] = len(c.lats)
			c.lats = append(c.lats, &quotav1.LatencyRow{Caller: caller(&m.key), RouteId: m.key.route, Buckets: b[:]})
		}
	})
	c.counted, c.billable = h.totalCounts()
	return c
}

// windows builds the window(s) of h from c: one, unless its rows and
// histograms take more than the half's chunk limit. The split depends
// only on what is in the file, so a window partly appended before a crash
// is split the same way again. The seqs are left for the caller.
func (r *Recorder) windows(h *half, c content) []*quotav1.UsageWindow {
	period := cstring(h.hdr[hhPeriod : hhPeriod+8])
	limit := int(h.u64(hhChunkLimit).Load())
	baseC, baseB := h.u64(hhBaseCounted).Load(), h.u64(hhBaseBillable).Load()
	mk := func() *quotav1.UsageWindow {
		return &quotav1.UsageWindow{
			NodeId: r.opts.NodeID, SpoolId: r.spoolID, Parts: 1, Region: r.opts.Region,
			Start: timestamppb.New(h.start()), End: timestamppb.New(h.end()),
			ClockOffset: durationpb.New(h.clockOffset()), Period: period,
			Recovered: h.recovered(),
		}
	}
	ws := []*quotav1.UsageWindow{mk()}
	size := 0
	next := func(n int) *quotav1.UsageWindow {
		w := ws[len(ws)-1]
		if size+n > limit && (len(w.Rows) > 0 || len(w.Latencies) > 0) {
			w = mk()
			ws = append(ws, w)
			size = 0
		}
		size += n
		return w
	}
	for _, row := range c.rows {
		w := next(proto.Size(row) + 8)
		w.Rows = append(w.Rows, row)
		w.Counted += row.Counted
		w.Billable += row.Billable
	}
	for _, lat := range c.lats {
		w := next(proto.Size(lat) + 8)
		w.Latencies = append(w.Latencies, lat)
	}
	// Each part carries the node's counters through itself; the last, the
	// counters of the hot path, which the reconciler checks against the
	// rows.
	pc, pb := baseC, baseB
	for _, w := range ws[:len(ws)-1] {
		pc += w.Counted
		pb += w.Billable
		w.PeriodCounted, w.PeriodBillable = pc, pb
	}
	last := ws[len(ws)-1]
	last.PeriodCounted, last.PeriodBillable = baseC+c.counted, baseB+c.billable
	if last.Recovered {
		// A process killed inside Record may have counted a call in its
		// row and not yet in the half's totals (at most one per lane):
		// the rows are what is billed, so a recovered window's counters
		// follow them, and the node's counters agree with its windows.
		last.PeriodCounted, last.PeriodBillable = pc+last.Counted, pb+last.Billable
	}
	return ws
}

// spoolHalf spools the window of the drained half h. It first records in
// the file the seq the window takes (and how many records, its period and
// the node's counters before it), then appends, then marks it spooled;
// what a crash interrupts, the next Open finishes from the file. A half
// already assigned a seq keeps it (its records at or below spool.Last were
// appended); renumber assigns afresh (the spool is a new one). On error
// the half stays as it is, to be tried again. The caller holds closeMu.
func (r *Recorder) spoolHalf(h *half, renumber bool) error {
	last := r.spool.Last()
	seq := h.u64(hhSeq).Load()
	fresh := h.state() != stateClosing || renumber || seq == 0 || seq > last+1
	if fresh {
		period := periodOf(h.start())
		bc, bb := r.m.cum(period)
		putCString(h.hdr[hhPeriod:hhPeriod+8], period)
		h.u64(hhBaseCounted).Store(bc)
		h.u64(hhBaseBillable).Store(bb)
		h.u64(hhChunkLimit).Store(uint64(chunkLimit.Load()))
	}
	c := h.read()
	ws := r.windows(h, c)
	if fresh {
		seq = last + 1
		h.u64(hhSeq).Store(seq)
		h.u64(hhChunks).Store(uint64(len(ws)))
		h.setState(stateClosing)
		if !r.opts.NoSync {
			if err := r.m.syncHeaders(); err != nil {
				return fmt.Errorf("usage: sync window file: %w", err)
			}
		}
		hook("assigned")
	}
	var buf []byte
	for i, w := range ws {
		w.Seq = seq + uint64(i)
		if w.Seq <= last {
			continue // appended before a crash or an error
		}
		var err error
		if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], w); err != nil {
			return fmt.Errorf("usage: marshal window %d: %w", w.Seq, err)
		}
		if err := r.spool.Append(w.Seq, buf); err != nil {
			return err
		}
		hook("appended")
	}
	pc, pb := ws[len(ws)-1].PeriodCounted, ws[len(ws)-1].PeriodBillable
	r.m.setCum(ws[0].Period, pc, pb)
	h.setState(stateSpooled)
	hook("spooled")
	r.nWindows.Add(uint64(len(ws)))
	r.nFolded.Add(h.foldedN.Load())
	return nil
}

// drain waits until no Record call counts into h. Calls are short and
// never block, so this is a brief spin.
func drain(h *half) {
	for i := 0; !h.drained(); i++ {
		if i < 1000 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// rotate closes the open window and opens the next, unless an earlier
// closed window still waits for the spool: then it tries that one again,
// and on failure the open window goes on counting (it spans longer). The
// windows meet at the latest multiple of Window not after now, when Run's
// timer for the multiple at has fired (a timer late by more than a Window,
// on a busy machine, makes the closed window span several); else (at
// zero, or a clock that moved back since Run set its timer) now. It holds
// closeMu.
func (r *Recorder) rotate(at time.Time) error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closed || r.sealed {
		return ErrClosed
	}
	e := r.epoch.Load()
	cur, next := r.halves[e&1], r.halves[(e+1)&1]
	if next.state() != stateFree {
		if err := r.spoolHalf(next, false); err != nil {
			return r.failed(err)
		}
		next.reset()
		r.notify()
	}
	now := r.clock()
	if b := now.Truncate(r.opts.Window); !at.IsZero() && !at.After(now) && b.After(cur.start()) {
		now = b
	}
	next.open(e+1, now, r.ClockOffset())
	cur.setEnd(now)
	r.epoch.Store(e + 1)
	drain(cur)
	err := r.spoolHalf(cur, false)
	if err != nil {
		return r.failed(err)
	}
	r.recovered()
	cur.reset()
	r.notify()
	r.retain(e, e+1)
	return nil
}

// retain forgets the series used neither in the window of epoch closed
// nor (yet) in that of open.
func (r *Recorder) retain(closed, open uint64) {
	ci, oi := closed&1, open&1
	r.reg.retain(func(s *series) bool {
		return s.row.epoch[ci].Load() == closed || s.row.epoch[oi].Load() == open
	})
}

// failed notes that a window could not be spooled, logging once per
// episode, and returns err.
func (r *Recorder) failed(err error) error {
	if errors.Is(err, spool.ErrFull) {
		if !r.full.Swap(true) {
			r.nFull.Add(1)
			r.log.Warn("usage: spool full, the window stays open in the window file until it has room",
				"spool_bytes", r.spool.Size(), "err", err)
		}
		return err
	}
	if r.failing != err.Error() {
		r.failing = err.Error()
		r.log.Error("usage: cannot spool a window, it stays in the window file", "err", err)
	}
	return err
}

// recovered notes that windows spool again.
func (r *Recorder) recovered() {
	if r.full.Swap(false) {
		r.log.Info("usage: spool has room again")
	}
	r.failing = ""
}

func (r *Recorder) notify() {
	select {
	case r.windowsCh <- struct{}{}:
	default:
	}
}

// nextBoundary is the next multiple of Window on the corrected clock, and
// how long until it.
func (r *Recorder) nextBoundary() (time.Time, time.Duration) {
	now := r.clock()
	at := now.Truncate(r.opts.Window).Add(r.opts.Window)
	return at, at.Sub(now)
}

// Run closes a window at every multiple of Options.Window on the corrected
// clock (Now plus ClockOffset), and syncs the window file every
// SyncInterval, until ctx is done or the recorder is closed. A window the
// spool has no room for is tried again at each multiple. Run one at a
// time; call Close after it returns to close the last window.
func (r *Recorder) Run(ctx context.Context) error {
	sync := time.NewTicker(r.opts.SyncInterval)
	defer sync.Stop()
	at, d := r.nextBoundary()
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sync.C:
			if errors.Is(r.sync(), ErrClosed) {
				return nil
			}
		case <-t.C:
			if err := r.rotate(at); errors.Is(err, ErrClosed) {
				return nil
			}
			at, d = r.nextBoundary()
			t.Reset(d)
		}
	}
}

// sync writes the window file to disk (unless NoSync) and notes in the
// open window when the process was last alive; ErrClosed after Close. A
// failure is logged once until it changes.
func (r *Recorder) sync() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closed || r.sealed {
		return ErrClosed
	}
	r.halves[r.epoch.Load()&1].setAlive(r.clock())
	if r.opts.NoSync {
		return nil
	}
	err := syncMapped(r.m.b)
	if err != nil && r.failing != err.Error() {
		r.failing = err.Error()
		r.log.Error("usage: sync window file", "err", err)
	}
	return err
}
