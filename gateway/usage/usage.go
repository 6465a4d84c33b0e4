// Package usage counts a gateway node's calls for quotas and billing: per
// caller (API key or app), product, route and status class, in windows of
// 10 s, with a latency histogram per caller and route. Each closed window
// is appended to the node's spool (package spool) as a quotav1.UsageWindow
// under the next sequence number, and a shipper sends it on from there.
//
// # Lifecycle
//
// A recorder counts into one directory, a slot (Open). A node's usage
// directory holds several (OpenDir, Slots): see Slots below.
//
//  1. Open opens the usage directory: the spool in dir/spool, its id in
//     dir/SPOOLID, the window file dir/window.map, and the last usage mark
//     in dir/MARK, at which it trims the spool (see Marks). Windows a
//     previous process left in the window file are spooled first (see
//     Crash safety).
//  2. The node calls Record once for every finished request, from any
//     goroutine; Run (one goroutine, the owner's) closes a window at every
//     multiple of Options.Window and syncs the window file; after each
//     spooled window it signals Windows, for the shipper.
//  3. Seal, after the node has stopped serving and Run has returned,
//     closes the open window into the spool, which stays open for the
//     shipper to ship the last windows from; then Close unmaps the window
//     file and closes the spool (Close alone seals first).
//
// # Counting
//
// Counted is every finished request, refusals included; billable the ones
// forwarded upstream (exchange.Record.Forwarded). Synthetic records (the
// node's probes) are not counted. The status class is the first digit of
// the HTTP status, 0 when nothing was written. Latency is the whole
// request as the caller saw it, from exchange.Record.Start to the call of
// Record, in the 15 buckets of routestats. Beside the rows, each window
// keeps its own totals, counted on the hot path apart from the rows; the
// node's per-period counters (PeriodCounted, PeriodBillable) are built
// from them, so the reconciler can compare the two.
//
// The period of a window is the UTC calendar month of its start on the
// node's clock corrected by SetClockOffset. The node's period counters
// run through the windows of one period and start again at 0 with the
// first window of the next.
//
// A window has room for Options.MaxSeries rows and as many histograms.
// Past that, a new row is folded into its overflow row: the same caller,
// product and status class with route "" (and a histogram into the
// caller's with route ""), so the counts of every caller and product stay
// exact and only the split by route is lost. The file keeps a quarter as
// much again, plus 64, for overflow rows; were even those used up, the
// rest is counted in one catch-all row per status class with no caller:
// the node's totals stay exact, the callers' are short by it. Stats
// reports how many series were folded.
//
// A window whose rows take more than a spool record holds (16 MiB) is
// spooled as several consecutive records, each a window of the same span
// with a share of the rows.
//
// # The window file
//
// Counts live in window.map, a file mapped MAP_SHARED and updated with
// atomic adds, so they are in the kernel's page cache the moment Record
// returns. The file has a header page and two halves, each holding one
// window:
//
//	file header  magic "PUW1", version, lanes, capacity, sizes, spool id,
//	             and the node's counters of a period through the last
//	             window spooled (period, counted, billable)
//	half × 2     header page: state (free, open, closing, spooled),
//	             epoch, start, end, assigned seq and record count, period,
//	             the node's counters before the window, clock offset,
//	             bytes of descriptions, last sign of life
//	             totals: per lane, counted and billable, a cache line each
//	             descriptions: one record per slot naming what it counts
//	             (row or histogram, slot, status class, key id, app id,
//	             tenant, plan, product, route id), with a CRC-32C
//	             rows: per lane, per slot, counted and billable
//	             histograms: per lane, per slot, 15 buckets
//
// All integers are little-endian. The file is sparse: a window takes the
// pages its slots touch. Lanes (a power of two, up to 8, from GOMAXPROCS)
// keep cores apart: each call adds into a lane picked at random, and a
// window's counts are the sum over lanes.
//
// # Rotation
//
// The hot path counts into the half of the current epoch. To close a
// window the closer opens the other half, switches the epoch, and waits
// until no call counts into the old half any more: each call raises a
// per-lane in-flight counter of its half and then checks that the epoch
// has not moved, so once the counters are zero no add can reach the old
// half. Only then is it read. So every call is in exactly one window.
//
// # Crash safety
//
// Closing a window writes into its half, in order: the period and the
// node's counters before it, the seq it takes (spool.Last()+1) and its
// record count, state closing (then the headers are msynced); then it
// appends the window to the spool; then it records the node's counters
// through it in the file header and sets the state spooled. On Open a
// half found open, or closing with records above spool.Last(), is spooled
// with Recovered set, under the next seq (records already appended are
// not appended again); a half whose records are all at or below Last was
// spooled, and is only marked so. Nothing counted is lost and nothing is
// counted twice when the process is killed, at any point.
//
// A machine crash loses what the kernel had not written back: the window
// file is msynced every Options.SyncInterval (1 s) and the spool fsyncs
// each append, so the loss is bounded by the counts of the last
// SyncInterval. A call interrupted by the kill may be in its row but not
// yet in the window's totals (the node's counters then differ from the
// rows by at most the calls in flight, one per core).
//
// # Slots
//
// Two processes of one node run at once during an upgrade in place: the
// new one serves before the old one has drained and released its spool.
// So a node's usage directory holds slots, dir/0, dir/1 and so on, each a
// complete recorder directory (spool, SPOOLID, window.map, MARK) with its
// own spool id and sequence; a directory from before slots, with its files
// in dir itself, is the first slot. OpenDir takes the first slot no
// process holds. A process also adopts every other slot whose lock is free
// (Adopt): that recovers its window file as Open would, the shipper ships
// its spool from its mark, the marks the quota service publishes for its
// spool id meanwhile trim it, and once it is all shipped the process
// closes it, releasing it with its spool id, sequence and mark, which the
// next process that takes the slot continues. The quota service deduplicates on (node, spool id, seq,
// part), so slots neither collide nor double count, and a window of a
// released slot is shipped again only if it was not committed.
//
// # Marks
//
// The quota service's usage marks (every window up to seq committed)
// reach the shipper, which trims the spool there and calls SaveMark. The
// spool keeps its trims in memory and brings back the records of the
// segment it was writing to at the next open; so SaveMark records the
// mark in dir/MARK ("<spool id> <seq>", replaced by a rename), and Open
// trims the spool at it, and Mark tells the shipper where to start. A
// restart so ships again only the windows the quota service had not
// committed when the node stopped. A mark of another spool id is ignored.
//
// # Spool full
//
// When the spool has no room (spool.ErrFull), the closed window stays in
// its half and the next one goes on counting in the other, which is not
// closed until the first is spooled: it simply spans longer. Each
// multiple of Window tries again. Requests are never blocked and nothing
// is dropped; Stats reports SpoolFull and counts the episodes, and each
// episode is logged once.
package usage

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portico-gw/portico/gateway/usage/spool"
)

