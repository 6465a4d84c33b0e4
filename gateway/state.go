package gateway

import (
	"fmt"
	"net/http"
	"time"

	"github.com/portico-gw/portico/gateway/auth"
	"github.com/portico-gw/portico/gateway/auth/keytable"
	"github.com/portico-gw/portico/gateway/fastlane"
	"github.com/portico-gw/portico/gateway/router"
	"github.com/portico-gw/portico/gateway/routestats"
	"github.com/portico-gw/portico/gateway/snapshot"
	"github.com/portico-gw/portico/gateway/transcode"
	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// state is what one request reads: a compiled snapshot and the upstream
// clusters it names, resolved per route and per pool so the hot path does
// no map lookups. A state is immutable once published.
type state struct {
	snap *snapshot.Snapshot
	// creds are the API keys, token issuers and deny lists requests
	// authenticate against: the snapshot's and the fast lane's. A fast
	// lane change publishes a copy of the state with new creds.
	creds    *auth.View
	tables   []*router.Table[*snapshot.Route] // by pool index
	clusters []*upstream.Cluster              // by route index
	set      *upstream.Set
	limits   *limitSet
	// rpc transcodes the calls of the snapshot's services; nil without
	// services.
	rpc *transcode.Set
	// stats are the routes' counters, by route index.
	stats []*routestats.Route
}

// releaseDelay is how long a replaced state's upstream clusters are kept:
// every request that could still be using them has hit its route timeout by
// then. Clusters the new state shares are never closed at all.
const releaseDelay = snapshot.MaxTimeout + 5*time.Second

// Apply compiles cfg and, if it is valid, makes it the snapshot every new
// request uses. Requests in flight finish on the snapshot they started
// with. On error the current snapshot stays and the error says why
// (a *snapshot.Error for invalid config).
func (n *Node) Apply(cfg *configv1.Snapshot) error {
	n.applyMu.Lock()
	defer n.applyMu.Unlock()
	idx := make(map[string]int, len(n.pools))
	for _, p := range n.pools {
		idx[p.name] = p.index
	}
	st, err := n.build(cfg, idx)
	if err != nil {
		return err
	}
	keys, err := keytable.Build(cfg.GetKeys())
	if err != nil {
		st.set.Release()
		return fmt.Errorf("snapshot %q: %w", cfg.GetVersion(), err)
	}
	creds, err := n.creds.Snapshot(keys, cfg.GetIssuers(), cfg.GetDenyList())
	if err != nil {
		st.set.Release()
		return fmt.Errorf("snapshot %q: %w", cfg.GetVersion(), err)
	}
	st.creds = creds.View
	n.limits.SetExpectedNodes(st.snap.RateLimiting.ExpectedNodes)
	// The counters of the routes this snapshot has, kept by id; the others
	// are forgotten, now that nothing else can fail.
	ids := make([]string, len(st.snap.Routes))
	for i := range st.snap.Routes {
		ids[i] = st.snap.Routes[i].ID
	}
	st.stats = n.stats.Routes(ids)
	n.probes.counts.Retain(ids)
	old := n.state.Swap(st)
	creds.Commit()
	if old != nil {
		time.AfterFunc(releaseDelay, old.set.Release)
	}
	n.applied.Store(true)
	if n.serving.Load() {
		n.readyOnce.Do(func() { close(n.ready) })
	}
	n.log.Info("snapshot applied", "version", st.snap.Version, "sha256", st.snap.SHA256, "routes", len(st.snap.Routes), "clusters", len(st.snap.ClusterNames), "keys", keys.Len(), "issuers", len(cfg.GetIssuers()))
	return nil
}

// FastLane returns the node's fast-lane state: the API keys, deny entries
// and issuers' keys that arrive outside snapshots (the distribution
// client's fast-lane stream and signed-snapshot poll apply to it).
func (n *Node) FastLane() *fastlane.Lane { return n.lane }

// setLaneKeys publishes the fast lane's new key table: a copy of the
// current state with it.
func (n *Node) setLaneKeys(t *keytable.Table) {
	n.applyMu.Lock()
	defer n.applyMu.Unlock()
	c := n.creds.LaneKeys(t)
	n.publishCreds(c.View)
	c.Commit()
}

// setLaneTokens publishes the fast lane's deny entries and issuers'
// published keys, merged with the snapshot's issuers: a copy of the
// current state with them.
func (n *Node) setLaneTokens(deny []*configv1.DenyEntry, jwks map[string]string) error {
	n.applyMu.Lock()
	defer n.applyMu.Unlock()
	c, err := n.creds.LaneTokens(deny, jwks)
	if err != nil {
		return err
	}
	n.publishCreds(c.View)
	c.Commit()
	return nil
}

// publishCreds swaps in a copy of the current state with new credentials;
// the caller holds applyMu. The copy shares everything else, its upstream
// set included, which the next Apply releases once.
func (n *Node) publishCreds(v *auth.View) {
	next := *n.state.Load()
	next.creds = v
	n.state.Store(&next)
}

// Current returns the snapshot new requests use.
func (n *Node) Current() *snapshot.Snapshot { return n.state.Load().snap }

func (n *Node) build(cfg *configv1.Snapshot, pools map[string]int) (*state, error) {
	snap, err := snapshot.Compile(cfg)
	if err != nil {
		return nil, err
	}
	set, err := n.upstreams.Build(cfg.GetClusters())
	if err != nil {
		return nil, fmt.Errorf("snapshot %q: %w", cfg.GetVersion(), err)
	}
	st := &state{
		snap:     snap,
		tables:   make([]*router.Table[*snapshot.Route], len(pools)),
		clusters: make([]*upstream.Cluster, len(snap.Routes)),
		set:      set,
		limits:   newLimitSet(snap),
	}
	if len(snap.Services) > 0 {
		if st.rpc, err = transcode.New(snap.Services, http.HandlerFunc(n.serveRPC)); err != nil {
			set.Release()
			return nil, fmt.Errorf("snapshot %q: %w", cfg.GetVersion(), err)
		}
	}
	for name, i := range pools {
		st.tables[i] = snap.Table(name)
	}
	for i := range snap.Routes {
		st.clusters[i] = set.Cluster(snap.Routes[i].Cluster)
	}
	return st, nil
}
