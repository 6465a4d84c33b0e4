package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/auth"
	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/routestats"
	"github.com/portico-gw/portico/gateway/snapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/logbuf"
)

// everyRoute selects every route of a snapshot.
var everyRoute = snapshot.RouteSelection{All: true}

// seenCall is what a test backend notes of one call.
type seenCall struct {
	path, client, tenant, scopes, synthetic string
	credential                              bool
}

// callLog is a backend that notes every call and answers with the status
// its answer function gives (200 if nil).
type callLog struct {
	answer func(r *http.Request) int
	mu     sync.Mutex
	calls  []seenCall
}

func (l *callLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.calls = append(l.calls, seenCall{path: r.URL.Path, client: r.Header.Get("X-Auth-Client-Id"), tenant: r.Header.Get("X-Auth-Tenant"),
		scopes: r.Header.Get("X-Auth-Scopes"), synthetic: strings.Join(r.Header.Values("X-Auth-Synthetic"), ","), credential: r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != ""})
	l.mu.Unlock()
	code := 200
	if l.answer != nil {
		code = l.answer(r)
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte("answer"))
}

func (l *callLog) seen() []seenCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]seenCall(nil), l.calls...)
}

// startBackend serves h on loopback until the test ends and returns its
// address.
func startBackend(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// probeCounts are the node's probe counters, by route id.
func probeCounts(n *gateway.Node) map[string]routestats.Counts {
	m := map[string]routestats.Counts{}
	n.ProbeStats(func(id string, c routestats.Counts) { m[id] = c })
	return m
}

// probe runs every route's probe on g, every 100 ms, until the test ends.
func probeAll(t *testing.T, g *gatewaytest.Gateway) {
	t.Helper()
	if err := g.Node.ProbeRoutes(g.Node.Current().SHA256, everyRoute, 100*time.Millisecond, time.Minute); err != nil {
		t.Fatalf("ProbeRoutes: %v", err)
	}
}

// waitProbes waits until every route in want has at least want[id] probes
// counted.
func waitProbes(t *testing.T, n *gateway.Node, want map[string]uint64) map[string]routestats.Counts {
	t.Helper()
	var got map[string]routestats.Counts
	what := fmt.Sprintf("probes %v", want)
	if len(want) > 4 {
		what = fmt.Sprintf("probes of %d routes", len(want))
	}
	gatewaytest.WaitFor(t, 20*time.Second, what, func() bool {
		got = probeCounts(n)
		for id, w := range want {
			if got[id].Requests < w {
				return false
			}
		}
		return true
	})
	return got
}

// TestProbes: a route's probe goes through the node's own chain as the
// platform's synthetic caller, with the scopes the route requires and no
// credential, takes no rate limit, and is never counted as one of the
// route's calls; it passes when its answer's class is the one it expects
// (unset: anything but 5xx), and fails on a 5xx of the gateway's own
// (no backend) or no answer within the route's timeout.
func TestProbes(t *testing.T) {
	t.Parallel()
	web := &callLog{answer: func(r *http.Request) int {
		if strings.HasPrefix(r.URL.Path, "/v1/missing/") || strings.HasPrefix(r.URL.Path, "/v1/strict/") {
			return http.StatusNotFound
		}
		return http.StatusOK
	}}
	slow := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("web", startBackend(t, web)), cluster("dead", deadAddr(t)), cluster("slow", slow)},
		Scopes:   []*configv1.Scope{{Name: "orders:read"}},
		Routes: []*configv1.Route{
			// Keyed, with a limit that would refuse the second call of
			// any caller, and a probe that expects 2xx.
			{Id: "orders", Team: "t", Path: "/v1/orders/{id}", Cluster: "web", Auth: &configv1.RouteAuth{Scopes: []string{"orders:read"}},
				RateLimits: []*configv1.RateLimit{{Name: "tight", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_CALLER, Rate: 0.001, Burst: 1}},
				Probe:      &configv1.RouteProbe{Expect: configv1.StatusClass_STATUS_CLASS_2XX}},
			route("missing", "/v1/missing/{id}", "web"),
			{Id: "strict", Team: "t", Path: "/v1/strict/{id}", Cluster: "web", Auth: public,
				Probe: &configv1.RouteProbe{Expect: configv1.StatusClass_STATUS_CLASS_2XX}},
			route("dead", "/v1/dead", "dead"),
			{Id: "slow", Team: "t", Path: "/v1/slow", Cluster: "slow", Auth: public, Timeout: durationpb.New(200 * time.Millisecond)},
		},
	}
	g := gatewaytest.Start(t, cfg, nil)
	probeAll(t, g)
	got := waitProbes(t, g.Node, map[string]uint64{"orders": 3, "missing": 3, "strict": 3, "dead": 3, "slow": 2})

	for id, wantFailed := range map[string]bool{"orders": false, "missing": false, "strict": true, "dead": true, "slow": true} {
		c := got[id]
		var latencies uint64
		for _, n := range c.Buckets {
			latencies += n
		}
		if failed := c.Errors == c.Requests; wantFailed && !failed || !wantFailed && c.Errors != 0 || latencies != c.Requests {
			t.Errorf("route %s: %d probes, %d failed, %d latencies; want all failed %v, none %v", id, c.Requests, c.Errors, latencies, wantFailed, !wantFailed)
		}
	}
	for _, c := range web.seen() {
		want := seenCall{path: c.path, client: "portico-synthetic", tenant: "platform", synthetic: "true"}
		if strings.HasPrefix(c.path, "/v1/orders/") {
			want.scopes = "orders:read"
		}
		if c != want {
			t.Errorf("the backend saw %+v, want %+v", c, want)
		}
	}
	g.Node.RouteStats(func(id string, c routestats.Counts) {
		if c.Requests != 0 || c.Refused != 0 {
			t.Errorf("route %s counted %d calls and %d refused: probes counted as real calls", id, c.Requests, c.Refused)
		}
	})
}

