package revert_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	"github.com/portico-gw/portico/control/revert"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

func route(id, cluster string) *configv1.Route {
	return &configv1.Route{Id: id, Team: "orders", Path: "/v1/" + id, Cluster: cluster}
}

// config is a config with the orders team's routes and the platform's
// plans.
func config(routes []*configv1.Route, plans ...string) *adminv1.Config {
	cfg := &adminv1.Config{Teams: []*adminv1.Team{{Name: "orders"}}, Platform: &adminv1.Platform{}}
	if len(routes) > 0 {
		cfg.TeamConfigs = []*adminv1.TeamConfig{{Team: "orders", Routes: routes}}
	}
	for _, p := range plans {
		cfg.Platform.Plans = append(cfg.Platform.Plans, &configv1.Plan{Name: p})
	}
	return cfg
}

// TestUndoOneChange is the scenario: route x served; then a new
// route a, x pointed at a dead cluster, a new route b. Undoing the change
// to x keeps a and b, and puts x back on its cluster.
func TestUndoOneChange(t *testing.T) {
	t.Parallel()
	v2 := config([]*configv1.Route{route("x", "live"), route("a", "live")})
	v3 := config([]*configv1.Route{route("x", "dead"), route("a", "live")})
	v4 := config([]*configv1.Route{route("x", "dead"), route("a", "live"), route("b", "live")}, "gold")
	got, objs, err := revert.Undo(v2, v3, v4)
	if err != nil {
		t.Fatal(err)
	}
	want := config([]*configv1.Route{route("x", "live"), route("a", "live"), route("b", "live")}, "gold")
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("Undo(v2, v3, v4) (-want +got):\n%s", d)
	}
	if len(objs) != 1 || objs[0].String() != "orders route x" {
		t.Errorf("Undo put back %v, want orders route x", objs)
	}
	// latest is not changed in place.
	if v4.TeamConfigs[0].Routes[0].GetCluster() != "dead" {
		t.Error("Undo changed latest in place")
	}
}

// TestUndoAddAndRemove: an added object goes, a removed one comes back,
// platform objects too, and a team left empty has no team config.
func TestUndoAddAndRemove(t *testing.T) {
	t.Parallel()
	before := config(nil, "gold", "silver")
	after := config([]*configv1.Route{route("new", "live")}, "gold")
	got, objs, err := revert.Undo(before, after, after)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, before) {
		t.Errorf("Undo of an add and a remove = %v, want %v", got, before)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.String())
	}
	if d := cmp.Diff([]string{"orders route new", "platform plan silver"}, names); d != "" {
		t.Errorf("objects (-want +got):\n%s", d)
	}
}

// TestUndoConflict: an object the change touched and a later change
// touched again is not guessed at: a ConflictError names it.
func TestUndoConflict(t *testing.T) {
	t.Parallel()
	before := config([]*configv1.Route{route("x", "live")})
	after := config([]*configv1.Route{route("x", "dead")})
	later := config([]*configv1.Route{route("x", "other")})
	_, _, err := revert.Undo(before, after, later)
	var cerr *revert.ConflictError
	if !errors.As(err, &cerr) || !errors.Is(err, revert.ErrConflict) || len(cerr.Objects) != 1 || cerr.Objects[0].Name != "x" {
		t.Errorf("Undo with x changed again = %v, want a conflict naming x", err)
	}
}

// TestChangedEveryKind: every kind of object is seen.
func TestChangedEveryKind(t *testing.T) {
	t.Parallel()
	a := &adminv1.Config{}
	b := &adminv1.Config{
		Teams:       []*adminv1.Team{{Name: "t"}},
		TeamConfigs: []*adminv1.TeamConfig{{Team: "t", Routes: []*configv1.Route{{Id: "r"}}, Clusters: []*configv1.Cluster{{Name: "c"}}, Services: []*configv1.Service{{Id: "s"}}}},
		Platform: &adminv1.Platform{Products: []*configv1.Product{{Name: "p"}}, Plans: []*configv1.Plan{{Name: "pl"}}, Scopes: []*configv1.Scope{{Name: "sc"}},
			Issuers: []*configv1.Issuer{{Name: "i"}}, UpstreamIdentities: []*adminv1.UpstreamIdentity{{Name: "u"}}, RateLimiting: &configv1.RateLimiting{}},
	}
	if got := revert.Changed(a, b); len(got) != 10 {
		t.Errorf("Changed saw %d objects, want 10: %v", len(got), got)
	}
	if got := revert.Changed(b, b); len(got) != 0 {
		t.Errorf("Changed(b, b) = %v, want none", got)
	}
	got, _, err := revert.Undo(a, b, b)
	if err != nil || len(revert.Changed(a, got)) != 0 {
		t.Errorf("Undo of everything = %v, %v; want the empty config", got, err)
	}
}
