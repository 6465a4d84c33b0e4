package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/portico-gw/portico/gateway/usage"
	"github.com/portico-gw/portico/gateway/usage/ship"
	"github.com/portico-gw/portico/gateway/usage/spool"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// adoptedSlot is a slot of the usage directory another process left,
// which the node holds while it ships what is in it.
type adoptedSlot struct {
	rec    *usage.Recorder
	sh     *ship.Shipper
	cancel context.CancelFunc
	done   chan struct{}
}

// adoptLoop adopts, every AdoptInterval until ctx is done, the slots of
// the usage directory no process holds, and releases those it has
// shipped. When ctx is done it stops the adopted slots' shippers; close
// flushes and closes them.
func (u *nodeUsage) adoptLoop(ctx context.Context) {
	every := u.opts.AdoptInterval
	if every <= 0 {
		every = DefaultUsageAdoptInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		u.adoptSlots(ctx)
		select {
		case <-ctx.Done():
			u.mu.Lock()
			adopted := make([]*adoptedSlot, 0, len(u.adopted))
			for _, a := range u.adopted {
				adopted = append(adopted, a)
			}
			u.mu.Unlock()
			for _, a := range adopted {
				a.cancel()
				<-a.done
			}
			return
		case <-t.C:
		}
	}
}

// adoptSlots releases the adopted slots that are shipped, then adopts
// every other slot whose lock is free.
func (u *nodeUsage) adoptSlots(ctx context.Context) {
	u.mu.Lock()
	for dir, a := range u.adopted {
		if st := a.sh.Stats(); st.Pending == 0 && !a.rec.Waiting() {
			a.cancel()
			<-a.done
			delete(u.adopted, dir)
			u.release(a.rec, "shipped")
		}
	}
	u.mu.Unlock()
	slots, err := usage.Slots(u.opts.Dir)
	if err != nil {
		u.n.log.Warn("usage: listing the slots of the usage directory", "err", err)
		return
	}
	for _, dir := range slots {
		u.mu.Lock()
		_, held := u.adopted[dir]
		gen, seen := u.released[dir]
		u.mu.Unlock()
		if dir == u.rec.Dir() || held {
			continue
		}
		if seen {
			// A slot released and not counted into since holds nothing
			// new: it is not opened (and its spool read) again.
			if g, err := usage.Generation(dir); err == nil && g == gen {
				continue
			}
		}
		rec, err := usage.Adopt(dir, u.recOpts)
		switch {
		case errors.Is(err, spool.ErrLocked):
			continue // its process serves, or drains
		case err != nil:
			u.n.log.Warn("usage: cannot adopt a slot of the usage directory", "slot", dir, "err", err)
			u.mu.Lock()
			u.released[dir], _ = usage.Generation(dir)
			u.mu.Unlock()
			continue
		}
		sp := rec.Spool()
		u.n.log.Info("usage: adopted a slot another process left", "slot", dir, "spool", rec.SpoolID(),
			"recovered", rec.Stats().Recovered, "mark", rec.Mark(), "last_seq", sp.Last())
		if u.sh == nil || (sp.Last() <= rec.Mark() && !rec.Waiting()) {
			u.mu.Lock()
			u.release(rec, "nothing to ship")
			u.mu.Unlock()
			continue
		}
		sh, err := ship.New(ship.Options{Spool: sp, Sender: u.opts.Sender, NodeID: u.recOpts.NodeID, SpoolID: rec.SpoolID(),
			Windows: rec.Windows(), Logger: u.n.log, From: rec.Mark() + 1, OnTrim: u.saveMark(rec)})
		if err != nil {
			u.n.log.Error("usage: cannot ship an adopted slot", "slot", dir, "err", err)
			u.mu.Lock()
			u.release(rec, "no shipper")
			u.mu.Unlock()
			continue
		}
		actx, cancel := context.WithCancel(ctx)
		a := &adoptedSlot{rec: rec, sh: sh, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(a.done)
			if err := sh.Run(actx); err != nil {
				u.n.log.Error("usage: the shipper of an adopted slot stopped", "slot", dir, "err", err)
			}
		}()
		u.mu.Lock()
		u.adopted[dir] = a
		u.mu.Unlock()
	}
}

// release closes the adopted recorder rec, releasing its slot, and notes
// its generation. The caller holds mu.
func (u *nodeUsage) release(rec *usage.Recorder, why string) {
	dir := rec.Dir()
	if err := rec.Close(); err != nil {
		u.n.log.Warn("usage: closing an adopted slot", "slot", dir, "err", err)
	}
	g, err := usage.Generation(dir)
	if err != nil {
		u.n.log.Warn("usage: reading an adopted slot's window file", "slot", dir, "err", err)
	}
	u.released[dir] = g
	u.n.log.Info("usage: released a slot", "slot", dir, "why", why)
}

// trim hands a usage mark from the fast lane to the shipper of the spool
// it names: the node's own, or an adopted slot's.
func (u *nodeUsage) trim(mark *configv1.UsageMark) {
	u.sh.Trim(mark)
	if sh := u.adoptedShipper(mark.GetSpoolId()); sh != nil {
		sh.Trim(mark)
	}
}

// adoptedShipper is the shipper of the adopted slot of spool id, or nil.
func (u *nodeUsage) adoptedShipper(id string) *ship.Shipper {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, a := range u.adopted {
		if a.rec.SpoolID() == id {
			return a.sh
		}
	}
	return nil
}