// Options configures Open. The zero value works but for NodeID.
type Options struct {
	// NodeID names the node in its windows; Region is the node's region.
	NodeID, Region string
	// Window is how long a window is. Zero means 10 s.
	Window time.Duration
	// SyncInterval is how often Run msyncs the window file: what a machine
	// crash may lose. Zero means 1 s.
	SyncInterval time.Duration
	// SpoolBytes bounds the spool (spool.Options.MaxBytes). Zero means
	// 1 GiB.
	SpoolBytes int64
	// NoSync leaves writing the window file and the spool to the kernel:
	// a process crash still loses nothing, a machine crash more. For tests.
	NoSync bool
	// Now is the node's clock. Nil means time.Now.
	Now func() time.Time
	// Logger receives the recorder's warnings. Nil means slog.Default().
	Logger *slog.Logger
	// MaxSeries bounds the rows (and histograms) of one window; past it
	// rows fold into overflow rows (see the package comment). Zero means
	// 1<<20. It applies to a window file when it is made.
	MaxSeries int

	// adopt is set by Adopt: open no window.
	adopt bool
}

// ErrClosed is returned by what closes windows after Seal or Close.
var ErrClosed = errors.New("usage: recorder closed")

// Recorder counts a node's calls into windows and spools them.
type Recorder struct {
	opts      Options
	now       func() time.Time
	log       *slog.Logger
	maxSeries int
	laneMask  uintptr
	reg       *registry

	// epoch numbers the open window; its parity is the half it counts
	// into, and closedBit is set once sealed.
	epoch  atomic.Uint64
	halves [2]*half
	offset atomic.Int64
	late   atomic.Uint64
	// inFlightHook, set by tests before any call, runs inside Record's
	// critical steps, to widen the races rotation must be proof against.
	inFlightHook func()

	dir     string
	spool   *spool.Spool
	spoolID string
	// mark is the last usage mark applied (Mark); markMu serialises
	// SaveMark.
	mark      atomic.Uint64
	markMu    sync.Mutex
	m         *mapping
	windowsCh chan struct{}

	// closeMu serialises closing windows, syncing, Seal and Close;
	// sealed is set by Seal (no window is open any more), closed by Close.
	closeMu sync.Mutex
	sealed  bool
	closed  bool
	failing string // the last error other than ErrFull, logged once

	full       atomic.Bool
	nFull      atomic.Uint64
	nWindows   atomic.Uint64
	nRecovered atomic.Uint64
	nFolded    atomic.Uint64
}

