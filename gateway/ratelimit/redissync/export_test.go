package redissync

import (
	"context"
	"time"
)

// Step takes one step of Run, for tests that drive the Runner's Table
// clock by hand.
func (r *Runner) Step(ctx context.Context) { r.step(ctx) }

// SetRedisLogEvery sets how often go-redis's lines may reach the log.
func SetRedisLogEvery(d time.Duration) { redisLogEvery = d }
