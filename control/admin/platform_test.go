package admin_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// TestTeamReadsTeamsAndPlatform: ListTeams shows a team admin every
// team's name and URL space (who owns what is meant to be visible) but
// the upstreams (backend addresses) of its own team only; GetPlatform
// shows it the platform's plans and scopes, and only the upstream
// identities given to its team, each listing its team alone. A platform
// admin reads both whole.
func TestTeamReadsTeamsAndPlatform(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setUp(t)
	ctx := context.Background()
	p := f.client(platformToken)
	platform := &adminv1.Platform{
		Scopes: []*configv1.Scope{{Name: "orders.read"}, {Name: "search.query"}},
		UpstreamIdentities: []*adminv1.UpstreamIdentity{
			{Name: "edge-mtls", Description: "the platform's own"},
			{Name: "orders-mtls", Teams: []string{"orders"}},
			{Name: "search-mtls", Teams: []string{"search"}, Description: "search's backends"},
			{Name: "shared-mtls", Teams: []string{"orders", "search"}},
		}}
	if _, err := p.PutPlatform(ctx, connect.NewRequest(&adminv1.PutPlatformRequest{Platform: platform})); err != nil {
		t.Fatal(err)
	}

	teamsOf := func(c interface {
		ListTeams(context.Context, *connect.Request[adminv1.ListTeamsRequest]) (*connect.Response[adminv1.ListTeamsResponse], error)
	}) map[string]*adminv1.Team {
		t.Helper()
		resp, err := c.ListTeams(ctx, connect.NewRequest(&adminv1.ListTeamsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*adminv1.Team{}
		for _, team := range resp.Msg.GetTeams() {
			out[team.GetName()] = team
		}
		return out
	}
	all := teamsOf(p)
	for _, name := range []string{"orders", "search"} {
		if len(all[name].GetUpstreams()) == 0 || len(all[name].GetOwns()) == 0 {
			t.Fatalf("the platform lists team %s as %v, want its space and upstreams", name, all[name])
		}
	}
	got := teamsOf(f.client(f.teamToken(t, "search")))
	if diff := cmp.Diff(all["search"], got["search"], protocmp.Transform()); diff != "" {
		t.Errorf("search lists its own team differently from the platform (-platform +search):\n%s", diff)
	}
	wantOrders := proto.CloneOf(all["orders"])
	wantOrders.Upstreams = nil
	if diff := cmp.Diff(wantOrders, got["orders"], protocmp.Transform()); diff != "" {
		t.Errorf("search lists team orders (-want +got), want its space without its upstreams:\n%s", diff)
	}

	platformOf := func(token string) *adminv1.Platform {
		t.Helper()
		resp, err := f.client(token).GetPlatform(ctx, connect.NewRequest(&adminv1.GetPlatformRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetPlatform()
	}
	if diff := cmp.Diff(platform, platformOf(platformToken), protocmp.Transform()); diff != "" {
		t.Errorf("the platform reads the platform (-put +got):\n%s", diff)
	}
	wantSearch := proto.CloneOf(platform)
	wantSearch.UpstreamIdentities = []*adminv1.UpstreamIdentity{
		{Name: "search-mtls", Teams: []string{"search"}, Description: "search's backends"},
		{Name: "shared-mtls", Teams: []string{"search"}},
	}
	if diff := cmp.Diff(wantSearch, platformOf(f.teamToken(t, "search")), protocmp.Transform()); diff != "" {
		t.Errorf("search reads the platform (-want +got), want its own identities only:\n%s", diff)
	}
}