var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// Open opens (creating if need be) the usage directory dir, spools the
// windows a previous process left in its window file, and opens a window.
// Only one Recorder may have dir open (the spool's lock): Open fails with
// spool.ErrLocked while another holds it. A node opens its usage
// directory with OpenDir, which picks one of its slots.
func Open(dir string, opts Options) (*Recorder, error) {
	if !nodeIDPattern.MatchString(opts.NodeID) {
		return nil, fmt.Errorf("usage: bad node id %q", opts.NodeID)
	}
	if opts.Window <= 0 {
		opts.Window = 10 * time.Second
	}
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = time.Second
	}
	if opts.MaxSeries <= 0 {
		opts.MaxSeries = 1 << 20
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	spoolDir := filepath.Join(dir, "spool")
	_, err := os.Stat(spoolDir)
	newSpool := errors.Is(err, os.ErrNotExist)
	sopts := spool.Options{MaxBytes: opts.SpoolBytes, NoSync: opts.NoSync, Logger: opts.Logger}
	if opts.SpoolBytes > 0 {
		sopts.SegmentBytes = min(64<<20, opts.SpoolBytes/4)
	}
	sp, err := spool.Open(spoolDir, sopts)
	if err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	if seq, above := markAbove(dir, sp.Last()); !newSpool && above {
		// Every window the spool still holds is at or below the mark, so
		// committed: start a new spool, as if the directory were new,
		// rather than number windows again under a spool id whose seqs
		// the quota service has.
		opts.Logger.Warn("usage: the spool holds fewer windows than the quota service committed: starting a new spool",
			"dir", dir, "mark", seq, "last", sp.Last())
		sp.Close()
		if err := os.RemoveAll(spoolDir); err != nil {
			return nil, fmt.Errorf("usage: %w", err)
		}
		newSpool = true
		if sp, err = spool.Open(spoolDir, sopts); err != nil {
			return nil, fmt.Errorf("usage: %w", err)
		}
	}
	r := &Recorder{
		opts: opts, now: opts.Now, log: opts.Logger, maxSeries: opts.MaxSeries,
		reg: newRegistry(), spool: sp, windowsCh: make(chan struct{}, 1), dir: dir,
	}
	if err := r.open(dir, newSpool); err != nil {
		sp.Close()
		return nil, err
	}
	return r, nil
}

func (r *Recorder) open(dir string, newSpool bool) error {
	id, err := spoolID(dir, newSpool, r.opts.NoSync)
	if err != nil {
		return err
	}
	r.spoolID = id
	if seq := r.readMark(dir, id); seq > 0 {
		// Trimming is the spool's in memory only: bring back no window
		// the quota service had committed.
		if err := r.spool.Trim(seq); err != nil {
			r.log.Warn("usage: trimming the spool at its mark", "seq", seq, "err", err)
		}
		r.mark.Store(seq)
	}
	lanes := 1
	for lanes < runtime.GOMAXPROCS(0) && lanes < maxLanes {
		lanes *= 2
	}
	want := newLayout(lanes, catchAllRows+r.maxSeries+r.maxSeries/4+64)
	path := filepath.Join(dir, "window.map")
	m, err := openMap(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		m, err = createMap(path, want, id, "", 0, 0, r.opts.NoSync)
	case errors.Is(err, errBadMap):
		bad := path + ".bad"
		r.log.Error("usage: window file unreadable, counts in it are lost; set aside", "file", bad, "err", err)
		if err := os.Rename(path, bad); err != nil {
			return fmt.Errorf("usage: %w", err)
		}
		m, err = createMap(path, want, id, "", 0, 0, r.opts.NoSync)
	}
	if err != nil {
		return fmt.Errorf("usage: window file: %w", err)
	}
	r.setMapping(m)
	renumber := m.spoolID() != id
	if renumber {
		// A new spool starts its sequence and the node's counters afresh.
		m.setSpoolID(id)
	}
	r.recover(renumber)
	if r.opts.adopt {
		r.sealed = true
		r.epoch.Store(closedBit | max(r.halves[0].epoch(), r.halves[1].epoch()))
		return nil
	}
	if m.l != want && r.halves[0].state() == stateFree && r.halves[1].state() == stateFree {
		period, period2 := m.period(), cstring(m.b[fhPeriod2:fhPeriod2+8])
		c, b := m.cum(period)
		c2, b2 := m.cum(period2)
		m.close()
		if m, err = createMap(path, want, id, period, c, b, r.opts.NoSync); err != nil {
			return fmt.Errorf("usage: window file: %w", err)
		}
		if period2 != "" {
			m.setCum(period2, c2, b2)
		}
		r.setMapping(m)
	}
	r.start()
	return nil
}

