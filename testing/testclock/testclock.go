// Package testclock is a settable clock for tests: pass Clock.Now where a
// package takes a func() time.Time.
package testclock

import (
	"sync/atomic"
	"time"
)

// Clock is a time that moves only when told. It is safe for concurrent use
// and Now takes no lock, so it also serves benchmarks that want the cost
// of a clock read out of the way.
type Clock struct {
	base time.Time
	ns   atomic.Int64 // since base
}

// New returns a Clock at t.
func New(t time.Time) *Clock { return &Clock{base: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return c.base.Add(time.Duration(c.ns.Load())) }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) { c.ns.Store(int64(t.Sub(c.base))) }

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) { c.ns.Add(int64(d)) }
