package gateway

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

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
	snap     *snapshot.Snapshot
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
	if err := n.setSnapshotTokens(cfg.GetIssuers(), cfg.GetDenyList()); err != nil {
		st.set.Release()
		return fmt.Errorf("snapshot %q: %w", cfg.GetVersion(), err)
	}
	n.auth.SetKeys(keys)
	n.limits.SetExpectedNodes(st.snap.RateLimiting.ExpectedNodes)
	// The counters of the routes this snapshot has, kept by id; the others
	// are forgotten, now that nothing else can fail.
	ids := make([]string, len(st.snap.Routes))
	for i := range st.snap.Routes {
		ids[i] = st.snap.Routes[i].ID
	}
	st.stats = n.stats.Routes(ids)
	old := n.state.Swap(st)
	if old != nil {
		time.AfterFunc(releaseDelay, old.set.Release)
	}
	n.log.Info("snapshot applied", "version", st.snap.Version, "sha256", st.snap.SHA256, "routes", len(st.snap.Routes), "clusters", len(st.snap.ClusterNames), "keys", keys.Len(), "issuers", len(cfg.GetIssuers()))
	return nil
}

// FastLane returns the node's fast-lane state: the API keys, deny entries
// and issuers' keys that arrive outside snapshots (the distribution
// client's fast-lane stream and signed-snapshot poll apply to it).
func (n *Node) FastLane() *fastlane.Lane { return n.lane }

// setSnapshotTokens updates the token verifier with a snapshot's issuers
// and deny list, and the fast lane's.
func (n *Node) setSnapshotTokens(issuers []*configv1.Issuer, deny []*configv1.DenyEntry) error {
	n.tokensMu.Lock()
	defer n.tokensMu.Unlock()
	merged, err := n.mergeIssuers(issuers, n.laneJWKS, true)
	if err != nil {
		return err
	}
	if err := n.tokens.Update(merged, joinDeny(deny, n.laneDeny)); err != nil {
		return err
	}
	n.snapIssuers, n.snapDeny, n.merged = issuers, deny, merged
	return nil
}

// setLaneTokens updates the token verifier with the fast lane's deny
// entries and issuers' keys, and the snapshot's. The issuers are merged
// again only when the lane's keys changed: a revocation changes the deny
// list alone.
func (n *Node) setLaneTokens(deny []*configv1.DenyEntry, jwks map[string]string) error {
	n.tokensMu.Lock()
	defer n.tokensMu.Unlock()
	merged := n.merged
	if !maps.Equal(jwks, n.laneJWKS) {
		var err error
		if merged, err = n.mergeIssuers(n.snapIssuers, jwks, false); err != nil {
			return err
		}
	}
	if err := n.tokens.Update(merged, joinDeny(n.snapDeny, deny)); err != nil {
		return err
	}
	n.laneDeny, n.laneJWKS, n.merged = deny, jwks, merged
	return nil
}

// joinDeny is the snapshot's deny list and the fast lane's.
func joinDeny(snap, lane []*configv1.DenyEntry) []*configv1.DenyEntry {
	if len(lane) == 0 {
		return snap
	}
	return append(slices.Clip(snap), lane...)
}

// mergeIssuers adds the fast lane's published key sets to their issuers'
// jwks_json. With lenient (a new snapshot), published keys that do not fit
// their issuer as the snapshot configures it (an algorithm it no longer
// allows) are left out and logged, so that they never make the node refuse
// a snapshot; without (a fast-lane change), they are an error the lane
// reports.
func (n *Node) mergeIssuers(issuers []*configv1.Issuer, laneJWKS map[string]string, lenient bool) ([]*configv1.Issuer, error) {
	if len(laneJWKS) == 0 {
		return issuers, nil
	}
	out := make([]*configv1.Issuer, len(issuers))
	for i, is := range issuers {
		out[i] = is
		published, ok := laneJWKS[is.GetName()]
		if !ok {
			continue
		}
		merged, err := fastlane.MergeJWKS(is.GetJwksJson(), published)
		if err != nil && lenient {
			n.log.Warn("the fast lane's keys of an issuer do not merge with its new config; left out", "issuer", is.GetName(), "err", err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("issuer %q: %w", is.GetName(), err)
		}
		c := proto.CloneOf(is)
		c.JwksJson = merged
		if lenient {
			if err := n.tokens.CheckIssuer(c); err != nil {
				n.log.Warn("the fast lane's keys of an issuer do not fit its new config; left out", "issuer", is.GetName(), "err", err)
				continue
			}
		}
		out[i] = c
	}
	return out, nil
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
