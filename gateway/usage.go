package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/portico-gw/portico/gateway/distribution"
	"github.com/portico-gw/portico/gateway/usage"
	"github.com/portico-gw/portico/gateway/usage/ship"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
)

// UsageOptions make a node count its calls for quotas and billing
// (gateway/usage): every finished request, in windows kept in a
// memory-mapped file under Dir, each closed window spooled in Dir and
// shipped through Sender. The node's region is ControlOptions.Region.
type UsageOptions struct {
	// NodeID names the node in its windows, stably across restarts;
	// empty means the control plane's (ControlOptions.NodeID), or the
	// host name.
	NodeID string
	// Dir is the usage directory of the node, on local disk. Required.
	// It holds slots (gateway/usage.Slots), each a window file, a spool,
	// its id and its mark: the node counts into the first slot no other
	// process holds, and ships and releases the others once their
	// processes are gone, so the old and the new process of an upgrade in
	// place count side by side.
	Dir string
	// AdoptInterval is how often the node looks for slots of Dir no
	// process holds, to ship what they hold; zero means
	// DefaultUsageAdoptInterval.
	AdoptInterval time.Duration
	// Window is how long a window is; zero means 10 s. It must divide a
	// day and lie between 10 ms and 1 h.
	Window time.Duration
	// SyncInterval is how often the window file is written to disk, what
	// a machine crash may lose; zero means 1 s.
	SyncInterval time.Duration
	// SpoolBytes bounds the spool; zero means 1 GiB, and it may be no
	// less than MinUsageSpoolBytes. When it is full the node goes on
	// serving and counting, and windows wait.
	SpoolBytes int64
	// Sender ships the spooled windows (gateway/usage/kafka, or an
	// in-process delivery); nil: windows are spooled and wait there.
	Sender ship.Sender
	// NoSync leaves writing the window file and the spool to the kernel
	// (tests): a process crash still loses nothing, a machine crash more.
	NoSync bool
	// FlushTimeout bounds how long a node that stops spends shipping the
	// windows left, its last included, once it has drained; zero means
	// DefaultUsageFlushTimeout, negative not at all. What is left then
	// waits in the spool for the node's next run.
	FlushTimeout time.Duration
}

// Defaults of UsageOptions.
const (
	DefaultUsageFlushTimeout  = 5 * time.Second
	DefaultUsageAdoptInterval = 2 * time.Second
)

// UsageError is why a node cannot count usage: its usage directory is
// missing, unusable or in use by another process, or its id is not one a
// window can carry. New fails with it rather than serve calls it could
// not count.
type UsageError struct {
	Dir string
	Err error
}

func (e *UsageError) Error() string {
	return fmt.Sprintf("gateway: usage directory %q: %v", e.Dir, e.Err)
}

func (e *UsageError) Unwrap() error { return e.Err }

// nodeUsage is a node's usage counting: the recorder finish feeds, the
// shipper (nil without a Sender), and the goroutines Run starts for them.
// It is what the control plane's stream sees of it (distribution.Usage).
type nodeUsage struct {
	rec  *usage.Recorder
	sh   *ship.Shipper
	n    *Node
	opts UsageOptions

	// recOpts opened rec, and open the slots the node adopts.
	recOpts usage.Options

	// stop ends the goroutines start started and waits for them; nil
	// before start. adopted are the other slots the node holds to ship
	// (usageslots.go), by directory; released, the generation of each
	// slot it released (usage.Generation), not to adopt again unless a
	// process has counted into it since.
	mu       sync.Mutex
	stop     func()
	adopted  map[string]*adoptedSlot
	released map[string]uint64
}

var _ distribution.Usage = (*nodeUsage)(nil)

// MinUsageSpoolBytes is the least UsageOptions.SpoolBytes may be.
const MinUsageSpoolBytes = 64 << 20

// minUsageWindow is the shortest UsageOptions.Window, for tests.
const minUsageWindow = 10 * time.Millisecond

// openUsage opens the recorder of o and builds its shipper.
func (n *Node) openUsage(o *UsageOptions, nodeID, region string) (*nodeUsage, error) {
	if o.Dir == "" {
		return nil, &UsageError{Err: fmt.Errorf("no directory given")}
	}
	switch {
	case o.Window < 0 || o.Window > 0 && (o.Window < minUsageWindow || o.Window > time.Hour || 24*time.Hour%o.Window != 0):
		// A window that does not divide the day would straddle every
		// period's end; a tiny one would rotate in a busy loop.
		return nil, &UsageError{Dir: o.Dir, Err: fmt.Errorf("window %s: want between %s and 1h, dividing a day", o.Window, minUsageWindow)}
	case o.SpoolBytes < 0 || o.SpoolBytes > 0 && o.SpoolBytes < MinUsageSpoolBytes:
		// Below a few of the largest window records the spool would be
		// full for good, and the open window never closed.
		return nil, &UsageError{Dir: o.Dir, Err: fmt.Errorf("spool bound %d bytes: want at least %d", o.SpoolBytes, MinUsageSpoolBytes)}
	}
	ro := usage.Options{
		NodeID: nodeID, Region: region, Window: o.Window, SyncInterval: o.SyncInterval,
		SpoolBytes: o.SpoolBytes, NoSync: o.NoSync, Now: n.opts.Now, Logger: n.log,
	}
	rec, err := usage.OpenDir(o.Dir, ro)
	if err != nil {
		return nil, &UsageError{Dir: o.Dir, Err: err}
	}
	u := &nodeUsage{rec: rec, n: n, opts: *o, recOpts: ro,
		adopted: map[string]*adoptedSlot{}, released: map[string]uint64{}}
	if o.Sender != nil {
		u.sh, err = ship.New(ship.Options{Spool: rec.Spool(), Sender: o.Sender, NodeID: nodeID, SpoolID: rec.SpoolID(),
			Windows: rec.Windows(), Logger: n.log, From: rec.Mark() + 1, OnTrim: u.saveMark(rec)})
		if err != nil {
			rec.Close()
			return nil, fmt.Errorf("gateway: %w", err)
		}
		// The quota service's marks of this node's spools trim them.
		n.lane.OnUsageMark(u.trim)
	}
	return u, nil
}

