package admin_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/control/admin"
	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/control/versions"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

const platformToken = "ptk_platform-bootstrap-token-for-the-admin-tests-0123456789"

type fixture struct {
	url   string
	store *store.Store
	// commits receives the number of every version committed.
	commits chan int64
	// versionReads counts the pages of versions the service read.
	versionReads *atomic.Int64
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, admin.Options{})
}

// newFixtureWith is newFixture with opts (Versions is the fixture's: it
// publishes to f.commits).
func newFixtureWith(t *testing.T, opts admin.Options) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := admin.Bootstrap(ctx, st, platformToken); err != nil {
		t.Fatal(err)
	}
	f := &fixture{store: st, commits: make(chan int64, 100)}
	opts.Versions = versions.New(st, func(_ context.Context, v int64) error { f.commits <- v; return nil }, nil)
	svc := admin.New(st, opts)
	f.versionReads = admin.CountVersionReads(svc)
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fixture) client(token string) adminv1connect.AdminServiceClient {
	return admintest.Client(f.url, token)
}

// teamToken issues a team-admin token through the API.
func (f *fixture) teamToken(t *testing.T, team string) string {
	t.Helper()
	resp, err := f.client(platformToken).CreateToken(context.Background(), connect.NewRequest(&adminv1.CreateTokenRequest{
		Team: team, Role: adminv1.Role_ROLE_TEAM_ADMIN, Note: team + " CI"}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetToken()
}

// setUp declares teams orders and search with their spaces and a cluster
// each.
func (f *fixture) setUp(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	p := f.client(platformToken)
	for team, prefix := range map[string]string{"orders": "/v1/orders", "search": "/v1/search"} {
		if _, err := p.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Team: &adminv1.Team{
			Name: team, Owns: []*adminv1.Ownership{{Host: "api.example.com", PathPrefix: prefix}},
			Upstreams: []*adminv1.Upstream{{Address: &adminv1.Upstream_Host{Host: "*." + team + ".internal"}}}}})); err != nil {
			t.Fatal(err)
		}
		if _, err := p.PutCluster(ctx, connect.NewRequest(&adminv1.PutClusterRequest{Team: team, Cluster: cluster(team)})); err != nil {
			t.Fatal(err)
		}
	}
}

// cluster is a cluster of the team setUp gives "*.<name>.internal".
func cluster(name string) *configv1.Cluster {
	return &configv1.Cluster{Name: name, Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: "api." + name + ".internal:9"}}}
}

func route(id, path, cluster string) *configv1.Route {
	return &configv1.Route{Id: id, Hosts: []string{"api.example.com"}, Path: path, Cluster: cluster,
		Auth: &configv1.RouteAuth{Public: true, Reviewer: "security"}}
}

func violations(err error) []string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	var out []string
	for _, d := range ce.Details() {
		m, derr := d.Value()
		if br, ok := m.(*errdetails.BadRequest); derr == nil && ok {
			for _, v := range br.GetFieldViolations() {
				out = append(out, v.GetField()+": "+v.GetDescription())
			}
		}
	}
	return out
}

