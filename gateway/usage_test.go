package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/usage"
	"github.com/portico-gw/portico/gateway/usage/ship"
	"github.com/portico-gw/portico/gateway/usage/spool"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// usageRow is what a usage row counts, and its counts.
type usageRow struct {
	key, app, product, route string
	class                    uint32
}

type usageCounts struct{ counted, billable uint64 }

// spooledRows reads every window of the spool in the first slot of dir
// and sums their rows.
func spooledRows(t *testing.T, dir string) (map[usageRow]usageCounts, []*quotav1.UsageWindow) {
	t.Helper()
	sp, err := spool.Open(filepath.Join(dir, "0", "spool"), spool.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	rows := map[usageRow]usageCounts{}
	var ws []*quotav1.UsageWindow
	err = sp.Scan(1, func(seq uint64, payload []byte) error {
		w := &quotav1.UsageWindow{}
		if err := proto.Unmarshal(payload, w); err != nil {
			return err
		}
		ws = append(ws, w)
		for _, r := range w.GetRows() {
			k := usageRow{r.GetCaller().GetKeyId(), r.GetCaller().GetAppId(), r.GetProduct(), r.GetRouteId(), r.GetStatusClass()}
			c := rows[k]
			c.counted += r.GetCounted()
			c.billable += r.GetBillable()
			rows[k] = c
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows, ws
}

// usageConfig has a keyed route of a product, a public route with a
// probe, and two keys.
func usageConfig(t *testing.T) (*configv1.Snapshot, map[string]string) {
	t.Helper()
	keys := map[string]string{}
	cfg := &configv1.Snapshot{
		Clusters: []*configv1.Cluster{cluster("web", namedBackend(t, "web"))},
		Products: []*configv1.Product{{Name: "orders-api"}},
		Plans:    []*configv1.Plan{{Name: "pro", Products: []string{"orders-api"}}},
		Routes: []*configv1.Route{
			{Id: "orders", Team: "t", Path: "/orders/{rest=**}", Cluster: "web", Auth: &configv1.RouteAuth{Product: "orders-api"}},
			{Id: "open", Team: "t", Path: "/open/{rest=**}", Cluster: "web", Auth: public,
				Probe: &configv1.RouteProbe{Expect: configv1.StatusClass_STATUS_CLASS_2XX}},
		},
	}
	for _, name := range []string{"a", "b"} {
		key, rec := gatewaytest.NewKey(t, "key-"+name, "app-"+name, "tenant-1", "pro")
		keys[name] = key
		cfg.Keys = append(cfg.Keys, rec)
	}
	return cfg, keys
}

// TestUsageCountsRequests: requests through a node end, once it stops,
// as rows of the windows in its spool: per caller, product, route and
// status class, refusals counted but not billable, the node's own probes
// not at all.
func TestUsageCountsRequests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg, keys := usageConfig(t)
	g := gatewaytest.Start(t, cfg, func(o *gateway.Options) {
		o.Usage = &gateway.UsageOptions{Dir: dir, Window: time.Hour, NoSync: true}
	})
	c := gatewaytest.HTTP1Client(t)
	for _, call := range []struct {
		n      int
		path   string
		key    string
		status int
	}{
		{3, "/orders/1", keys["a"], 200},
		{2, "/orders/2", keys["b"], 200},
		{2, "/orders/3", "", 401},
		{1, "/nowhere", keys["a"], 404},
		{4, "/open/x", "", 200},
	} {
		for range call.n {
			h := map[string]string{}
			if call.key != "" {
				h["X-Api-Key"] = call.key
			}
			resp, _ := gatewaytest.Do(t, c, "GET", g.URL()+call.path, "", h)
			if resp.StatusCode != call.status {
				t.Fatalf("GET %s = %d, want %d", call.path, resp.StatusCode, call.status)
			}
		}
	}
	// Probes run through the same chain and finish, and are not counted.
	for range 3 {
		gateway.Probe(g.Node, currentRoute(t, g.Node, "open"))
	}
	if _, _, ok := g.Node.UsageStats(); !ok {
		t.Fatal("UsageStats: the node counts no usage")
	}
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}

	got, ws := spooledRows(t, dir)
	want := map[usageRow]usageCounts{
		{"key-a", "app-a", "orders-api", "orders", 2}: {3, 3},
		{"key-b", "app-b", "orders-api", "orders", 2}: {2, 2},
		{"", "", "orders-api", "orders", 4}:           {2, 0},
		{"", "", "", "", 4}:                           {1, 0},
		{"", "", "", "open", 2}:                       {4, 4},
	}
	if len(got) != len(want) {
		t.Errorf("spooled rows %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("row %+v counted %+v, want %+v", k, got[k], w)
		}
	}
	var counted uint64
	host, _ := os.Hostname()
	for _, w := range ws {
		counted += w.GetCounted()
		if w.GetNodeId() != host {
			t.Errorf("window %d of node %q, want the host name %q", w.GetSeq(), w.GetNodeId(), host)
		}
	}
	if counted != 12 {
		t.Errorf("windows count %d calls, want 12", counted)
	}
}

// memSender keeps the windows it is sent.
type memSender struct {
	mu sync.Mutex
	ws []*quotav1.UsageWindow
}

func (m *memSender) Send(ctx context.Context, msgs []ship.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, msg := range msgs {
		w := &quotav1.UsageWindow{}
		if err := proto.Unmarshal(msg.Value, w); err != nil {
			return err
		}
		m.ws = append(m.ws, w)
	}
	return nil
}

func (m *memSender) seqs() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s []uint64
	for _, w := range m.ws {
		s = append(s, w.GetSeq())
	}
	return s
}

// TestUsageShipsAndTrims: a running node ships its windows through the
// Sender, reports its spool to the stream, trims at its own usage mark
// from the fast lane, and re-sends what the stream asks.
func TestUsageShipsAndTrims(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg, _ := usageConfig(t)
	sender := &memSender{}
	g := gatewaytest.Start(t, cfg, func(o *gateway.Options) {
		o.Usage = &gateway.UsageOptions{Dir: dir, Window: 20 * time.Millisecond, NoSync: true, Sender: sender}
		o.Control = nil
	})
	gatewaytest.WaitFor(t, 10*time.Second, "3 windows shipped", func() bool { return len(sender.seqs()) >= 3 })
	u := gateway.UsageOf(g.Node)
	sp := u.UsageSpool()
	id, _ := os.ReadFile(filepath.Join(dir, "0", "SPOOLID"))
	if sp.GetSpoolId() != strings.TrimSpace(string(id)) || sp.GetFirstSeq() != 1 || sp.GetLastSeq() < 3 {
		t.Errorf("UsageSpool() = %v, want spool %s from 1", sp, id)
	}
	host, _ := os.Hostname()
	mark := func(node string, seq uint64) *configv1.FastLaneEntry {
		return &configv1.FastLaneEntry{Rev: seq, Entry: &configv1.FastLaneEntry_UsageMark{
			UsageMark: &configv1.UsageMark{NodeId: node, SpoolId: sp.GetSpoolId(), Seq: seq}}}
	}
	if err := g.Node.FastLane().Apply([]*configv1.FastLaneEntry{mark("another-node", 3)}); err != nil {
		t.Fatal(err)
	}
	if err := g.Node.FastLane().Apply([]*configv1.FastLaneEntry{mark(host, 2)}); err != nil {
		t.Fatal(err)
	}
	gatewaytest.WaitFor(t, 10*time.Second, "the trim at 2", func() bool {
		_, st, _ := g.Node.UsageStats()
		return st.Trimmed == 2
	})
	if first := u.UsageSpool().GetFirstSeq(); first != 3 {
		t.Errorf("UsageSpool().FirstSeq = %d after the mark 2, want 3", first)
	}

	u.ResendUsage(&distributionv1.ResendUsage{SpoolId: "ffffffffffffffff", FromSeq: 3, ToSeq: 3}) // not ours
	u.ResendUsage(&distributionv1.ResendUsage{SpoolId: sp.GetSpoolId(), FromSeq: 1, ToSeq: 3})
	gatewaytest.WaitFor(t, 10*time.Second, "window 3 re-sent", func() bool {
		_, st, _ := g.Node.UsageStats()
		return st.Resent == 1
	})
	if s := sender.seqs(); len(slices.DeleteFunc(slices.Clone(s), func(q uint64) bool { return q != 3 })) != 2 {
		t.Errorf("shipped %v, want 3 twice", s)
	}
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	rec, st, _ := g.Node.UsageStats()
	if st.Failures != 0 || rec.Windows < 3 {
		t.Errorf("UsageStats() = %+v, %+v; want 3 windows or more, no failure", rec, st)
	}
}

// TestUsageDirUnusable: a node whose usage directory cannot be used (a
// file, or one whose every slot other nodes hold) is not made.
func TestUsageDirUnusable(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for range usage.MaxSlots {
		gatewaytest.Start(t, nil, func(o *gateway.Options) { o.Usage = &gateway.UsageOptions{Dir: dir, NoSync: true} })
	}
	for _, tt := range []struct{ name, dir string }{{"none", ""}, {"a file", file}, {"in use", dir}} {
		_, err := gateway.New(gateway.Options{
			Listeners: []gateway.Listener{{Listener: gatewaytest.Listen(t)}}, Logger: gatewaytest.Logger(),
			Usage: &gateway.UsageOptions{Dir: tt.dir, NoSync: true},
		})
		var uerr *gateway.UsageError
		if !errors.As(err, &uerr) || uerr.Dir != tt.dir {
			t.Errorf("%s: New = %v, want a *UsageError of %q", tt.name, err, tt.dir)
		}
		if tt.name == "in use" && !errors.Is(err, spool.ErrLocked) {
			t.Errorf("%s: New = %v, want spool.ErrLocked", tt.name, err)
		}
	}
}

// TestUsageOptionsChecked: a window that does not divide a day or is out
// of bounds, and a spool bound too small to hold a few windows, are
// refused with a *UsageError before anything is opened.
func TestUsageOptionsChecked(t *testing.T) {
	t.Parallel()
	for _, o := range []gateway.UsageOptions{
		{Window: -time.Second},
		{Window: time.Nanosecond},
		{Window: 7 * time.Second}, // does not divide a day
		{Window: 2 * time.Hour},
		{SpoolBytes: -1},
		{SpoolBytes: 1 << 20},
	} {
		dir := t.TempDir()
		o.Dir, o.NoSync = dir, true
		_, err := gateway.New(gateway.Options{
			Listeners: []gateway.Listener{{Listener: gatewaytest.Listen(t)}}, Logger: gatewaytest.Logger(),
			Usage: &o,
		})
		var uerr *gateway.UsageError
		if !errors.As(err, &uerr) {
			t.Errorf("New with window %s, spool bytes %d = %v, want a *UsageError", o.Window, o.SpoolBytes, err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("window %s, spool bytes %d: the refused options left %d files", o.Window, o.SpoolBytes, len(ents))
		}
	}
}

// TestUsageShipsLastWindow: a node that stops ships the window it closes
// as it stops, so that a node that never comes back takes no count with
// it.
func TestUsageShipsLastWindow(t *testing.T) {
	t.Parallel()
	cfg, _ := usageConfig(t)
	sender := &memSender{}
	g := gatewaytest.Start(t, cfg, func(o *gateway.Options) {
		o.Usage = &gateway.UsageOptions{Dir: t.TempDir(), Window: time.Hour, NoSync: true, Sender: sender}
	})
	c := gatewaytest.HTTP1Client(t)
	for range 3 {
		if resp, _ := gatewaytest.Do(t, c, "GET", g.URL()+"/open/x", "", nil); resp.StatusCode != 200 {
			t.Fatalf("GET = %d, want 200", resp.StatusCode)
		}
	}
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	sender.mu.Lock()
	defer sender.mu.Unlock()
	var counted uint64
	for _, w := range sender.ws {
		counted += w.GetCounted()
	}
	if counted != 3 {
		t.Errorf("the windows shipped count %d calls, want 3", counted)
	}
}

// shippedOf sums, per spool, the calls of the distinct windows (spool,
// seq, part) m was sent, and counts the windows sent more than once.
func (m *memSender) shippedOf() (counted map[string]uint64, dups int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	type id struct {
		spool     string
		seq, part uint64
	}
	seen := map[id]bool{}
	counted = map[string]uint64{}
	for _, w := range m.ws {
		k := id{w.GetSpoolId(), w.GetSeq(), uint64(w.GetPart())}
		if seen[k] {
			dups++
			continue
		}
		seen[k] = true
		counted[w.GetSpoolId()] += w.GetCounted()
	}
	return counted, dups
}

// TestUsageSlots: two nodes on one usage directory (the old and the new
// process of an upgrade in place) count into slots of their own, with
// spools of their own; once the first stops without shipping its last
// window, the second adopts its slot and ships it, and every call is in
// exactly one window.
func TestUsageSlots(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg, _ := usageConfig(t)
	sender := &memSender{}
	opts := func(flush time.Duration) func(o *gateway.Options) {
		return func(o *gateway.Options) {
			o.Usage = &gateway.UsageOptions{Dir: dir, NodeID: "node-s", Window: time.Hour, NoSync: true, Sender: sender,
				AdoptInterval: 10 * time.Millisecond, FlushTimeout: flush}
			o.Control = nil
		}
	}
	get := func(g *gatewaytest.Gateway, n int) {
		c := gatewaytest.HTTP1Client(t)
		for range n {
			if resp, _ := gatewaytest.Do(t, c, "GET", g.URL()+"/open/x", "", nil); resp.StatusCode != 200 {
				t.Fatalf("GET = %d, want 200", resp.StatusCode)
			}
		}
	}
	old := gatewaytest.Start(t, cfg, opts(-1)) // ships nothing as it stops
	get(old, 3)
	cur := gatewaytest.Start(t, cfg, opts(0))
	get(cur, 2)
	oldSpool, curSpool := gateway.UsageOf(old.Node).UsageSpool().GetSpoolId(), gateway.UsageOf(cur.Node).UsageSpool().GetSpoolId()
	if oldSpool == curSpool {
		t.Fatalf("both nodes count into spool %s", oldSpool)
	}
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}
	gatewaytest.WaitFor(t, 10*time.Second, "the old slot's window shipped", func() bool {
		c, _ := sender.shippedOf()
		return c[oldSpool] == 3
	})
	get(cur, 1)
	if err := cur.Stop(); err != nil {
		t.Fatal(err)
	}
	c, dups := sender.shippedOf()
	if c[oldSpool] != 3 || c[curSpool] != 3 || len(c) != 2 {
		t.Errorf("shipped counts per spool %v (%d windows twice), want 3 in %s and 3 in %s", c, dups, oldSpool, curSpool)
	}
	slots, err := usage.Slots(dir)
	if err != nil || len(slots) != 2 {
		t.Errorf("Slots() = %v, %v; want 2", slots, err)
	}
}

// TestUsageMarkKept: a node that restarts neither keeps nor ships again
// the windows its last usage mark covered.
func TestUsageMarkKept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg, _ := usageConfig(t)
	first := &memSender{}
	g := gatewaytest.Start(t, cfg, func(o *gateway.Options) {
		o.Usage = &gateway.UsageOptions{Dir: dir, NodeID: "node-m", Window: 20 * time.Millisecond, NoSync: true, Sender: first}
		o.Control = nil
	})
	gatewaytest.WaitFor(t, 10*time.Second, "3 windows shipped", func() bool { return len(first.seqs()) >= 3 })
	id := gateway.UsageOf(g.Node).UsageSpool().GetSpoolId()
	mark := &configv1.FastLaneEntry{Rev: 1, Entry: &configv1.FastLaneEntry_UsageMark{
		UsageMark: &configv1.UsageMark{NodeId: "node-m", SpoolId: id, Seq: 2}}}
	if err := g.Node.FastLane().Apply([]*configv1.FastLaneEntry{mark}); err != nil {
		t.Fatal(err)
	}
	gatewaytest.WaitFor(t, 10*time.Second, "the trim at 2", func() bool {
		_, st, _ := g.Node.UsageStats()
		return st.Trimmed == 2
	})
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}

	again := &memSender{}
	g = gatewaytest.Start(t, cfg, func(o *gateway.Options) {
		o.Usage = &gateway.UsageOptions{Dir: dir, NodeID: "node-m", Window: time.Hour, NoSync: true, Sender: again}
		o.Control = nil
	})
	if sp := gateway.UsageOf(g.Node).UsageSpool(); sp.GetSpoolId() != id || sp.GetFirstSeq() != 3 {
		t.Errorf("after the restart UsageSpool() = %v, want spool %s from 3", sp, id)
	}
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	if s := again.seqs(); len(s) == 0 || slices.Min(s) != 3 {
		t.Errorf("after the restart the node shipped seqs %v, want from 3", s)
	}
}

// TestUsageCountsCutRequests: a request still running when the drain
// deadline closes its connection finishes before the recorder seals its
// last window, so it is counted.
func TestUsageCountsCutRequests(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	cfg, _ := usageConfig(t)
	cfg.Clusters = append(cfg.Clusters, cluster("slow", strings.TrimPrefix(slow.URL, "http://")))
	cfg.Routes = append(cfg.Routes, &configv1.Route{Id: "slow", Team: "t", Path: "/slow/{rest=**}", Cluster: "slow", Auth: public})
	sender := &memSender{}
	g := gatewaytest.Start(t, cfg, func(o *gateway.Options) {
		o.DrainTimeout = 100 * time.Millisecond
		o.Usage = &gateway.UsageOptions{Dir: t.TempDir(), Window: time.Hour, NoSync: true, Sender: sender}
	})
	c := gatewaytest.HTTP1Client(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequest("GET", g.URL()+"/slow/x", nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow request did not reach its backend")
	}
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	<-done
	var counted uint64
	sender.mu.Lock()
	for _, w := range sender.ws {
		counted += w.GetCounted()
	}
	sender.mu.Unlock()
	if counted != 1 {
		t.Errorf("the windows shipped count %d calls, want the cut one", counted)
	}
}