// probeOrders is an orders service whose GetOrder answers with the code
// of its mode (OK when zero).
type probeOrders struct {
	connectOrders
	mu   sync.Mutex
	code connect.Code
}

func (o *probeOrders) set(c connect.Code) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.code = c
}

func (o *probeOrders) GetOrder(ctx context.Context, r *connect.Request[demov1.GetOrderRequest]) (*connect.Response[demov1.GetOrderResponse], error) {
	o.mu.Lock()
	code := o.code
	o.mu.Unlock()
	if code != 0 {
		return nil, connect.NewError(code, errors.New("as the test says"))
	}
	return o.connectOrders.GetOrder(ctx, r)
}

// TestProbeGRPC: a service method's probe is a gRPC call of an empty
// message, judged on its grpc-status: OK and NOT_FOUND pass, UNAVAILABLE
// fails.
func TestProbeGRPC(t *testing.T) {
	t.Parallel()
	orders := &probeOrders{}
	cfg := rpcSnapshot(t, connectBackend(t, orders))
	cfg.Services[0].DisableValidation = true // the empty message would not pass
	cfg.Services[0].Methods = []string{"GetOrder"}
	g := gatewaytest.Start(t, cfg, nil)
	if err := g.Node.ProbeRoutes("", snapshot.RouteSelection{IDs: []string{"orders.GetOrder"}}, 100*time.Millisecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	counts := waitProbes(t, g.Node, map[string]uint64{"orders.GetOrder": 2})
	for _, step := range []struct {
		code   connect.Code
		failed bool
	}{{connect.CodeNotFound, false}, {connect.CodeUnavailable, true}} {
		orders.set(step.code)
		// The probes from now on: two more than counted, the first of
		// which may have been answered before the change.
		before := counts["orders.GetOrder"]
		next := waitProbes(t, g.Node, map[string]uint64{"orders.GetOrder": before.Requests + 2})["orders.GetOrder"]
		if d := next.Sub(before); step.failed && d.Errors == 0 || !step.failed && d.Errors != 0 {
			t.Errorf("answering %v: %d of %d probes failed, want failed: %v", step.code, d.Errors, d.Requests, step.failed)
		}
		counts = map[string]routestats.Counts{"orders.GetOrder": next}
	}
	if c := counts["orders.GetOrder"]; c.Errors == 0 || c.Errors == c.Requests {
		t.Errorf("%d of %d probes failed in all: want the UNAVAILABLE ones alone", c.Errors, c.Requests)
	}
}

// TestNoRequestIsSynthetic: whatever a client sends, its request is a
// real call: authenticated (here refused, 401) and counted as the route's.
func TestNoRequestIsSynthetic(t *testing.T) {
	t.Parallel()
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("web", startBackend(t, &callLog{}))},
		Routes:   []*configv1.Route{{Id: "keyed", Team: "t", Path: "/v1/keyed", Cluster: "web"}},
	}
	g := gatewaytest.Start(t, cfg, nil)
	resp, body := gatewaytest.Do(t, gatewaytest.HTTP1Client(t), "GET", g.URL()+"/v1/keyed", "", map[string]string{
		"X-Auth-Client-Id": "portico-synthetic", "X-Auth-Tenant": "platform", "X_Auth_Client_Id": "portico-synthetic",
		"X-Portico-Synthetic": "1", "X-Synthetic": "true", "User-Agent": "portico-synthetic",
	})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a request claiming to be synthetic = %d %s, want 401", resp.StatusCode, body)
	}
	gatewaytest.WaitFor(t, 5*time.Second, "the refusal counted", func() bool {
		var refused uint64
		g.Node.RouteStats(func(id string, c routestats.Counts) { refused += c.Refused })
		return refused == 1
	})
	if m := probeCounts(g.Node); len(m) != 0 {
		t.Errorf("probe counters %v, want none", m)
	}
}

