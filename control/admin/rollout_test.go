package admin_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/control/admin"
	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/store"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
)

// fakeFleet reports the status a test sets.
type fakeFleet struct {
	mu sync.Mutex
	st distribution.Status
}

func (f *fakeFleet) set(st distribution.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
}

func (f *fakeFleet) Status() distribution.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (*fakeFleet) Pause() bool  { return false }
func (*fakeFleet) Resume() bool { return false }
func (*fakeFleet) Abort() bool  { return false }

// TestRolloutTeamView: GetRollout shows a team admin the rollout's
// evidence only when it is about the team's own objects (a NACK whose
// refused objects are all the team's, a regression on one of its routes,
// hand-written or derived from its service) or names no object at all;
// otherwise a sentence saying that another team's objects stopped the
// rollout. Of each node it sees the unhealthy endpoints of its own
// clusters and the upstream identities given to it. A platform admin sees
// everything as the fleet reports it.
func TestRolloutTeamView(t *testing.T) {
	t.Parallel()
	fleet := &fakeFleet{}
	f := newFixtureWith(t, admin.Options{Fleet: fleet})
	f.setUp(t)
	ctx := context.Background()
	p := f.client(platformToken)
	if _, err := p.PutPlatform(ctx, connect.NewRequest(&adminv1.PutPlatformRequest{Platform: &adminv1.Platform{
		UpstreamIdentities: []*adminv1.UpstreamIdentity{
			{Name: "orders-mtls", Teams: []string{"orders"}},
			{Name: "search-mtls", Teams: []string{"search"}},
			{Name: "shared-mtls", Teams: []string{"orders", "search"}},
		}}})); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*configv1.Route{route("orders.list", "/v1/orders", "orders"), route("search.query", "/v1/search", "search")} {
		if _, err := p.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: r.GetCluster(), Route: r})); err != nil {
			t.Fatal(err)
		}
	}
	// A service of search's, stored as it is (compiling one needs its
	// descriptors; only its id matters here).
	latest, err := f.store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfgBytes, err := f.store.Blob(ctx, latest.ConfigSHA256)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &adminv1.Config{}
	if err := proto.Unmarshal(cfgBytes, cfg); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cfg.GetTeamConfigs() {
		if tc.GetTeam() == "search" {
			tc.Services = append(tc.Services, &configv1.Service{Id: "search.finder", Team: "search", Cluster: "search"})
		}
	}
	cfgBytes, err = proto.MarshalOptions{Deterministic: true}.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := f.store.Commit(ctx, latest.Number, store.Commit{Config: cfgBytes, Snapshot: []byte("not compiled"), CreatedBy: "test",
		Diff: "+ search service search.finder", Audit: store.AuditEntry{Actor: "test", Action: "services.put", Object: "service search.finder"}})
	if err != nil {
		t.Fatal(err)
	}

	nodes := []distribution.NodeStatus{{ID: "node-1", Version: v.Number,
		Identities: []string{"edge-mtls", "orders-mtls", "search-mtls", "shared-mtls"},
		Clusters: []*distributionv1.ClusterHealth{
			{Name: "orders", Endpoints: []*distributionv1.EndpointHealth{{Address: "a.orders.internal:9"}, {Address: "b.orders.internal:9", Healthy: true}}},
			{Name: "search", Endpoints: []*distributionv1.EndpointHealth{{Address: "a.search.internal:9", Healthy: true, Ejected: true}}},
			{Name: "retired", Endpoints: []*distributionv1.EndpointHealth{{Address: "old.internal:9"}}},
		}}}
	nack := func(teams ...string) *distribution.NACK {
		n := &distribution.NACK{Node: "node-1", Version: v.Number, Error: "refused: " + strings.Join(teams, ", ")}
		for _, team := range teams {
			kind := "cluster"
			if team == "" {
				kind = "snapshot"
			}
			n.Objects = append(n.Objects, distribution.RefusedObject{Team: team, Kind: kind, Name: team, Error: "bad"})
		}
		return n
	}
	refused := func(n *distribution.NACK) string { return "node node-1 refused it: " + n.Error }
	searchNACK, ordersNACK, bothNACK, wholeNACK := nack("search"), nack("orders"), nack("orders", "search"), nack("")
	regression := func(route string) string {
		return "stage canary: route " + route + " failed 9 of 10 calls (90.0%) on version 8, 0 of 10 (0.0%) on version 7"
	}
	searchToken, ordersToken := f.teamToken(t, "search"), f.teamToken(t, "orders")
	for _, c := range []struct {
		name, state, evidence string
		halted                *distribution.NACK
		// Whether each team reads the evidence as it is.
		search, orders bool
	}{
		{name: "running", state: distribution.RolloutRunning, search: true, orders: true},
		{name: "a NACK of search's objects", state: distribution.RolloutHalted, evidence: refused(searchNACK), halted: searchNACK, search: true},
		{name: "a NACK of orders' objects", state: distribution.RolloutHalted, evidence: refused(ordersNACK), halted: ordersNACK, orders: true},
		{name: "a NACK of both teams' objects", state: distribution.RolloutHalted, evidence: refused(bothNACK), halted: bothNACK},
		{name: "a NACK of the snapshot as a whole", state: distribution.RolloutHalted, evidence: refused(wholeNACK), halted: wholeNACK},
		// Replaced by a newer version: the NACK quoted is no longer the
		// fleet's to check against.
		{name: "a NACK no longer current", state: distribution.RolloutReplaced, evidence: refused(searchNACK)},
		{name: "a stage that did not settle", state: distribution.RolloutHalted, evidence: "stage 10%: not every node ran it within 10s", search: true, orders: true},
		{name: "an abort", state: distribution.RolloutAborted, evidence: "aborted by an operator", search: true, orders: true},
		{name: "a regression on search's route", state: distribution.RolloutReverted, evidence: regression("search.query"), search: true},
		{name: "a regression on a route of search's service", state: distribution.RolloutReverted,
			evidence: "stage 10%: route search.finder.Find p99 512ms on version 8, 2ms on version 7", search: true},
		{name: "a regression on orders' route", state: distribution.RolloutReverted, evidence: regression("orders.list"), orders: true},
		{name: "a regression on a route no team has", state: distribution.RolloutReverted, evidence: regression("search.querying")},
		{name: "evidence of an unknown shape", state: distribution.RolloutHalted, evidence: "search.query and orders.list disagree"},
	} {
		fleet.set(distribution.Status{Version: v.Number, Halted: c.halted, Nodes: nodes,
			Rollout: &distribution.RolloutStatus{Version: v.Number, Previous: v.Number - 1, Stage: "canary", State: c.state, Evidence: c.evidence}})
		for _, who := range []struct {
			team   string
			token  string
			sees   bool
			others string
		}{
			{"search", searchToken, c.search, "orders"},
			{"orders", ordersToken, c.orders, "search"},
			{"", platformToken, true, ""},
		} {
			name := "the " + who.team + " token"
			if who.team == "" {
				name = "the platform's token"
			}
			resp, err := f.client(who.token).GetRollout(ctx, connect.NewRequest(&adminv1.GetRolloutRequest{}))
			if err != nil {
				t.Fatalf("%s: %s: %v", c.name, name, err)
			}
			ev := resp.Msg.GetRollout().GetEvidence()
			switch {
			case who.sees && ev != c.evidence:
				t.Errorf("%s: %s reads the evidence %q, want %q", c.name, name, ev, c.evidence)
			case !who.sees && (ev == c.evidence || !strings.Contains(ev, "another team's") || strings.Contains(ev, who.others)):
				t.Errorf("%s: %s reads the evidence %q, want a sentence that another team's objects stopped it, naming none of them", c.name, name, ev)
			}
			if c.name != "running" {
				continue
			}
			// The nodes once: they do not depend on the rollout.
			node := resp.Msg.GetNodes()[0]
			wantEndpoints := map[string][]string{
				"search": {"search/a.search.internal:9"},
				"orders": {"orders/a.orders.internal:9"},
				"":       {"orders/a.orders.internal:9", "search/a.search.internal:9", "retired/old.internal:9"},
			}[who.team]
			if got := node.GetUnhealthyEndpoints(); !slices.Equal(got, wantEndpoints) {
				t.Errorf("%s reads unhealthy endpoints %q, want %q", name, got, wantEndpoints)
			}
			wantIDs := map[string][]string{
				"search": {"search-mtls", "shared-mtls"},
				"orders": {"orders-mtls", "shared-mtls"},
				"":       {"edge-mtls", "orders-mtls", "search-mtls", "shared-mtls"},
			}[who.team]
			if got := node.GetUpstreamIdentities(); !slices.Equal(got, wantIDs) {
				t.Errorf("%s reads the node's upstream identities %q, want %q", name, got, wantIDs)
			}
		}
	}
}