// TestTeamWritesItsOwnRoutes: a team admin puts, reads, lists and deletes
// its routes; each write is a version with its diff and audit entry.
func TestTeamWritesItsOwnRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setUp(t)
	ctx := context.Background()
	orders := f.client(f.teamToken(t, "orders"))

	put, err := orders.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: "orders",
		Route: route("orders.get", "/v1/orders/{id}", "orders"), Message: "add GET order"}))
	if err != nil {
		t.Fatal(err)
	}
	ch := put.Msg.GetChange()
	if !ch.GetChanged() || ch.GetVersion().GetNumber() != 5 || ch.GetDiff() != "+ orders route orders.get" || len(ch.GetVersion().GetSha256()) != 64 {
		t.Errorf("PutRoute change = %v", ch)
	}
	got, err := orders.GetRoute(ctx, connect.NewRequest(&adminv1.GetRouteRequest{Team: "orders", Id: "orders.get"}))
	if err != nil || got.Msg.GetRoute().GetPath() != "/v1/orders/{id}" {
		t.Errorf("GetRoute = %v, %v", got, err)
	}
	// The same route again changes nothing and makes no version.
	again, err := orders.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: "orders", Route: route("orders.get", "/v1/orders/{id}", "orders")}))
	if err != nil || again.Msg.GetChange().GetChanged() || again.Msg.GetChange().GetVersion().GetNumber() != 5 {
		t.Errorf("unchanged PutRoute = %v, %v", again.Msg, err)
	}
	list, err := orders.ListRoutes(ctx, connect.NewRequest(&adminv1.ListRoutesRequest{Team: "orders"}))
	if err != nil || len(list.Msg.GetRoutes()) != 1 {
		t.Errorf("ListRoutes = %v, %v", list, err)
	}
	del, err := orders.DeleteRoute(ctx, connect.NewRequest(&adminv1.DeleteRouteRequest{Team: "orders", Id: "orders.get"}))
	if err != nil || del.Msg.GetChange().GetDiff() != "- orders route orders.get" {
		t.Errorf("DeleteRoute = %v, %v", del, err)
	}
	if _, err := orders.DeleteRoute(ctx, connect.NewRequest(&adminv1.DeleteRouteRequest{Team: "orders", Id: "orders.get"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("deleting it again: %v, want not_found", err)
	}
	entries, err := orders.ListAudit(ctx, connect.NewRequest(&adminv1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range entries.Msg.GetEntries() {
		actions = append(actions, e.GetAction()+" "+e.GetOutcome())
	}
	if want := []string{"routes.delete not_found", "routes.delete ok", "routes.put ok", "tokens.create ok", "clusters.put ok", "teams.put ok"}; !slices.Equal(actions, want) {
		t.Errorf("orders' audit log %v, want %v", actions, want)
	}
}

// TestTeamCannotTouchAnotherTeam: a team admin gets PermissionDenied for
// another team's objects, reads included, and for platform objects; each
// refusal is audited and changes nothing.
func TestTeamCannotTouchAnotherTeam(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setUp(t)
	ctx := context.Background()
	orders := f.client(f.teamToken(t, "orders"))
	before, _ := f.store.Latest(ctx)

	for name, call := range map[string]func() error{
		"put search's route": func() error {
			_, err := orders.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: "search", Route: route("x", "/v1/search/x", "search")}))
			return err
		},
		"read search's cluster": func() error {
			_, err := orders.GetCluster(ctx, connect.NewRequest(&adminv1.GetClusterRequest{Team: "search", Id: "search"}))
			return err
		},
		"list search's routes": func() error {
			_, err := orders.ListRoutes(ctx, connect.NewRequest(&adminv1.ListRoutesRequest{Team: "search"}))
			return err
		},
		"apply search's config": func() error {
			_, err := orders.ApplyTeam(ctx, connect.NewRequest(&adminv1.ApplyTeamRequest{Config: &adminv1.TeamConfig{Team: "search"}}))
			return err
		},
		"put a team": func() error {
			_, err := orders.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Team: &adminv1.Team{Name: "orders",
				Owns: []*adminv1.Ownership{{Host: "api.example.com", PathPrefix: "/"}}}}))
			return err
		},
		"roll back": func() error {
			_, err := orders.Rollback(ctx, connect.NewRequest(&adminv1.RollbackRequest{To: 1}))
			return err
		},
		"create a token": func() error {
			_, err := orders.CreateToken(ctx, connect.NewRequest(&adminv1.CreateTokenRequest{Role: adminv1.Role_ROLE_PLATFORM_ADMIN}))
			return err
		},
		"read search's audit log": func() error {
			_, err := orders.ListAudit(ctx, connect.NewRequest(&adminv1.ListAuditRequest{Team: "search"}))
			return err
		},
	} {
		if err := call(); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s: %v, want permission_denied", name, err)
		}
	}
	if after, _ := f.store.Latest(ctx); after.Number != before.Number {
		t.Errorf("version %d after refused writes, want %d", after.Number, before.Number)
	}
	denied, err := f.store.Audit(ctx, store.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range denied {
		if e.Outcome == "permission_denied" {
			n++
		}
	}
	if n < 6 {
		t.Errorf("%d permission_denied audit entries, want one per refused action", n)
	}
}