// TestProbeRoutesBounds: a set out of bounds is refused and changes
// nothing; an empty selection is always accepted.
func TestProbeRoutesBounds(t *testing.T) {
	t.Parallel()
	g := gatewaytest.Start(t, nil, nil)
	for _, tt := range []struct{ interval, duration time.Duration }{
		{50 * time.Millisecond, time.Minute}, {time.Second, 0}, {time.Second, 2 * time.Hour},
	} {
		if err := g.Node.ProbeRoutes("", everyRoute, tt.interval, tt.duration); err == nil {
			t.Errorf("ProbeRoutes(interval %v, duration %v) = nil, want an error", tt.interval, tt.duration)
		}
	}
	if err := g.Node.ProbeRoutes("", snapshot.RouteSelection{}, 0, 0); err != nil {
		t.Errorf("ProbeRoutes(no route) = %v, want nil", err)
	}
}

// TestProbesInFlightBounded: a node has at most MaxProbesInFlight probes
// out at once, and never two of one route, however many routes it
// probes and however slowly they answer.
func TestProbesInFlightBounded(t *testing.T) {
	t.Parallel()
	var (
		mu             sync.Mutex
		inFlight, most int
		perRoute       = map[string]int{}
		twice          []string
		release        = make(chan struct{})
		releaseOnce    sync.Once
	)
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if perRoute[r.URL.Path]++; perRoute[r.URL.Path] > 1 {
			twice = append(twice, r.URL.Path)
		}
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		mu.Lock()
		inFlight--
		perRoute[r.URL.Path]--
		mu.Unlock()
	})
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	cfg := &configv1.Snapshot{Clusters: []*configv1.Cluster{cluster("slow", startBackend(t, backend))}}
	for i := range 3 * gateway.MaxProbesInFlight {
		cfg.Routes = append(cfg.Routes, route(fmt.Sprintf("r%02d", i), fmt.Sprintf("/r%02d", i), "slow"))
	}
	g := gatewaytest.Start(t, cfg, nil)
	probeAll(t, g)
	inFlightIs := func(n int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return inFlight == n
		}
	}
	gatewaytest.WaitFor(t, 10*time.Second, "the first probes out", inFlightIs(gateway.MaxProbesInFlight))
	// Every probe answers now: the next ones go out, still within the
	// bound, until every route has had one.
	releaseOnce.Do(func() { close(release) })
	waitProbes(t, g.Node, func() map[string]uint64 {
		m := map[string]uint64{}
		for _, r := range cfg.Routes {
			m[r.Id] = 2
		}
		return m
	}())
	mu.Lock()
	defer mu.Unlock()
	if most > gateway.MaxProbesInFlight || len(twice) > 0 {
		t.Errorf("at most %d probes were in flight (want %d), routes probed twice at once: %v", most, gateway.MaxProbesInFlight, twice)
	}
}

