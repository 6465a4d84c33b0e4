package upstream

import "math/rand/v2"

// Pick chooses an endpoint for one request and counts it in flight. The
// caller must call [Endpoint.Done] exactly once on the endpoint returned.
//
// The choice is power-of-two-choices least-request: two distinct endpoints
// are drawn at random among the available ones (healthy by active checks and
// not ejected) and the one with fewer requests in flight wins. That spreads
// load like random choice when endpoints are alike and steers it away from a
// slow endpoint, whose requests pile up, without the herd effect of always
// taking the global minimum.
//
// Pick fails fast: with [ErrOverloaded] when the cluster already has
// pool.max_in_flight requests in flight (nothing is queued), and with
// [ErrNoEndpoint] when no endpoint is available. It never blocks and does
// not allocate; it may be called from any number of goroutines.
func (c *Cluster) Pick() (*Endpoint, error) {
	if c.maxInFly > 0 && c.inFlight.Add(1) > c.maxInFly {
		c.inFlight.Add(-1)
		return nil, ErrOverloaded
	}
	if c.ejected.Load() != 0 {
		c.maybeRevive()
	}
	avail := *c.avail.Load()
	var e *Endpoint
	switch n := len(avail); n {
	case 0:
		if c.maxInFly > 0 {
			c.inFlight.Add(-1)
		}
		return nil, ErrNoEndpoint
	case 1:
		e = avail[0]
	default:
		// Two distinct indexes from one 64-bit draw (math/rand/v2's global
		// source is per-thread and lock-free): i in [0,n), j in [0,n-1)
		// shifted past i. The multiply-shift reduction has a bias of at most
		// n/2^32, irrelevant for at most 1024 endpoints.
		r := rand.Uint64()
		i := int((r & 0xffffffff) * uint64(n) >> 32)
		j := int((r >> 32) * uint64(n-1) >> 32)
		if j >= i {
			j++
		}
		e = avail[i]
		if b := avail[j]; b.inFlight.Load() < e.inFlight.Load() {
			e = b
		}
	}
	e.inFlight.Add(1)
	return e, nil
}

// Done ends what [Cluster.Pick] started: it releases the in-flight slot and
// records the outcome for outlier detection. Call it exactly once per Pick,
// after the response body has been closed, from any goroutine. It does not
// block on the request path; the rare call that ejects the endpoint takes the
// cluster's lock briefly.
func (e *Endpoint) Done(outcome Outcome) {
	c := e.cluster
	left := e.inFlight.Add(-1)
	if c.maxInFly > 0 {
		c.inFlight.Add(-1)
	}
	switch outcome {
	case Success:
		// Only write when there is something to reset: a store on every
		// success would bounce the cache line between cores.
		if e.consecFails.Load() != 0 {
			e.consecFails.Store(0)
		}
	case Failure:
		if c.outlier.enabled && e.consecFails.Add(1) >= c.outlier.consecutive {
			c.onConsecutiveFailures(e)
		}
	}
	if left == 0 && c.closed.Load() {
		// A request that outlived its snapshot has returned its connection
		// to the pool of a closed cluster; HTTP/2 connections would stay
		// there until the idle timeout.
		c.transport.CloseIdleConnections()
	}
}
