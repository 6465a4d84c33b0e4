package redissync

import "context"

// Step takes one step of Run, for tests that drive the Runner's Table
// clock by hand.
func (r *Runner) Step(ctx context.Context) { r.step(ctx) }