// probeGoroutines counts the goroutines of the node's probes: a runner
// (created by ProbeRoutes) or a probe in it.
func probeGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			count := 0
			for _, g := range bytes.Split(buf[:n], []byte("\n\n")) {
				if bytes.Contains(g, []byte("gateway.(*Node).ProbeRoutes")) || bytes.Contains(g, []byte("gateway.(*Node).runProbes")) {
					count++
				}
			}
			return count
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestProbesStop: an empty selection stops the probes, and a node that
// stops stops them before it drains; a drain counts no probe among the
// requests it waits for. Probes wait for the snapshot they are of. Not
// parallel: it counts the goroutines of every node's probes.
func TestProbesStop(t *testing.T) {
	web := &callLog{}
	blocked := make(chan struct{}, 1) // a probe reached hold
	hold := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case blocked <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	})
	cfg := &configv1.Snapshot{
		Version:  "one",
		Clusters: []*configv1.Cluster{cluster("web", startBackend(t, web)), cluster("hold", startBackend(t, hold))},
		Routes:   []*configv1.Route{route("web", "/web", "web"), route("hold", "/hold", "hold")},
	}
	var logs logbuf.Buffer
	g := gatewaytest.Start(t, cfg, func(o *gateway.Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })

	// A set for a snapshot the node does not run yet waits for it.
	two := gatewaytest.WithoutAnonymousLimit(proto.CloneOf(cfg))
	two.Version = "two"
	sha, err := snapshot.Digest(two)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Node.ProbeRoutes(sha, snapshot.RouteSelection{IDs: []string{"web"}}, 100*time.Millisecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	gatewaytest.WaitFor(t, 10*time.Second, "the probes paused", func() bool { return strings.Contains(logs.String(), "probes paused") })
	if n := len(web.seen()); n != 0 {
		t.Fatalf("the backend saw %d probes of a snapshot the node does not run", n)
	}
	if err := g.Node.Apply(two); err != nil {
		t.Fatal(err)
	}
	waitProbes(t, g.Node, map[string]uint64{"web": 2})

	// An empty selection stops them: nothing of theirs runs once it returns.
	if err := g.Node.ProbeRoutes("", snapshot.RouteSelection{}, 0, 0); err != nil {
		t.Fatal(err)
	}
	gatewaytest.WaitFor(t, 5*time.Second, "no probe goroutine", func() bool { return probeGoroutines() == 0 })
	stopped := probeCounts(g.Node)["web"].Requests

	// A probe the backend holds, then the node stops.
	if err := g.Node.ProbeRoutes("", snapshot.RouteSelection{IDs: []string{"hold"}}, 100*time.Millisecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("no probe reached the holding backend within 10s")
	}
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	gatewaytest.WaitFor(t, 5*time.Second, "no probe goroutine once Run returned", func() bool { return probeGoroutines() == 0 })
	if got := probeCounts(g.Node)["web"].Requests; got != stopped {
		t.Errorf("web was probed %d times after its probes stopped", got-stopped)
	}
	// The probes stopped before the drain began, and it counted none.
	out := logs.String()
	drain := regexp.MustCompile(`msg=draining in_flight=0 `).FindStringIndex(out)
	if stop := strings.LastIndex(out, "msg=\"probing stopped\""); drain == nil || stop < 0 || stop > drain[0] ||
		!regexp.MustCompile(`msg=drained .*drained=0 cut=0`).MatchString(out) {
		t.Errorf("want the probes stopped, then a drain of no request:\n%s", out)
	}
	if err := g.Node.ProbeRoutes("", everyRoute, time.Second, time.Minute); err == nil {
		t.Error("ProbeRoutes on a stopped node = nil, want an error")
	}

	// A node that never ran stops its probes when it closes.
	n, err := gateway.New(gateway.Options{Logger: gatewaytest.Logger(), Listeners: []gateway.Listener{{Pool: "public", Listener: gatewaytest.Listen(t)}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Apply(gatewaytest.WithoutAnonymousLimit(cfg)); err != nil {
		t.Fatal(err)
	}
	if err := n.ProbeRoutes("", everyRoute, 100*time.Millisecond, time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("no probe reached the holding backend within 10s")
	}
	n.Close()
	gatewaytest.WaitFor(t, 5*time.Second, "no probe goroutine once Close returned", func() bool { return probeGoroutines() == 0 })
}

// TestProbesOnePerRoute: a route whose probe has not answered gets no
// other until it does, while the other routes' probes go on.
func TestProbesOnePerRoute(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		held int // probes of the held route that reached its backend
	)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hold := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		held++
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("hold", startBackend(t, hold)), cluster("web", startBackend(t, &callLog{}))},
		// Probed in this order on every tick: a's before b's.
		Routes: []*configv1.Route{route("a-held", "/held", "hold"), route("b-fast", "/fast", "web")},
	}
	g := gatewaytest.Start(t, cfg, nil)
	probeAll(t, g)
	// Four of b's probes answered: a's was out for three ticks or more.
	waitProbes(t, g.Node, map[string]uint64{"b-fast": 4})
	mu.Lock()
	defer mu.Unlock()
	if held != 1 {
		t.Errorf("the held route's backend saw %d probes, want 1 until it answers", held)
	}
}

