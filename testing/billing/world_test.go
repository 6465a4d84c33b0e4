package billing_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control"
	"github.com/portico-gw/portico/control/distribution"
	cstore "github.com/portico-gw/portico/control/store"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/internal/lanepub"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/quota"
	"github.com/portico-gw/portico/quota/reconcile"
	"github.com/portico-gw/portico/quota/store"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/pgtest"
)

const (
	platformToken  = "ptk_billing-test-platform-token-0123456789abcdef"
	publisherToken = "billing-test-publisher-token-0123456789abcdef"
	quotaToken     = "billing-test-quota-token-0123456789abcdef"
	host           = "api.example.com"
	topic          = "portico.usage"
)

// clock is the test's time: real time plus a shift, so that a month's
// end falls inside the test. Every party runs on it (the control plane,
// the nodes, the quota service); one node adds a skew of its own.
type clock struct{ shift time.Duration }

func (c clock) now() time.Time { return time.Now().Add(c.shift) }

// clockBefore returns the clock on which the first month's end after
// lead from now is lead away.
func clockBefore(lead time.Duration) (clock, time.Time) {
	at := time.Now().Add(lead)
	end := time.Date(at.Year(), at.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	return clock{shift: end.Sub(at)}, end
}

// controlPlane is a control plane on an h2c test server.
type controlPlane struct {
	*control.Plane
	url   string
	admin adminv1connect.AdminServiceClient
}

func startControl(t *testing.T, c clock) *controlPlane {
	t.Helper()
	st, err := cstore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	p, err := control.New(context.Background(), control.Options{Store: st, BootstrapToken: platformToken, NodeToken: nodeToken,
		PublisherToken: publisherToken, Logger: gatewaytest.Logger(), Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	srv := httptest.NewUnstartedServer(p.Handler)
	gatewaytest.StartH2C(t, srv)
	return &controlPlane{Plane: p, url: srv.URL, admin: admintest.Client(srv.URL, platformToken)}
}

// The catalogue: two products, each of two routes' (one answering 200,
// one whose backend answers 500), and two plans of both, one of them
// hard-capped at capLimit billable calls per product and period.
const (
	planGold   = "gold"
	planCapped = "capped"
	capLimit   = 25
)

// route is a route the clients call and what they expect of it.
type route struct {
	id, path, product, scope string
	failing                  bool // the backend answers 500
}

var routes = []route{
	{id: "a.get", path: "/v1/a/x", product: "pa", scope: "a:read"},
	{id: "a.fail", path: "/v1/af/x", product: "pa", scope: "a:read", failing: true},
	{id: "b.get", path: "/v1/b/x", product: "pb", scope: "b:read"},
	{id: "b.fail", path: "/v1/bf/x", product: "pb", scope: "b:read", failing: true},
}

// apiKey is a caller: its key and what it may do.
type apiKey struct {
	id, app, tenant, plan string
	scopes                []string
	secret                string
	record                *configv1.KeyRecord
}

func (k *apiKey) has(scope string) bool {
	for _, s := range k.scopes {
		if s == scope {
			return true
		}
	}
	return false
}

func newKeys(t *testing.T) []*apiKey {
	keys := []*apiKey{
		{id: "k1", app: "app-1", tenant: "t1", plan: planGold, scopes: []string{"a:read", "b:read"}},
		// k2 may not call product pb's routes: the gateway refuses them
		// (403), which is counted and not billable.
		{id: "k2", app: "app-2", tenant: "t1", plan: planGold, scopes: []string{"a:read"}},
		{id: "k3", app: "app-3", tenant: "t2", plan: planGold, scopes: []string{"a:read", "b:read"}},
		{id: "k4", app: "app-4", tenant: "t2", plan: planCapped, scopes: []string{"a:read", "b:read"}},
	}
	for _, k := range keys {
		k.secret, k.record = gatewaytest.NewKey(t, k.id, k.app, k.tenant, k.plan, k.scopes...)
	}
	return keys
}

func caps(plan, _ string) (uint64, bool) {
	if plan == planCapped {
		return capLimit, true
	}
	return 0, false
}

// configure puts the catalogue, the routes and the backends on the
// control plane and the keys on its fast lane; it returns the snapshot
// version and the fast-lane version the nodes must reach.
func configure(t *testing.T, cp *controlPlane, keys []*apiKey) (version int64, lane uint64) {
	t.Helper()
	ctx := context.Background()
	ok := backend(t, http.StatusOK, "ok")
	failing := backend(t, http.StatusInternalServerError, "upstream failed")
	if _, err := cp.admin.PutPlatform(ctx, connect.NewRequest(&adminv1.PutPlatformRequest{Platform: &adminv1.Platform{
		Products:     []*configv1.Product{{Name: "pa"}, {Name: "pb"}},
		Plans:        []*configv1.Plan{{Name: planGold, Products: []string{"pa", "pb"}}, {Name: planCapped, Products: []string{"pa", "pb"}}},
		Scopes:       []*configv1.Scope{{Name: "a:read"}, {Name: "b:read"}},
		RateLimiting: &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Disabled: true}},
	}})); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.admin.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Team: &adminv1.Team{
		Name: "shop", Owns: []*adminv1.Ownership{{Host: host, PathPrefix: "/v1"}},
		Upstreams: []*adminv1.Upstream{{Address: &adminv1.Upstream_Cidr{Cidr: "127.0.0.1/32"}}}}})); err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"ok": ok, "failing": failing} {
		if _, err := cp.admin.PutCluster(ctx, connect.NewRequest(&adminv1.PutClusterRequest{Team: "shop", Cluster: &configv1.Cluster{
			Name: name, Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: addr}}}})); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range routes {
		cluster := "ok"
		if r.failing {
			cluster = "failing"
		}
		prefix := strings.TrimSuffix(r.path, "x")
		ch, err := cp.admin.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: "shop", Route: &configv1.Route{
			Id: r.id, Hosts: []string{host}, Path: prefix + "*", Cluster: cluster,
			Auth: &configv1.RouteAuth{Product: r.product, Scopes: []string{r.scope}}}}))
		if err != nil {
			t.Fatalf("PutRoute %s: %v", r.id, err)
		}
		version = ch.Msg.GetChange().GetVersion().GetNumber()
	}
	out := &keyOutbox{}
	for _, k := range keys {
		out.entries = append(out.entries, &configv1.FastLaneEntry{Rev: uint64(len(out.entries) + 1),
			Entry: &configv1.FastLaneEntry_Key{Key: k.record}})
	}
	pub := lanepub.New(out, lanepub.Options{Name: "keys", URL: cp.url, Token: publisherToken,
		HTTPClient: gatewaytest.H2CClient(t), Logger: gatewaytest.Logger()})
	lane, err := pub.Sync(ctx)
	if err != nil {
		t.Fatalf("publishing the keys: %v", err)
	}
	return version, lane
}