func (r *Recorder) setMapping(m *mapping) {
	r.m = m
	r.halves = [2]*half{newHalf(m, 0), newHalf(m, 1)}
	r.laneMask = uintptr(m.l.lanes - 1)
	r.maxSeries = min(r.opts.MaxSeries, m.l.capacity-catchAllRows)
}

// recover spools, in epoch order, the halves a previous process left
// behind, stopping at the first that fails (the spool is full): the
// windows after it must wait for it.
func (r *Recorder) recover(renumber bool) {
	hs := []*half{}
	for _, h := range r.halves {
		if h.state() != stateFree {
			hs = append(hs, h)
		}
	}
	slices.SortFunc(hs, func(a, b *half) int { return cmp.Compare(a.epoch(), b.epoch()) })
	for _, h := range hs {
		h.u32(hhFlags).Store(h.u32(hhFlags).Load() | flagRecovered)
		if h.state() == stateSpooled {
			h.reset()
			continue
		}
		if h.state() == stateOpen {
			if c := h.read(); len(c.rows) == 0 && c.counted == 0 {
				h.reset() // nothing counted: no window to spool
				continue
			}
		}
		if h.u64(hhEnd).Load() == 0 {
			end := h.alive()
			if end.Before(h.start()) {
				end = h.start()
			}
			h.setEnd(end)
		}
		if err := r.spoolHalf(h, renumber); err != nil {
			r.failed(err)
			return
		}
		r.nRecovered.Add(1)
		h.reset()
		r.notify()
	}
}

// start makes a window current: the one a previous process left open if
// it could not be spooled yet, else a new one in a free half.
func (r *Recorder) start() {
	h0, h1 := r.halves[0], r.halves[1]
	maxE := max(h0.epoch(), h1.epoch())
	for _, h := range r.halves {
		if h.state() == stateOpen {
			h.adopt()
			r.epoch.Store(h.epoch())
			return
		}
	}
	i := 0
	if h0.state() != stateFree {
		i = 1
	} else if h1.state() == stateFree {
		i = int((maxE + 1) & 1)
	}
	e := maxE + 1
	if e&1 != uint64(i) {
		e++
	}
	r.halves[i].open(e, r.clock(), r.ClockOffset())
	r.epoch.Store(e)
}

// adopt takes on an open half a previous process left: it counts on
// after its descriptions.
func (h *half) adopt() {
	h.mu.Lock()
	defer h.mu.Unlock()
	used := min(int(h.u64(hhMetaUsed).Load()), h.m.l.metaBytes)
	h.metaUsed = eachMeta(h.b[h.m.l.metaOff:h.m.l.metaOff+used], h.m.l.capacity, func(m meta) {
		if m.kind == kindRow {
			h.nRows = max(h.nRows, int(m.slot)+1)
			if m.key.route == "" {
				h.folded[m.key] = m.slot
			}
		} else {
			h.nLats = max(h.nLats, int(m.slot)+1)
			if m.key.route == "" {
				h.foldedL[m.key] = m.slot
			}
		}
	})
	h.u64(hhMetaUsed).Store(uint64(h.metaUsed))
}

// spoolID reads the spool's id from dir/SPOOLID, or makes one: for a new
// spool, or when the file is missing.
func spoolID(dir string, newSpool, noSync bool) (string, error) {
	path := filepath.Join(dir, "SPOOLID")
	if !newSpool {
		b, err := os.ReadFile(path)
		id := strings.TrimSpace(string(b))
		if err == nil && len(id) == 32 {
			if _, err := hex.DecodeString(id); err == nil {
				return id, nil
			}
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("usage: spool id: %w", err)
		}
	}
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("usage: spool id: %w", err)
	}
	if !noSync {
		if f, err := os.Open(tmp); err == nil {
			f.Sync()
			f.Close()
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("usage: spool id: %w", err)
	}
	if !noSync {
		syncDir(dir)
	}
	return id, nil
}

