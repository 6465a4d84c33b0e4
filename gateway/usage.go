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
	// Dir is the usage directory: the window file, the spool and its id.
	// Required; one node at a time (it is locked).
	Dir string
	// Window is how long a window is; zero means 10 s.
	Window time.Duration
	// SyncInterval is how often the window file is written to disk, what
	// a machine crash may lose; zero means 1 s.
	SyncInterval time.Duration
	// SpoolBytes bounds the spool; zero means 1 GiB. When it is full the
	// node goes on serving and counting, and windows wait.
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

// DefaultUsageFlushTimeout is UsageOptions.FlushTimeout's default.
const DefaultUsageFlushTimeout = 5 * time.Second

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

	// stop ends the goroutines start started and waits for them; nil
	// before start.
	mu   sync.Mutex
	stop func()
}

var _ distribution.Usage = (*nodeUsage)(nil)

// openUsage opens the recorder of o and builds its shipper.
func (n *Node) openUsage(o *UsageOptions, nodeID, region string) (*nodeUsage, error) {
	if o.Dir == "" {
		return nil, &UsageError{Err: fmt.Errorf("no directory given")}
	}
	rec, err := usage.Open(o.Dir, usage.Options{
		NodeID: nodeID, Region: region, Window: o.Window, SyncInterval: o.SyncInterval,
		SpoolBytes: o.SpoolBytes, NoSync: o.NoSync, Now: n.opts.Now, Logger: n.log,
	})
	if err != nil {
		return nil, &UsageError{Dir: o.Dir, Err: err}
	}
	u := &nodeUsage{rec: rec, n: n, opts: *o}
	if o.Sender != nil {
		u.sh, err = ship.New(ship.Options{Spool: rec.Spool(), Sender: o.Sender, NodeID: nodeID, SpoolID: rec.SpoolID(),
			Windows: rec.Windows(), Logger: n.log, From: rec.Mark() + 1, OnTrim: u.saveMark(rec)})
		if err != nil {
			rec.Close()
			return nil, fmt.Errorf("gateway: %w", err)
		}
		// The quota service's marks of this node's spool trim it.
		n.lane.OnUsageMark(u.sh.Trim)
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
	u.mu.Lock()
	u.stop = func() { cancel(); wg.Wait() }
	u.mu.Unlock()
}

// close stops the goroutines, seals the recorder, which spools the open
// window (the node has stopped serving), ships what is left (flush), and
// closes the recorder.
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
	if err := u.rec.Close(); err != nil {
		u.n.log.Error("usage: closing the recorder", "err", err)
	}
}

// flush ships the windows the shipper had not, the one Seal spooled
// included, within FlushTimeout. A node that never runs again would
// otherwise keep them, and the quota service, which never heard of their
// seqs, could close their period without them.
func (u *nodeUsage) flush() {
	from, last := u.sh.Stats().Next, u.rec.Spool().Last()
	if last < from {
		return
	}
	timeout := u.opts.FlushTimeout
	if timeout == 0 {
		timeout = DefaultUsageFlushTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := u.sh.Flush(ctx); err != nil {
		u.n.log.Warn("usage: the last windows wait in the spool for the next run", "err", err)
		return
	}
	u.n.log.Info("usage: shipped the last windows", "from", from, "to", last)
}

// UsageSpool says where the spool stands, for the control plane.
func (u *nodeUsage) UsageSpool() *distributionv1.UsageSpool {
	sp := u.rec.Spool()
	return &distributionv1.UsageSpool{SpoolId: u.rec.SpoolID(), FirstSeq: sp.First(), LastSeq: sp.Last(), Full: u.rec.Stats().SpoolFull}
}

// SetClockOffset sets the offset the stream measured on the recorder.
func (u *nodeUsage) SetClockOffset(d time.Duration) { u.rec.SetClockOffset(d) }

// ResendUsage ships again the windows the reconciler asks for, if they
// are of this spool.
func (u *nodeUsage) ResendUsage(r *distributionv1.ResendUsage) {
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
