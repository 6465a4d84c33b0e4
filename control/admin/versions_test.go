package admin_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
)

// TestTeamReadsItsOwnVersions: a team admin lists, gets and diffs only
// the versions that changed its team's objects, and sees only its lines
// of each diff; another team's or the platform's change says nothing to
// it. A platform admin reads everything.
func TestTeamReadsItsOwnVersions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setUp(t)
	ctx := context.Background()
	orders, search, p := f.client(f.teamToken(t, "orders")), f.client(f.teamToken(t, "search")), f.client(platformToken)
	put := func(c interface {
		PutRoute(context.Context, *connect.Request[adminv1.PutRouteRequest]) (*connect.Response[adminv1.PutRouteResponse], error)
	}, team, id, path string) int64 {
		t.Helper()
		r, err := c.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: team, Route: route(id, path, team), Message: team + " secret plans"}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg.GetChange().GetVersion().GetNumber()
	}
	vOrders := put(orders, "orders", "orders.list", "/v1/orders")
	vSearch := put(search, "search", "search.query", "/v1/search")
	rb, err := p.Rollback(ctx, connect.NewRequest(&adminv1.RollbackRequest{To: vOrders, Message: "undo search's route"}))
	if err != nil {
		t.Fatal(err)
	}
	vRollback := rb.Msg.GetChange().GetVersion().GetNumber()
	vBoth := put(p, "orders", "orders.get", "/v1/orders/{id}")

	all, err := p.ListVersions(ctx, connect.NewRequest(&adminv1.ListVersionsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(all.Msg.GetVersions()); n != int(vBoth) {
		t.Fatalf("platform lists %d versions, want all %d", n, vBoth)
	}
	got, err := orders.ListVersions(ctx, connect.NewRequest(&adminv1.ListVersionsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var numbers []int64
	for _, v := range got.Msg.GetVersions() {
		numbers = append(numbers, v.GetNumber())
		for _, l := range strings.Split(v.GetDiff(), "\n") {
			if !strings.HasPrefix(l[2:], "orders ") && l[2:] != "team orders" {
				t.Errorf("orders sees version %d's line %q", v.GetNumber(), l)
			}
		}
		if strings.Contains(v.GetMessage(), "search") {
			t.Errorf("orders sees version %d's message %q", v.GetNumber(), v.GetMessage())
		}
	}
	for _, want := range []int64{vBoth, vOrders} {
		found := false
		for _, n := range numbers {
			found = found || n == want
		}
		if !found {
			t.Errorf("orders lists versions %v, want %d among them", numbers, want)
		}
	}
	for _, n := range numbers {
		if n == vSearch || n == vRollback {
			t.Errorf("orders lists version %d, which changed only search's objects", n)
		}
	}
	// Paging: one at a time, orders still finds only its own.
	page, err := orders.ListVersions(ctx, connect.NewRequest(&adminv1.ListVersionsRequest{Before: vBoth, Limit: 1}))
	if err != nil || len(page.Msg.GetVersions()) != 1 || page.Msg.GetVersions()[0].GetNumber() != vOrders {
		t.Errorf("orders' page before %d: %v %v, want version %d", vBoth, page.Msg.GetVersions(), err, vOrders)
	}

	if _, err := orders.GetVersion(ctx, connect.NewRequest(&adminv1.GetVersionRequest{Number: vSearch})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("orders gets search's version: %v, want permission_denied", err)
	}
	if v, err := orders.GetVersion(ctx, connect.NewRequest(&adminv1.GetVersionRequest{Number: vOrders})); err != nil || v.Msg.GetVersion().GetDiff() != "+ orders route orders.list" {
		t.Errorf("orders gets its version: %v %v", v, err)
	}
	if v, err := search.GetVersion(ctx, connect.NewRequest(&adminv1.GetVersionRequest{Number: vRollback})); err != nil ||
		v.Msg.GetVersion().GetDiff() != "- search route search.query" {
		t.Errorf("search gets the rollback that removed its route: %v %v", v, err)
	}
	d, err := orders.DiffVersions(ctx, connect.NewRequest(&adminv1.DiffVersionsRequest{From: 0, To: vSearch}))
	if err != nil || strings.Contains(d.Msg.GetDiff(), "search") || !strings.Contains(d.Msg.GetDiff(), "+ orders route orders.list") {
		t.Errorf("orders diffs 0..%d: %q %v, want its own lines only", vSearch, d.Msg.GetDiff(), err)
	}
	if d, err := p.DiffVersions(ctx, connect.NewRequest(&adminv1.DiffVersionsRequest{From: 0, To: vSearch})); err != nil || !strings.Contains(d.Msg.GetDiff(), "+ search route search.query") {
		t.Errorf("platform diffs 0..%d: %q %v", vSearch, d.Msg.GetDiff(), err)
	}
}