// TestUnauthenticated: no token, a token of another kind, an unknown and
// a revoked token are all Unauthenticated.
func TestUnauthenticated(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setUp(t)
	ctx := context.Background()
	tok := f.teamToken(t, "orders")
	resp, err := f.client(platformToken).ListTokens(ctx, connect.NewRequest(&adminv1.ListTokensRequest{Team: "orders"}))
	if err != nil || len(resp.Msg.GetTokens()) != 1 {
		t.Fatalf("ListTokens = %v, %v", resp, err)
	}
	if strings.Contains(resp.Msg.String(), tok) || strings.Contains(resp.Msg.String(), svcauth.Hash(tok)) {
		t.Error("ListTokens shows the token or its hash")
	}
	if _, err := f.client(platformToken).RevokeToken(ctx, connect.NewRequest(&adminv1.RevokeTokenRequest{Id: resp.Msg.GetTokens()[0].GetId()})); err != nil {
		t.Fatal(err)
	}
	for name, token := range map[string]string{"none": "", "an API key": "ak_live_abc", "unknown": "ptk_" + strings.Repeat("x", 43), "revoked": tok} {
		_, err := f.client(token).ListRoutes(ctx, connect.NewRequest(&adminv1.ListRoutesRequest{Team: "orders"}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s: %v, want unauthenticated", name, err)
		}
	}
}

// TestRefusedChangesListEveryProblem: a write that does not compile is
// InvalidArgument with every problem as a field violation, and creates no
// version.
func TestRefusedChangesListEveryProblem(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setUp(t)
	ctx := context.Background()
	orders := f.client(f.teamToken(t, "orders"))
	before, _ := f.store.Latest(ctx)
	_, err := orders.ApplyTeam(ctx, connect.NewRequest(&adminv1.ApplyTeamRequest{Config: &adminv1.TeamConfig{
		Team:     "orders",
		Clusters: []*configv1.Cluster{cluster("orders")},
		Routes: []*configv1.Route{
			route("orders.stray", "/v1/search/mine", "orders"),
			route("orders.theirs", "/v1/orders/x", "search"),
		},
	}}))
	got := violations(err)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || len(got) != 2 ||
		!strings.HasPrefix(got[0], "team orders: routes[orders.stray]: ") || !strings.HasPrefix(got[1], "team orders: routes[orders.theirs].cluster: ") {
		t.Errorf("ApplyTeam: %v\nviolations %q", err, got)
	}
	// A request that breaks the API's own rules.
	_, err = orders.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: "Orders!"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || len(violations(err)) != 2 {
		t.Errorf("bad request: %v, violations %q", err, violations(err))
	}
	if after, _ := f.store.Latest(ctx); after.Number != before.Number {
		t.Errorf("version %d after refused changes, want %d", after.Number, before.Number)
	}
}

// TestApplyDryRunAndVersions: a dry run answers the diff without a
// version; versions list newest first, diff, and roll back to an equal
// new version with the same snapshot.
func TestApplyDryRunAndVersions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setUp(t)
	ctx := context.Background()
	orders := f.client(f.teamToken(t, "orders"))
	cfg := &adminv1.TeamConfig{Team: "orders", Clusters: []*configv1.Cluster{cluster("orders")},
		Routes: []*configv1.Route{route("orders.a", "/v1/orders/a", "orders"), route("orders.b", "/v1/orders/b", "orders")}}
	dry, err := orders.ApplyTeam(ctx, connect.NewRequest(&adminv1.ApplyTeamRequest{Config: cfg, DryRun: true}))
	if err != nil || dry.Msg.GetChange().GetChanged() || dry.Msg.GetChange().GetDiff() != "+ orders route orders.a\n+ orders route orders.b" {
		t.Fatalf("dry run = %v, %v", dry, err)
	}
	if v, _ := f.store.Latest(ctx); v.Number != 4 {
		t.Fatalf("a dry run made version %d", v.Number)
	}
	applied, err := orders.ApplyTeam(ctx, connect.NewRequest(&adminv1.ApplyTeamRequest{Config: cfg, Message: "two routes"}))
	if err != nil || applied.Msg.GetChange().GetVersion().GetNumber() != 5 {
		t.Fatalf("apply = %v, %v", applied, err)
	}
	cfg.Routes = cfg.Routes[:1]
	if _, err := orders.ApplyTeam(ctx, connect.NewRequest(&adminv1.ApplyTeamRequest{Config: cfg, Message: "one route"})); err != nil {
		t.Fatal(err)
	}
	p := f.client(platformToken)
	vs, err := p.ListVersions(ctx, connect.NewRequest(&adminv1.ListVersionsRequest{Limit: 3}))
	if err != nil || len(vs.Msg.GetVersions()) != 3 || vs.Msg.GetVersions()[0].GetNumber() != 6 || vs.Msg.GetVersions()[0].GetMessage() != "one route" {
		t.Fatalf("ListVersions = %v, %v", vs, err)
	}
	diff, err := p.DiffVersions(ctx, connect.NewRequest(&adminv1.DiffVersionsRequest{From: 4, To: 6}))
	if err != nil || diff.Msg.GetDiff() != "+ orders route orders.a" {
		t.Errorf("DiffVersions(4, 6) = %q, %v", diff.Msg.GetDiff(), err)
	}
	back, err := p.Rollback(ctx, connect.NewRequest(&adminv1.RollbackRequest{To: 5, Message: "b was fine"}))
	if err != nil {
		t.Fatal(err)
	}
	five, _ := p.GetVersion(ctx, connect.NewRequest(&adminv1.GetVersionRequest{Number: 5}))
	v := back.Msg.GetChange().GetVersion()
	if v.GetNumber() != 7 || v.GetRollbackOf() != 5 || v.GetSha256() != five.Msg.GetVersion().GetSha256() || back.Msg.GetChange().GetDiff() != "+ orders route orders.b" {
		t.Errorf("rollback = %v, want version 7 equal to 5", back.Msg.GetChange())
	}
	if _, err := p.GetVersion(ctx, connect.NewRequest(&adminv1.GetVersionRequest{Number: 99})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetVersion(99): %v, want not_found", err)
	}
	// The commit hook saw every version, in order.
	var seen []int64
	for len(f.commits) > 0 {
		seen = append(seen, <-f.commits)
	}
	if !slices.Equal(seen, []int64{1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("the versions published were %v", seen)
	}
}

// TestTwoTeamsWriteAtOnce: concurrent writes of two teams all land, as
// consecutive versions.
func TestTwoTeamsWriteAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setUp(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for _, team := range []string{"orders", "search"} {
		c := f.client(f.teamToken(t, team))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				_, err := c.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: team,
					Route: route(fmt.Sprintf("%s.r%d", team, i), fmt.Sprintf("/v1/%s/r%d", team, i), team)}))
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	last, err := f.store.Latest(ctx)
	if err != nil || last.Number != 4+16 {
		t.Fatalf("newest version %d, %v; want 20", last.Number, err)
	}
	b, _ := f.store.Blob(ctx, last.ConfigSHA256)
	var cfg adminv1.Config
	if err := proto.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tc := range cfg.GetTeamConfigs() {
		n += len(tc.GetRoutes())
	}
	if n != 16 {
		t.Errorf("%d routes in the newest config, want 16", n)
	}
}

