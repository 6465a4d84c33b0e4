package admin_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control/store"
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

// TestTeamPagesVersionsInLargeReads: a team admin that pages through a
// long history one version at a time costs a few reads of the store per
// page, not one read per version of everyone's history between its own
// versions, and pages that end mid-read go on from their last version:
// with limit 1 and 7 the team sees each of its versions exactly once, in
// order.
func TestTeamPagesVersionsInLargeReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	search := f.client(f.teamToken(t, "search"))
	// 2,500 versions straight into the store (compiling each would take
	// minutes): orders' changes, with one of search's every 300 and one
	// of both teams' every 1,100.
	const n = 2500
	var want []int64 // search's, newest first
	for i := int64(1); i <= n; i++ {
		diff := fmt.Sprintf("~ orders route orders.r%d", i)
		switch {
		case i%1100 == 0:
			diff += fmt.Sprintf("\n~ search route search.q%d", i)
		case i%300 == 0:
			diff = fmt.Sprintf("~ search route search.q%d", i)
		}
		if strings.Contains(diff, "search") {
			want = append([]int64{i}, want...)
		}
		if _, err := f.store.Commit(ctx, i-1, store.Commit{Config: []byte("config"), Snapshot: []byte("snapshot"), CreatedBy: "test", Diff: diff,
			Audit: store.AuditEntry{Actor: "test", Action: "routes.put"}}); err != nil {
			t.Fatal(err)
		}
	}

	for _, limit := range []int32{1, 7} {
		var got []int64
		reads0 := f.versionReads.Load()
		calls := int64(0)
		for before := int64(0); ; {
			calls++
			resp, err := search.ListVersions(ctx, connect.NewRequest(&adminv1.ListVersionsRequest{Before: before, Limit: limit}))
			if err != nil {
				t.Fatal(err)
			}
			vs := resp.Msg.GetVersions()
			if len(vs) > int(limit) {
				t.Fatalf("limit %d: a page of %d versions", limit, len(vs))
			}
			for _, v := range vs {
				got = append(got, v.GetNumber())
			}
			if len(vs) < int(limit) {
				break
			}
			before = vs[len(vs)-1].GetNumber()
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: search paged through versions %v, want %v", limit, got, want)
		}
		// Each call reads until its page is full: together they read the
		// history about once, in pages of 1,000, plus one read per call
		// that its page ended in.
		reads := f.versionReads.Load() - reads0
		if most := calls + n/1000 + 1; reads > most {
			t.Errorf("limit %d: %d calls read the store %d times, want at most %d", limit, calls, reads, most)
		}
		t.Logf("limit %d: %d calls, %d reads of the store for %d versions", limit, calls, reads, n)
	}
}