// TestProbedRoutesCut: a set selects at most MaxProbedRoutes routes, the
// first by id; the node logs the cut.
func TestProbedRoutesCut(t *testing.T) {
	t.Parallel()
	cfg := &configv1.Snapshot{Clusters: []*configv1.Cluster{cluster("web", startBackend(t, &callLog{}))}}
	want := map[string]uint64{}
	for i := range gateway.MaxProbedRoutes + 1 {
		id := fmt.Sprintf("r%04d", i)
		cfg.Routes = append(cfg.Routes, route(id, "/"+id, "web"))
		if i < gateway.MaxProbedRoutes {
			want[id] = 2
		}
	}
	// In reverse: the routes are probed by id, not in the snapshot's order.
	slices.Reverse(cfg.Routes)
	var logs logbuf.Buffer
	g := gatewaytest.Start(t, cfg, func(o *gateway.Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	probeAll(t, g)
	// Every route within the bound probed twice: the route past it, had it
	// been kept, would have been probed in the first round.
	got := waitProbes(t, g.Node, want)
	last := fmt.Sprintf("r%04d", gateway.MaxProbedRoutes)
	if c, ok := got[last]; ok {
		t.Errorf("route %s, past the bound, was probed %d times", last, c.Requests)
	}
	if n := strings.Count(logs.String(), "probe set cut"); n != 1 {
		t.Errorf("the cut was logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestProbeOfAnotherSnapshot: a probe made from a snapshot the node no
// longer runs, whose request now matches another route, is refused
// before the synthetic caller is granted that route's scopes, never
// forwarded, and not counted.
func TestProbeOfAnotherSnapshot(t *testing.T) {
	t.Parallel()
	web := &callLog{}
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("web", startBackend(t, web))},
		Scopes:   []*configv1.Scope{{Name: "admin"}},
		Routes:   []*configv1.Route{route("a", "/v1/{id}", "web")},
	}
	g := gatewaytest.Start(t, cfg, nil)
	var old *snapshot.Route
	for i, r := range g.Node.Current().Routes {
		if r.ID == "a" {
			old = &g.Node.Current().Routes[i]
		}
	}
	if old == nil || old.Probe == nil || old.Probe.Target() != "/v1/probe" {
		t.Fatalf("route a = %+v, want a probe of /v1/probe", old)
	}
	// Route a moves; b, which requires a scope, takes its probe's path.
	next := gatewaytest.WithoutAnonymousLimit(proto.CloneOf(cfg))
	next.Routes = []*configv1.Route{route("a", "/v2/{id}", "web"),
		{Id: "b", Team: "t", Path: "/v1/probe", Cluster: "web", Auth: &configv1.RouteAuth{Scopes: []string{"admin"}}}}
	if err := g.Node.Apply(next); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		recs []exchange.Record
	)
	gateway.OnFinish(g.Node, func(x exchange.Record) {
		mu.Lock()
		defer mu.Unlock()
		recs = append(recs, x)
	})
	gateway.Probe(g.Node, old)
	if seen := web.seen(); len(seen) != 0 {
		t.Errorf("the backend saw %+v, want no call", seen)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(recs) != 1 || recs[0].Code != problem.NoRoute || recs[0].Forwarded || recs[0].Identity.Kind != auth.Anonymous || recs[0].Identity.Scopes != "" {
		t.Errorf("records %+v, want one refused with %s before auth", recs, problem.NoRoute)
	}
	if m := probeCounts(g.Node); len(m) != 0 {
		t.Errorf("probe counters %v, want none", m)
	}
}

// currentRoute is the route with id in the snapshot n runs.
func currentRoute(t *testing.T, n *gateway.Node, id string) *snapshot.Route {
	t.Helper()
	s := n.Current()
	for i := range s.Routes {
		if s.Routes[i].ID == id {
			return &s.Routes[i]
		}
	}
	t.Fatalf("no route %s", id)
	return nil
}

// TestProbeDeadlines: a probe whose deadline passes is judged on what it
// got by then. An answer that streams (here one that writes its status
// and a first event, then holds the body open) is judged on its status;
// a gRPC call with headers but no grpc-status yet is not counted; no
// answer at all fails the probe when the route's own timeout passed,
// and is not counted when only MaxProbeTimeout, below the route's, did.
func TestProbeDeadlines(t *testing.T) {
	t.Parallel()
	holding := func(status int, contentType string) string {
		return startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if status != 0 {
				w.Header().Set("Content-Type", contentType)
				w.WriteHeader(status)
				_, _ = w.Write([]byte("data: first\n\n"))
				w.(http.Flusher).Flush()
			}
			<-r.Context().Done()
		}))
	}
	short, long := durationpb.New(300*time.Millisecond), durationpb.New(30*time.Second)
	timed := func(id, cluster string, timeout *durationpb.Duration, probe *configv1.RouteProbe) *configv1.Route {
		r := route(id, "/"+id, cluster)
		r.Timeout, r.Probe = timeout, probe
		return r
	}
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{
			cluster("sse", holding(200, "text/event-stream")), cluster("sse503", holding(503, "text/event-stream")),
			cluster("grpc", holding(200, "application/grpc")), cluster("silent", holding(0, "")),
		},
		Routes: []*configv1.Route{
			timed("sse", "sse", short, nil),
			timed("sse503", "sse503", short, nil),
			timed("grpc", "grpc", short, &configv1.RouteProbe{Method: "POST", ContentType: "application/grpc", Body: []byte{0, 0, 0, 0, 0}}),
			timed("silent", "silent", short, nil),
			timed("stuck", "silent", long, nil),
		},
	}
	g := gatewaytest.Start(t, cfg, nil)
	for _, tt := range []struct {
		id              string
		counted, failed bool
	}{
		{"sse", true, false}, {"sse503", true, true}, {"grpc", false, false}, {"silent", true, true}, {"stuck", false, false},
	} {
		t.Run(tt.id, func(t *testing.T) {
			t.Parallel()
			gateway.Probe(g.Node, currentRoute(t, g.Node, tt.id))
			c, counted := probeCounts(g.Node)[tt.id]
			if counted != tt.counted || counted && (c.Requests != 1 || (c.Errors == 1) != tt.failed) {
				t.Errorf("probe of %s: counted %v (%d, %d failed), want counted %v, failed %v", tt.id, counted, c.Requests, c.Errors, tt.counted, tt.failed)
			}
		})
	}
}