// saveMark returns the shipper's OnTrim for rec: it records the mark in
// rec's directory.
func (u *nodeUsage) saveMark(rec *usage.Recorder) func(uint64) {
	return func(seq uint64) {
		if err := rec.SaveMark(seq); err != nil {
			u.n.log.Warn("usage: the usage mark is not kept; a restart ships again what it trimmed", "seq", seq, "err", err)
		}
	}
}

// start runs the recorder (closing windows) and the shipper until stop.
func (u *nodeUsage) start() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := u.rec.Run(ctx); err != nil {
			u.n.log.Error("usage: the recorder stopped", "err", err)
		}
	})
	if u.sh != nil {
		wg.Go(func() {
			if err := u.sh.Run(ctx); err != nil {
				u.n.log.Error("usage: the shipper stopped", "err", err)
			}
		})
	}
	wg.Go(func() { u.adoptLoop(ctx) })
	u.mu.Lock()
	u.stop = func() { cancel(); wg.Wait() }
	u.mu.Unlock()
}

// close stops the goroutines, seals the recorder, which spools the open
// window (the node has stopped serving), ships what is left of its spool
// and of the slots it adopted (flush), and closes the recorders.
func (u *nodeUsage) close() {
	u.mu.Lock()
	stop := u.stop
	u.mu.Unlock()
	if stop != nil {
		stop()
	}
	u.n.lane.OnUsageMark(nil)
	if err := u.rec.Seal(); err != nil {
		u.n.log.Error("usage: closing the last window", "err", err)
	}
	if u.sh != nil && u.opts.FlushTimeout >= 0 {
		u.flush()
	}
	u.mu.Lock()
	adopted := u.adopted
	u.adopted = map[string]*adoptedSlot{}
	u.mu.Unlock()
	for _, a := range adopted {
		if err := a.rec.Close(); err != nil {
			u.n.log.Error("usage: closing an adopted slot", "slot", a.rec.Dir(), "err", err)
		}
	}
	if err := u.rec.Close(); err != nil {
		u.n.log.Error("usage: closing the recorder", "err", err)
	}
}

// flush ships the windows the shippers had not, the one Seal spooled
// included, within FlushTimeout. A node that never runs again would
// otherwise keep them, and the quota service, which never heard of their
// seqs, could close their period without them.
func (u *nodeUsage) flush() {
	timeout := u.opts.FlushTimeout
	if timeout == 0 {
		timeout = DefaultUsageFlushTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	u.mu.Lock()
	shippers := []*ship.Shipper{u.sh}
	for _, a := range u.adopted {
		shippers = append(shippers, a.sh)
	}
	u.mu.Unlock()
	for _, sh := range shippers {
		from, last := sh.Stats().Next, sh.Stats().Next+sh.Stats().Pending-1
		if sh.Stats().Pending == 0 {
			continue
		}
		if err := sh.Flush(ctx); err != nil {
			u.n.log.Warn("usage: the last windows wait in the spool for the next run", "err", err)
			continue
		}
		u.n.log.Info("usage: shipped the last windows", "from", from, "to", last)
	}
}

// UsageSpool says where the spool stands, for the control plane: the
// active slot's only. The reconciler sees an adopted slot's spool only
// through the windows that reached the quota service, as it sees a
// retired node's; a re-send request for it is refused by the control
// plane (the spool id is not the one the node reports), and the node
// ships it whole anyway before it releases it.
func (u *nodeUsage) UsageSpool() *distributionv1.UsageSpool {
	sp := u.rec.Spool()
	return &distributionv1.UsageSpool{SpoolId: u.rec.SpoolID(), FirstSeq: sp.First(), LastSeq: sp.Last(), Full: u.rec.Stats().SpoolFull}
}

// SetClockOffset sets the offset the stream measured on the recorder.
func (u *nodeUsage) SetClockOffset(d time.Duration) { u.rec.SetClockOffset(d) }

// ResendUsage ships again the windows the reconciler asks for, if they
// are of this spool.
func (u *nodeUsage) ResendUsage(r *distributionv1.ResendUsage) {
	if sh := u.adoptedShipper(r.GetSpoolId()); sh != nil {
		sh.Resend(r.GetFromSeq(), r.GetToSeq())
		return
	}
	switch {
	case r.GetSpoolId() != u.rec.SpoolID():
		u.n.log.Warn("usage: ignoring a re-send request for another spool", "spool", r.GetSpoolId(), "ours", u.rec.SpoolID())
	case u.sh == nil:
		u.n.log.Warn("usage: ignoring a re-send request: the node ships no windows", "from", r.GetFromSeq(), "to", r.GetToSeq())
	default:
		u.sh.Resend(r.GetFromSeq(), r.GetToSeq())
	}
}

// UsageStats returns the node's usage recorder's and shipper's counters;
// ok is false when the node counts no usage. A node without a Sender
// reports zero shipper counters.
func (n *Node) UsageStats() (rec usage.Stats, sh ship.Stats, ok bool) {
	if n.usage == nil {
		return rec, sh, false
	}
	if n.usage.sh != nil {
		sh = n.usage.sh.Stats()
	}
	return n.usage.rec.Stats(), sh, true
}
