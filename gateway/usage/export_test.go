package usage

import (
	"sync/atomic"
	"time"
)

// CloseWindow closes the open window now, as Run does at a multiple of
// Window.
func (r *Recorder) CloseWindow() error { return r.rotate(time.Time{}) }

// RotateAt does what Run does when its timer for the multiple at fires.
func (r *Recorder) RotateAt(at time.Time) error { return r.rotate(at) }

// CutTotals takes one call off the open half's totals (lane 0), as a kill
// between Record's add to a row and its add to the totals leaves them.
func (r *Recorder) CutTotals() {
	h := r.halves[r.epoch.Load()&1]
	(*atomic.Uint64)(h.totals).Add(^uint64(0))
}

// Sync does what Run does every SyncInterval.
func (r *Recorder) Sync() error { return r.sync() }

// SetTestHook sets the function called at the crash points of closing a
// window ("assigned", "appended", "spooled"). Only for tests that run
// alone in a process (the crash children).
func SetTestHook(f func(point string)) { testHook = f }

// SetChunkLimit sets how many bytes of rows one spool record may take, for
// every recorder of the process, and returns a function that restores it.
func SetChunkLimit(n int) (restore func()) {
	old := chunkLimit.Swap(int64(n))
	return func() { chunkLimit.Store(old) }
}

// Lanes is the recorder's lane count.
func (r *Recorder) Lanes() int { return r.m.l.lanes }

// MapFile is the window file's path.
func (r *Recorder) MapFile() string { return r.m.path }

// SetInFlightHook sets a function Record calls between its steps; call it
// before any Record.
func (r *Recorder) SetInFlightHook(f func()) { r.inFlightHook = f }
