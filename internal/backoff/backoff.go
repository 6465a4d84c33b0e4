// Package backoff spaces out the retries of something that keeps
// failing: waits that grow from a minimum to a maximum, each drawn at
// random from the upper half of its bound, so that many clients that
// failed at once do not retry in step, and none retries at once.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff is the waits between tries. Set Min and Max (Min > 0, Max >=
// Min) before the first Next. It is not safe for concurrent use: each
// retry loop has its own.
type Backoff struct {
	Min, Max time.Duration
	bound    time.Duration // 0: Min next
}

// Next returns the wait before the next try, between half the current
// bound and the bound, and doubles the bound, up to Max.
func (b *Backoff) Next() time.Duration {
	if b.bound == 0 {
		b.bound = b.Min
	}
	bound := b.bound
	b.bound = min(2*b.bound, b.Max)
	return bound/2 + time.Duration(rand.Int64N(int64(bound-bound/2)+1))
}

// Bound is the largest wait the next Next may return.
func (b *Backoff) Bound() time.Duration {
	if b.bound == 0 {
		return b.Min
	}
	return b.bound
}

// Reset starts the waits again from Min, after a success.
func (b *Backoff) Reset() { b.bound = 0 }
