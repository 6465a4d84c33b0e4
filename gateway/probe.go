package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portico-gw/portico/gateway/routestats"
	"github.com/portico-gw/portico/gateway/snapshot"
)

// While a change rolls out, canary nodes probe the routes it touched
// (issue 16): each route's probe (snapshot.Probe) once per interval, made
// in process through the request chain of the route's pool as the
// platform's synthetic caller. Probes are counted per route apart from
// real calls (ProbeStats), never in the route's counters, usage or the
// drain's counts of requests.

// Bounds of the probes a node runs (ProbeRoutes).
const (
	// MinProbeInterval is the shortest interval between two probes of a
	// route.
	MinProbeInterval = 100 * time.Millisecond
	// MaxProbeDuration is the longest a probe set runs.
	MaxProbeDuration = time.Hour
	// MaxProbedRoutes is how many routes one set probes: of more, the
	// first by id (snapshot.MaxProbedRoutes, which the control plane
	// shares a big change's routes out by).
	MaxProbedRoutes = snapshot.MaxProbedRoutes
	// MaxProbesInFlight is how many probes the node has in flight at
	// most, over all routes.
	MaxProbesInFlight = 8
	// MaxProbeTimeout bounds each probe, below the route's own timeout.
	MaxProbeTimeout = 5 * time.Second
	// MaxProbesPerSecond is how many probes the node starts per second at
	// most, over all routes, so that many routes probed often (500 at
	// MinProbeInterval) cannot flood their clusters. Each round goes
	// through every route once, in id order: when the cap holds a round
	// up, every route's probes come less often alike.
	MaxProbesPerSecond = 100
)

// probeSet is what a node probes: routes of one snapshot, how often and
// for how long (see ProbeRoutes).
type probeSet struct {
	sha256             string
	selection          snapshot.RouteSelection // as asked, for the log
	routes             *snapshot.Selector
	interval, duration time.Duration
}

// prober runs a node's probe set: at most one at a time, replaced by the
// next. Its goroutines belong to the node, which stops them when it
// stops.
type prober struct {
	mu sync.Mutex
	// stop ends the running set, whose goroutines have all returned once
	// done is closed; both nil when no set runs.
	stop   context.CancelFunc
	done   chan struct{}
	closed bool
	// counts are the probes per route id, kept across snapshots while the
	// id stays, made for a route when it is first probed.
	counts routestats.Registry
}

// ProbeRoutes replaces the probes the node runs, if any, with those of
// routes, and returns once the old ones have stopped. Every interval, for
// duration, while the node runs the snapshot sha256 (empty: whichever it
// runs), it sends each selected route's probe (snapshot.Probe; a route
// without one is skipped) through the request chain of the route's pool,
// as the platform's synthetic caller: one probe in flight per route at
// most, MaxProbesInFlight for the node and MaxProbesPerSecond started,
// the routes taken in turn, each bounded by the route's
// timeout and MaxProbeTimeout, MaxProbedRoutes routes per set (the first
// by id; the node logs the cut). ProbeStats counts them.
//
// A selection of no route stops probing. An interval under
// MinProbeInterval or a duration not within (0, MaxProbeDuration] is an
// error and changes nothing, as is any selection once the node has
// stopped. ProbeRoutes may be called at any time, from any goroutine,
// before or during Run; the drain stops the probes, as Close does.
func (n *Node) ProbeRoutes(sha256 string, routes snapshot.RouteSelection, interval, duration time.Duration) error {
	if !routes.Empty() {
		if interval < MinProbeInterval {
			return fmt.Errorf("gateway: probe interval %v is under the minimum of %v", interval, MinProbeInterval)
		}
		if duration <= 0 || duration > MaxProbeDuration {
			return fmt.Errorf("gateway: probe duration %v is not within (0, %v]", duration, MaxProbeDuration)
		}
	}
	pr := &n.probes
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.closed && !routes.Empty() {
		return errors.New("gateway: the node has stopped probing")
	}
	pr.stopLocked()
	if routes.Empty() {
		return nil
	}
	set := &probeSet{sha256: sha256, interval: interval, duration: duration, routes: routes.Selector(),
		selection: snapshot.RouteSelection{IDs: slices.Clone(routes.IDs), Prefixes: slices.Clone(routes.Prefixes), All: routes.All}}
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	pr.stop, pr.done = cancel, make(chan struct{})
	go n.runProbes(ctx, cancel, set, pr.done)
	return nil
}