// TestProbeRate: a node starts at most MaxProbesPerSecond probes a
// second over all its routes, however many it probes and however often,
// and the cap slows every route alike.
func TestProbeRate(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		perPath = map[string]int{}
		total   int
	)
	const want = 150 // 1.5 s of probes at the cap
	reached := make(chan time.Time, 1)
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		perPath[r.URL.Path]++
		if total++; total == want {
			reached <- time.Now()
		}
	})
	cfg := &configv1.Snapshot{Clusters: []*configv1.Cluster{cluster("web", startBackend(t, backend))}}
	const routes = 40 // 400 probes a second at the interval, uncapped
	for i := range routes {
		cfg.Routes = append(cfg.Routes, route(fmt.Sprintf("r%02d", i), fmt.Sprintf("/r%02d", i), "web"))
	}
	g := gatewaytest.Start(t, cfg, nil)
	start := time.Now()
	probeAll(t, g)
	var at time.Time
	select {
	case at = <-reached:
	case <-time.After(20 * time.Second):
		t.Fatalf("the backend saw fewer than %d probes in 20s", want)
	}
	// want probes, one every 1/MaxProbesPerSecond at most, take that long.
	if took, least := at.Sub(start), (want-1)*time.Second/gateway.MaxProbesPerSecond; took < least {
		t.Errorf("%d probes went out in %v, want %v at least (%d a second)", want, took, least, gateway.MaxProbesPerSecond)
	}
	mu.Lock()
	defer mu.Unlock()
	fewest, most := total, 0
	for i := range routes {
		n := perPath[fmt.Sprintf("/r%02d", i)]
		fewest, most = min(fewest, n), max(most, n)
	}
	if most-fewest > 1 {
		t.Errorf("routes were probed %d to %d times, want every route in turn", fewest, most)
	}
}
