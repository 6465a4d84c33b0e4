// Package upstream holds the clusters of upstream endpoints a gateway node
// forwards to: one connection pool (an [http.Transport]) per cluster,
// least-request balancing, active health checks, passive outlier detection
// and the TLS a node uses towards its backends.
//
// The package does not forward requests; gateway/proxy does, using this API:
//
//	c := set.Cluster(route.Cluster)        // resolved once per snapshot
//	e, err := c.Pick()                     // ErrOverloaded → 503 + Retry-After, ErrNoEndpoint → 503
//	req.URL.Scheme, req.URL.Host = c.Scheme(), e.Address()
//	resp, err := c.Transport().RoundTrip(req)
//	... stream the response, close its body ...
//	e.Done(upstream.OutcomeOf(req.Context(), resp, err))
//
// # Lifecycle
//
//  1. [NewRegistry] once per node.
//  2. [Registry.Build] for every accepted snapshot, off the request path. It
//     reuses every cluster whose config did not change (same *Cluster, same
//     connections, health state and ejections) and builds the others.
//  3. Requests use the [Set] of the snapshot they run on; any number of Sets
//     may be live at once while requests on an old snapshot drain.
//  4. [Set.Release] when no request uses that snapshot any more. A cluster
//     that no live Set holds is closed then: its health checks stop and its
//     idle connections are closed.
//  5. [Registry.Close] at shutdown closes every cluster.
//
// # Health
//
// An endpoint is available when active health checks say it is healthy and
// outlier detection has not ejected it; Pick only chooses available
// endpoints and fails with ErrNoEndpoint when there are none (there is no
// "panic mode" that sends traffic to unhealthy endpoints).
//
//   - Endpoints start healthy, so a fresh node or cluster serves at once;
//     unhealthy_threshold failed probes take one out, healthy_threshold
//     good probes bring it back.
//   - Outlier detection counts [Failure] outcomes: after consecutive_failures
//     in a row the endpoint is ejected for base_ejection_time × k, k being its
//     number of ejections (capped at 10, decaying by one per base period in
//     service). At most max_ejection_percent of the endpoints are ejected at
//     once, rounded down but at least one in a cluster of two or more. The
//     only endpoint of a single-endpoint cluster is ejected only when
//     max_ejection_percent is 100: ejecting it would not move traffic
//     anywhere, only turn a degraded backend into an outage made by the
//     gateway.
//
// # Concurrency
//
// Everything on the request path ([Set.Cluster], [Cluster.Pick],
// [Endpoint.Done], [Cluster.Scheme], [Endpoint.Address]) may be called from
// any number of goroutines, does not allocate and does not wait: it reads
// atomics and an immutable list of available endpoints. The only locking
// there is rare and short: the Done that ejects an endpoint, and the Pick
// that returns an expired ejection to service (which only tries the lock).
// Building, releasing, Endpoints and the health checks take the locks.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// Options configures a [Registry]. The zero value works.
type Options struct {
	// Logger receives health transitions, ejections and certificate reloads.
	// Nil means slog.Default().
	Logger *slog.Logger

	// Dialer opens TCP connections to endpoints. Nil means a net.Dialer with
	// TCP keep-alive. Either way each dial is bounded by the cluster's
	// connect timeout.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

	// Now is the clock of outlier ejections. Nil means time.Now; tests
	// pass a fake clock so that an ejection expires without sleeping.
	// Active health checks run on real timers.
	Now func() time.Time

	// Identities are the node's client certificates, which clusters name
	// in tls.identity. Nil means none: a cluster that names one is
	// refused.
	Identities *Identities
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// ErrOverloaded is returned by [Cluster.Pick] when the cluster already has
// pool.max_in_flight requests in flight. The request must fail at once (503
// with Retry-After); it is never queued.
var ErrOverloaded = errors.New("upstream: cluster at its in-flight limit")

// ErrNoEndpoint is returned by [Cluster.Pick] when every endpoint of the
// cluster is unhealthy by active health checks or ejected by outlier
// detection.
var ErrNoEndpoint = errors.New("upstream: no available endpoint")

// ClusterError is a cluster that could not be built: Cluster names it
// and Err says why, naming the config field at fault.
type ClusterError struct {
	Cluster string
	Err     error
}

func (e *ClusterError) Error() string { return fmt.Sprintf("cluster %q: %v", e.Cluster, e.Err) }

func (e *ClusterError) Unwrap() error { return e.Err }