// backend answers every call with status and body.
func backend(t *testing.T, status int, body string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// keyOutbox is a fixed list of key entries as a fast-lane source.
type keyOutbox struct{ entries []*configv1.FastLaneEntry }

func (o *keyOutbox) Changes(_ context.Context, after uint64, limit int) ([]*configv1.FastLaneEntry, error) {
	if after >= uint64(len(o.entries)) {
		return nil, nil
	}
	return o.entries[after:min(uint64(len(o.entries)), after+uint64(limit))], nil
}
func (o *keyOutbox) Seq(context.Context) (uint64, error)           { return uint64(len(o.entries)), nil }
func (o *keyOutbox) Advance(context.Context, uint64) (bool, error) { return false, nil }

// waitNodes waits until the nodes ids are connected (since since, on the
// control plane's clock), run version, hold the keys (lane) and count
// usage.
func waitNodes(t *testing.T, cp *controlPlane, version int64, lane uint64, since time.Time, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := cp.Distribution.Wait(ctx, func(s distribution.Status) bool {
		by := map[string]distribution.NodeStatus{}
		for _, n := range s.Nodes {
			by[n.ID] = n
		}
		for _, id := range ids {
			n, ok := by[id]
			if !ok || n.ConnectedAt.Before(since) || n.Version != version || n.LaneVersion < lane || n.Usage == nil {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("waiting for nodes %v on version %d, lane %d: %v; fleet %+v", ids, version, lane, err, cp.Distribution.Status())
	}
}

// pgDSN is the quota store's DSN: PostgreSQL, the production store.
func pgDSN(t *testing.T) string {
	t.Helper()
	return pgtest.Start(t).NewDatabase(t)
}

// quotaService is one run of the quota service: Open, Run until stop.
type quotaService struct {
	*quota.Service
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func startQuota(t *testing.T, opts quota.Options) *quotaService {
	t.Helper()
	opts.TokenHashes = []string{svcauth.Hash(quotaToken)}
	opts.NoReconcileLoop = true // the test runs the reconciler itself
	if opts.Logger == nil {
		opts.Logger = gatewaytest.Logger()
	}
	s, err := quota.Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("quota.Open: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	q := &quotaService{Service: s, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(q.done)
		s.Run(ctx)
	}()
	t.Cleanup(q.stop)
	return q
}

// stop stops Run and closes the service (it leaves the consumer group).
func (q *quotaService) stop() {
	q.once.Do(func() {
		q.cancel()
		<-q.done
		_ = q.Close()
	})
}

// tally is what was counted of one caller and product.
type tally struct {
	Counted, Billable uint64
	ByClass           [6]uint64
}

func (a *tally) add(b tally) {
	a.Counted += b.Counted
	a.Billable += b.Billable
	for i := range a.ByClass {
		a.ByClass[i] += b.ByClass[i]
	}
}

// tk is a tally's key: an API key id and a product.
type tk struct{ key, product string }

// clients call the nodes and count exactly what they saw: every answer
// received is counted; the forwarded ones (the backend's 200 and 500)
// are billable, the gateway's refusals (403) are not.
type clients struct {
	t    *testing.T
	keys []*apiKey
	http *http.Client

	mu     sync.Mutex
	byNode map[string]map[tk]*tally
	errs   int
}

func newClients(t *testing.T, keys []*apiKey) *clients {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return &clients{t: t, keys: keys, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}, byNode: map[string]map[tk]*tally{}}
}

// call calls r on the node at base as k and counts the answer.
func (c *clients) call(nodeID, base string, k *apiKey, r route) {
	req, err := http.NewRequest("GET", base+r.path, nil)
	if err != nil {
		c.t.Error(err)
		return
	}
	req.Host = host
	req.Header.Set("X-Api-Key", k.secret)
	resp, err := c.http.Do(req)
	if err != nil {
		// No answer: the test cannot tell whether the node counted it.
		c.fail("node %s: %s as %s: %v", nodeID, r.path, k.id, err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	want, wantBody := http.StatusOK, "ok"
	switch {
	case !k.has(r.scope):
		want, wantBody = http.StatusForbidden, ""
	case r.failing:
		want, wantBody = http.StatusInternalServerError, "upstream failed"
	}
	forwarded := resp.StatusCode == want && want != http.StatusForbidden && string(body) == wantBody
	if resp.StatusCode != want || (wantBody != "" && string(body) != wantBody) {
		c.fail("node %s: %s as %s = %d %q, want %d %q", nodeID, r.path, k.id, resp.StatusCode, body, want, wantBody)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byNode[nodeID]
	if m == nil {
		m = map[tk]*tally{}
		c.byNode[nodeID] = m
	}
	n := m[tk{k.id, r.product}]
	if n == nil {
		n = &tally{}
		m[tk{k.id, r.product}] = n
	}
	n.Counted++
	n.ByClass[min(resp.StatusCode/100, 5)]++
	if forwarded {
		n.Billable++
	}
}

// failed is how many calls were not answered as expected.
func (c *clients) failed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errs
}

func (c *clients) fail(format string, args ...any) {
	c.mu.Lock()
	c.errs++
	n := c.errs
	c.mu.Unlock()
	if n <= 10 {
		c.t.Errorf(format, args...)
	}
}

// round calls every route as every key on the node once.
func (c *clients) round(nodeID, base string) {
	var wg sync.WaitGroup
	for _, k := range c.keys {
		wg.Go(func() {
			for _, r := range routes {
				c.call(nodeID, base, k, r)
			}
		})
	}
	wg.Wait()
}

// seen returns the tallies, of one node ("": of all).
func (c *clients) seen(nodeID string) map[tk]tally {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[tk]tally{}
	for id, m := range c.byNode {
		if nodeID != "" && id != nodeID {
			continue
		}
		for k, n := range m {
			s := out[k]
			s.add(*n)
			out[k] = s
		}
	}
	return out
}

func sumOf(m map[tk]tally) (s tally) {
	for _, n := range m {
		s.add(n)
	}
	return s
}

// traffic runs rounds on every node that is up, until stopped. A node is
// taken out (pause) between its rounds, so that none of its calls is in
// flight, and put back (resume) with its address, which a restarted
// node changes.
type traffic struct {
	c     *clients
	nodes map[string]*target
	stopc chan struct{}
	done  chan struct{}
	once  sync.Once
}

type target struct {
	mu     sync.Mutex // held for a round
	base   string     // "" while paused
	rounds int
}

func startTraffic(t *testing.T, c *clients, nodes ...node) *traffic {
	tr := &traffic{c: c, nodes: map[string]*target{}, stopc: make(chan struct{}), done: make(chan struct{})}
	for _, n := range nodes {
		tr.nodes[n.id()] = &target{base: n.url()}
	}
	go func() {
		defer close(tr.done)
		// Paced, not flat out: the windows stay small under -race and on
		// two cores, and every window still sees calls.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tr.stopc:
				return
			case <-tick.C:
			}
			var wg sync.WaitGroup
			for id, tg := range tr.nodes {
				wg.Go(func() {
					tg.mu.Lock()
					defer tg.mu.Unlock()
					if tg.base != "" {
						c.round(id, tg.base)
						tg.rounds++
					}
				})
			}
			wg.Wait()
		}
	}()
	t.Cleanup(tr.stop)
	return tr
}

func (tr *traffic) pause(id string) {
	tg := tr.nodes[id]
	tg.mu.Lock()
	tg.base = ""
	tg.mu.Unlock()
}

func (tr *traffic) resume(id, base string) {
	tg := tr.nodes[id]
	tg.mu.Lock()
	tg.base = base
	tg.mu.Unlock()
}

// rounds is how many rounds node id has had.
func (tr *traffic) rounds(id string) int {
	tg := tr.nodes[id]
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.rounds
}

func (tr *traffic) stop() {
	tr.once.Do(func() {
		close(tr.stopc)
		<-tr.done
	})
}

// eventually waits until ok, polling, or fails the test after within.
func eventually(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	eventuallyWhy(t, within, what, func() (bool, string) { return ok(), "" })
}

// eventuallyWhy is eventually with a word on what is still missing.
func eventuallyWhy(t *testing.T, within time.Duration, what string, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		done, why := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within %v: %s", what, within, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// totals reads the store's totals of period, by key id and product.
func totals(t *testing.T, st *store.Store, period string) map[tk]store.Total {
	t.Helper()
	out := map[tk]store.Total{}
	f := store.TotalsFilter{Period: period}
	for {
		page, more, err := st.Totals(context.Background(), f)
		if err != nil {
			t.Fatalf("Totals(%s): %v", period, err)
		}
		for _, tot := range page {
			id, ok := strings.CutPrefix(tot.Subject, "key:")
			if !ok {
				id = tot.Subject
			}
			out[tk{id, tot.Product}] = tot
			f.After = tot.Key
		}
		if !more {
			return out
		}
	}
}

// contiguous is how far each node spool's windows are all in the store.
func contiguous(t *testing.T, st *store.Store) map[string]store.Sequence {
	t.Helper()
	seqs, err := st.Sequences(context.Background(), 100)
	if err != nil {
		t.Fatalf("Sequences: %v", err)
	}
	out := map[string]store.Sequence{}
	for _, s := range seqs {
		out[s.NodeID+"/"+s.SpoolID] = s
	}
	return out
}

// newReconciler is the reconciler of the test, on a clock it sets.
func newReconciler(st *store.Store, relay reconcile.Relay, now func() time.Time) *reconcile.Reconciler {
	return reconcile.New(reconcile.Options{Store: st, Relay: relay, Caps: caps, Now: now, Grace: time.Second,
		Logger: gatewaytest.Logger()})
}

// lines returns a final period's billing lines by app and product.
func lines(t *testing.T, rec *reconcile.Reconciler, period string) map[[2]string]*quotav1.BillingLine {
	t.Helper()
	ls, err := rec.Lines(context.Background(), period)
	if err != nil {
		t.Fatalf("Lines(%s): %v", period, err)
	}
	out := map[[2]string]*quotav1.BillingLine{}
	for _, l := range ls {
		out[[2]string{l.GetAppId(), l.GetProduct()}] = l
	}
	return out
}

func periodOf(t time.Time) string { return t.UTC().Format("2006-01") }

func fmtTally(n tally) string {
	return fmt.Sprintf("%d counted (2xx %d, 4xx %d, 5xx %d), %d billable", n.Counted, n.ByClass[2], n.ByClass[4], n.ByClass[5], n.Billable)
}