// clock is the corrected clock: Now plus the offset.
func (r *Recorder) clock() time.Time { return r.now().Add(r.ClockOffset()) }

// SetClockOffset sets the offset of the node's clock the control-plane
// stream measured (control's clock minus the node's). Windows opened from
// now on start on the node's clock plus d, and so belong to that period.
func (r *Recorder) SetClockOffset(d time.Duration) { r.offset.Store(int64(d)) }

// ClockOffset returns the offset SetClockOffset set; zero before.
func (r *Recorder) ClockOffset() time.Duration { return time.Duration(r.offset.Load()) }

// Spool returns the spool the windows go to, for the shipper. Close
// closes it.
func (r *Recorder) Spool() *spool.Spool { return r.spool }

// SpoolID returns the spool's id: 32 hex digits, made with the spool.
func (r *Recorder) SpoolID() string { return r.spoolID }

// Windows receives a value (never more than one waiting) whenever a
// window has been spooled: the shipper's signal to read the spool.
func (r *Recorder) Windows() <-chan struct{} { return r.windowsCh }

// Stats are a recorder's counters.
type Stats struct {
	// Windows counts the spool records this process appended (a window of
	// more than 16 MiB takes several), Recovered the windows a previous
	// process left that Open spooled.
	Windows, Recovered uint64
	// SpoolFull is set while a closed window waits for room in the spool;
	// SpoolFullTotal counts such episodes.
	SpoolFull      bool
	SpoolFullTotal uint64
	// Series is how many rows the recorder knows (active in the last two
	// windows); Folded counts, over the windows spooled, the rows that
	// found no room of their own in their window and were folded into an
	// overflow row.
	Series int
	Folded uint64
	// Late counts Record calls after Close, which were not counted.
	Late uint64
	// LastSeq is the spool's last seq.
	LastSeq uint64
}

// Stats returns the recorder's counters. Safe for concurrent use.
func (r *Recorder) Stats() Stats {
	return Stats{
		Windows: r.nWindows.Load(), Recovered: r.nRecovered.Load(),
		SpoolFull: r.full.Load(), SpoolFullTotal: r.nFull.Load(),
		Series: r.reg.len(), Folded: r.nFolded.Load(), Late: r.late.Load(),
		LastSeq: r.spool.Last(),
	}
}

// Seal closes the open window into the spool and syncs the window file,
// leaving the spool open: a node that stops seals its recorder, ships
// what is left from the spool, then closes the recorder. Call it once the
// node has stopped serving and Run has returned: Record calls that come
// after it (or race with it) return without counting and are counted in
// Stats.Late, and Run returns. A window the spool has no room for stays
// in the window file, and the next Open spools it. Seal may be called
// more than once; it returns ErrClosed after Close.
func (r *Recorder) Seal() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closed {
		return ErrClosed
	}
	return r.seal()
}

// seal is Seal; the caller holds closeMu.
func (r *Recorder) seal() error {
	if r.sealed {
		return nil
	}
	r.sealed = true
	e := r.epoch.Load()
	r.epoch.Store(e | closedBit)
	cur, other := r.halves[e&1], r.halves[(e+1)&1]
	drain(cur)
	var errs []error
	keep := func(err error) {
		if errors.Is(err, spool.ErrFull) {
			r.log.Warn("usage: spool full at close, the window stays in the window file for the next start")
			return
		}
		errs = append(errs, err)
	}
	if other.state() != stateFree {
		if err := r.spoolHalf(other, false); err != nil {
			keep(err)
		} else {
			other.reset()
		}
	}
	if other.state() == stateFree && cur.state() == stateOpen {
		cur.setEnd(r.clock())
		if err := r.spoolHalf(cur, false); err != nil {
			keep(err)
		} else {
			cur.reset()
			r.notify()
		}
	}
	if !r.opts.NoSync {
		if err := syncMapped(r.m.b); err != nil {
			errs = append(errs, fmt.Errorf("usage: sync window file: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Close seals the recorder if Seal was not called (see Seal), unmaps the
// window file and closes the spool, releasing the usage directory. Close
// may be called more than once.
func (r *Recorder) Close() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closed {
		return nil
	}
	err := r.seal()
	r.closed = true
	return errors.Join(err, r.m.close(), r.spool.Close())
}