// ProbeStats calls fn with the counters of every route the node has
// probed (ProbeRoutes) since it started, while the route stays in its
// snapshot: requests are probes sent, errors the probes that did not get
// the status class they expect, and the latencies theirs. Real calls'
// counters (RouteStats) never include them.
func (n *Node) ProbeStats(fn func(routeID string, c routestats.Counts)) { n.probes.counts.Each(fn) }

// stopLocked stops the running set, if any, and waits for its probes;
// the caller holds mu.
func (pr *prober) stopLocked() {
	if pr.stop == nil {
		return
	}
	pr.stop()
	<-pr.done
	pr.stop, pr.done = nil, nil
}

// close stops the running set and refuses every later one: the node is
// stopping.
func (pr *prober) close() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.closed = true
	pr.stopLocked()
}

// runProbes runs set until ctx ends (the set's duration, or its stop),
// then waits for its probes and closes done.
func (n *Node) runProbes(ctx context.Context, cancel context.CancelFunc, set *probeSet, done chan<- struct{}) {
	defer close(done)
	defer cancel()
	n.log.Info("probing routes", "sha256", set.sha256, "route_ids", len(set.selection.IDs), "route_prefixes", len(set.selection.Prefixes),
		"all", set.selection.All, "interval", set.interval.String(), "duration", set.duration.String())
	defer func() {
		why := "stopped"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			why = "its duration ended"
		}
		n.log.Info("probing stopped", "sha256", set.sha256, "reason", why)
	}()
	var wg sync.WaitGroup
	defer wg.Wait()

	tick := time.NewTicker(set.interval)
	defer tick.Stop()
	slots := make(chan struct{}, MaxProbesInFlight)
	// pace lets a probe start every 1/MaxProbesPerSecond at most.
	pace := time.NewTicker(time.Second / MaxProbesPerSecond)
	defer pace.Stop()
	// busy has a flag per route id, set while its probe is in flight.
	busy := map[string]*atomic.Bool{}
	pools := map[string]*pool{}
	var (
		snap   *snapshot.Snapshot // the snapshot routes were chosen from
		routes []*snapshot.Route
		paused bool // logged as paused: the node runs another snapshot
	)
	for {
		st := n.state.Load()
		if run := set.sha256 == "" || st.snap.SHA256 == set.sha256; run == paused {
			paused = !run
			if paused {
				n.log.Info("probes paused: the node runs another snapshot", "sha256", set.sha256, "running", st.snap.SHA256)
			} else {
				n.log.Info("probes resumed", "sha256", set.sha256)
			}
		}
		if !paused {
			if st.snap != snap {
				snap, routes = st.snap, n.probedRoutes(st.snap, set)
			}
			for _, r := range routes {
				flag := busy[r.ID]
				if flag == nil {
					flag = new(atomic.Bool)
					busy[r.ID] = flag
				}
				if flag.Load() {
					continue // the last one is still out: never two at once
				}
				select {
				case <-pace.C:
				case <-ctx.Done():
					return
				}
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
				p := pools[r.Probe.Pool]
				if p == nil {
					p = &pool{node: n, name: r.Probe.Pool, index: -1}
					pools[r.Probe.Pool] = p
				}
				flag.Store(true)
				wg.Go(func() {
					defer func() {
						flag.Store(false)
						<-slots
					}()
					n.probe(ctx, p, r)
				})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probedRoutes are the routes of snap that set selects and that have a
// probe, sorted by id, at most MaxProbedRoutes.
func (n *Node) probedRoutes(snap *snapshot.Snapshot, set *probeSet) []*snapshot.Route {
	var out []*snapshot.Route
	for i := range snap.Routes {
		if r := &snap.Routes[i]; r.Probe != nil && set.routes.Selects(r.ID) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *snapshot.Route) int { return strings.Compare(a.ID, b.ID) })
	if len(out) > MaxProbedRoutes {
		n.log.Warn("probe set cut: it selects more routes than a node probes", "sha256", snap.SHA256,
			"selected", len(out), "probed", MaxProbedRoutes, "last_probed", out[MaxProbedRoutes-1].ID)
		out = out[:MaxProbedRoutes]
	}
	return out
}