// TestPlainJSON: the admin API answers plain HTTP/JSON, as curl or a
// portal would call it: a POST of JSON, and a GET of the read-only calls.
func TestPlainJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.setUp(t)
	do := func(method, path, body string) (int, string) {
		resp, b := gatewaytest.Do(t, http.DefaultClient, method, f.url+path, body, map[string]string{"Authorization": "Bearer " + platformToken})
		return resp.StatusCode, string(b)
	}
	code, body := do("POST", "/portico.admin.v1.AdminService/PutRoute",
		`{"team":"orders","route":{"id":"orders.list","hosts":["api.example.com"],"path":"/v1/orders","cluster":"orders","auth":{"public":true,"reviewer":"security"}}}`)
	if code != 200 || !strings.Contains(body, `"diff":"+ orders route orders.list"`) {
		t.Errorf("POST PutRoute = %d %s", code, body)
	}
	code, body = do("GET", "/portico.admin.v1.AdminService/ListVersions?connect=v1&encoding=json&message="+url.QueryEscape(`{"limit":1}`), "")
	if code != 200 || !strings.Contains(body, `"number":"5"`) {
		t.Errorf("GET ListVersions = %d %s", code, body)
	}
	code, body = do("POST", "/portico.admin.v1.AdminService/PutRoute", `{"team":"orders","route":{"id":"x","path":"/elsewhere","cluster":"orders"}}`)
	if code != 400 || !strings.Contains(body, `"code":"invalid_argument"`) {
		t.Errorf("POST a refused route = %d %s", code, body)
	}
}

// TestDeleteTeamRevokesItsTokens: a deleted team's tokens stop working,
// so a team created again under the name does not inherit them.
func TestDeleteTeamRevokesItsTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	p := f.client(platformToken)
	if _, err := p.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Team: &adminv1.Team{Name: "payments",
		Owns: []*adminv1.Ownership{{PathPrefix: "/v1/payments"}}}})); err != nil {
		t.Fatal(err)
	}
	tok := f.teamToken(t, "payments")
	if _, err := p.DeleteTeam(ctx, connect.NewRequest(&adminv1.DeleteTeamRequest{Name: "payments"})); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client(tok).ListRoutes(ctx, connect.NewRequest(&adminv1.ListRoutesRequest{Team: "payments"})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("the deleted team's token: %v, want unauthenticated", err)
	}
}

// TestBootstrap: control planes starting at once with one token both
// start; a revoked bootstrap token is refused, another one works.
func TestBootstrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- admin.Bootstrap(ctx, st, platformToken) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Bootstrap: %v", err)
		}
	}
	tok, err := st.TokenByHash(ctx, svcauth.Hash(platformToken))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RevokeToken(ctx, tok.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := admin.Bootstrap(ctx, st, platformToken); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("Bootstrap with a revoked token: %v, want an error saying so", err)
	}
	if err := admin.Bootstrap(ctx, st, platformToken+"-next"); err != nil {
		t.Errorf("Bootstrap with a new token after a revoked one: %v", err)
	}
	if err := admin.Bootstrap(ctx, st, "ptk_short"); err == nil {
		t.Error("Bootstrap accepted a short token")
	}
}
