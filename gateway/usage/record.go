package usage

import (
	"math/rand/v2"

	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/routestats"
)

// closedBit, set in the epoch, tells Record the recorder is closed.
const closedBit = 1 << 63

// Record counts x in the open window: one call in its row (caller,
// product, route, status class), billable if it was forwarded, and its
// latency, from x.Start to now, in the caller's histogram for the route.
// Synthetic records are not counted. Record is the request path's: safe
// for concurrent use, it takes no lock and allocates nothing for a row it
// has counted before, and never waits for the disk. After Close it counts
// nothing (see Close).
func (r *Recorder) Record(x *exchange.Record) {
	if x == nil || x.Synthetic {
		return
	}
	k := keyOf(x)
	s := r.reg.get(k.hash(r.reg.seed), &k)
	b := routestats.Bucket(r.now().Sub(x.Start))
	// A random lane spreads the cores over the lanes' cache lines: Go has
	// no cheap way to ask which core a goroutine runs on.
	lane := uintptr(rand.Uint32()) & r.laneMask
	for {
		e := r.epoch.Load()
		if e&closedBit != 0 {
			r.late.Add(1)
			return
		}
		h := r.halves[e&1]
		n := &h.inflight[lane].n
		if r.inFlightHook != nil {
			r.inFlightHook()
		}
		n.Add(1)
		// The closer switches the epoch and then waits for the old half's
		// in-flight count to reach zero. Had it switched before the Add,
		// this load sees it and the call moves on to the new half; if
		// not, the closer sees the Add and waits for this call.
		if r.epoch.Load() != e {
			n.Add(-1)
			continue
		}
		if r.inFlightHook != nil {
			r.inFlightHook()
		}
		i := e & 1
		var rs, ls uint32
		if s.row.epoch[i].Load() == e && s.lat.place.epoch[i].Load() == e {
			rs, ls = s.row.slot[i].Load(), s.lat.place.slot[i].Load()
		} else {
			rs, ls = r.place(h, e, s)
		}
		h.add(lane, rs, ls, b, x.Forwarded)
		n.Add(-1)
		return
	}
}

// place gives s and its histogram their slots in half h of epoch e: the
// first call of a series in a window describes it in the file.
func (r *Recorder) place(h *half, e uint64, s *series) (rs, ls uint32) {
	i := e & 1
	h.mu.Lock()
	if s.row.epoch[i].Load() != e {
		s.row.slot[i].Store(h.rowSlot(&s.key, r.maxSeries))
		s.row.epoch[i].Store(e)
	}
	if p := &s.lat.place; p.epoch[i].Load() != e {
		p.slot[i].Store(h.latSlot(&s.lat.key, r.maxSeries))
		p.epoch[i].Store(e)
	}
	h.mu.Unlock()
	return s.row.slot[i].Load(), s.lat.place.slot[i].Load()
}
