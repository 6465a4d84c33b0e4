package reconcile_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/quota/reconcile"
	"github.com/portico-gw/portico/quota/store"
	"github.com/portico-gw/portico/testing/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.RunMain(m)) }

// eachStore runs f on a new SQLite store and on a new PostgreSQL one.
func eachStore(t *testing.T, f func(t *testing.T, st *store.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		f(t, openStore(t, "sqlite:"+filepath.Join(t.TempDir(), "quota.db")))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		f(t, openStore(t, pgtest.Start(t).NewDatabase(t)))
	})
}

func sqliteStore(t *testing.T) *store.Store {
	return openStore(t, "sqlite:"+filepath.Join(t.TempDir(), "quota.db"))
}

func openStore(t *testing.T, dsn string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// Callers of the tests.
var (
	k1   = &quotav1.Caller{KeyId: "k1", AppId: "app1", Tenant: "acme", Plan: "gold"}
	k2   = &quotav1.Caller{KeyId: "k2", AppId: "app1", Tenant: "acme", Plan: "gold"}
	tok1 = &quotav1.Caller{AppId: "app1", Tenant: "acme", Plan: "gold"}
	k3   = &quotav1.Caller{KeyId: "k3", AppId: "app2", Tenant: "acme", Plan: "free"}
	k4   = &quotav1.Caller{KeyId: "k4", AppId: "app2", Tenant: "acme", Plan: "free"}
	k5   = &quotav1.Caller{KeyId: "k5", AppId: "w-app", Tenant: `Widgets, "Inc"`, Plan: "gold"}
	anon = &quotav1.Caller{}
)

func row(c *quotav1.Caller, product string, class uint32, counted, billable uint64) *quotav1.UsageRow {
	return &quotav1.UsageRow{Caller: c, Product: product, RouteId: "r." + product, StatusClass: class, Counted: counted, Billable: billable}
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// node plays a gateway node: it numbers its windows, keeps its own
// period counters, and holds every window it made in its "spool", from
// which it ships and re-sends them.
type node struct {
	st                *store.Store
	id, spool, region string

	mu       sync.Mutex
	seq      uint64
	counters map[string][2]uint64
	spooled  map[uint64]*quotav1.UsageWindow
}

func newNode(st *store.Store, id string) *node {
	n := &node{st: st, id: id, spool: fmt.Sprintf("%016x", len(id)*1000+int(id[len(id)-1])), region: "eu",
		counters: map[string][2]uint64{}, spooled: map[uint64]*quotav1.UsageWindow{}}
	return n
}

// window makes and spools the node's next window, of 10 s from start,
// without shipping it.
func (n *node) window(start time.Time, rows ...*quotav1.UsageRow) *quotav1.UsageWindow {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seq++
	period := reconcile.PeriodOf(start)
	w := &quotav1.UsageWindow{NodeId: n.id, SpoolId: n.spool, Seq: n.seq, Parts: 1, Region: n.region,
		Start: timestamppb.New(start), End: timestamppb.New(start.Add(10 * time.Second)), Period: period, Rows: rows}
	c := n.counters[period]
	for _, r := range rows {
		w.Counted += r.Counted
		w.Billable += r.Billable
	}
	c[0] += w.Counted
	c[1] += w.Billable
	n.counters[period] = c
	w.PeriodCounted, w.PeriodBillable = c[0], c[1]
	n.spooled[n.seq] = w
	return w
}

// miscount makes the node's own counters of period say more than its
// windows (as if a window were lost with its counts in the counters).
func (n *node) miscount(period string, counted, billable uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.counters[period]
	c[0] += counted
	c[1] += billable
	n.counters[period] = c
}

// emit makes the next window and ships it.
func (n *node) emit(t *testing.T, start time.Time, rows ...*quotav1.UsageRow) *quotav1.UsageWindow {
	t.Helper()
	w := n.window(start, rows...)
	n.ship(t, w)
	return w
}

func (n *node) ship(t *testing.T, ws ...*quotav1.UsageWindow) {
	t.Helper()
	for _, w := range ws {
		if _, err := n.st.Apply(context.Background(), proto.Clone(w).(*quotav1.UsageWindow)); err != nil {
			t.Fatalf("Apply %s/%d: %v", w.GetNodeId(), w.GetSeq(), err)
		}
	}
}

// resend ships windows from..to again, as a node does on ResendUsage.
func (n *node) resend(from, to uint64) error {
	n.mu.Lock()
	var ws []*quotav1.UsageWindow
	for s := from; s <= to; s++ {
		if w := n.spooled[s]; w != nil {
			ws = append(ws, w)
		}
	}
	n.mu.Unlock()
	for _, w := range ws {
		if _, err := n.st.Apply(context.Background(), proto.Clone(w).(*quotav1.UsageWindow)); err != nil {
			return err
		}
	}
	return nil
}

func (n *node) usage() *distributionv1.NodeSpool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return &distributionv1.NodeSpool{NodeId: n.id, Region: n.region,
		Usage: &distributionv1.UsageSpool{SpoolId: n.spool, FirstSeq: 1, LastSeq: n.seq}}
}

// fakeRelay is a Relay of connected nodes, which re-send at once.
type fakeRelay struct {
	mu    sync.Mutex
	nodes map[string]*node
	extra []*distributionv1.NodeSpool // reported as they are
	err   error
	calls []string
	// record: Resend records the call and ships nothing.
	record bool
}

func newRelay(nodes ...*node) *fakeRelay {
	f := &fakeRelay{nodes: map[string]*node{}}
	for _, n := range nodes {
		f.nodes[n.id] = n
	}
	return f
}

func (f *fakeRelay) Spools(context.Context) ([]*distributionv1.NodeSpool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	out := slices.Clone(f.extra)
	for _, n := range f.nodes {
		out = append(out, n.usage())
	}
	return out, nil
}

func (f *fakeRelay) Resend(_ context.Context, id string, r *distributionv1.ResendUsage) error {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf("%s/%s %d-%d", id, r.GetSpoolId(), r.GetFromSeq(), r.GetToSeq()))
	n, record := f.nodes[id], f.record
	f.mu.Unlock()
	switch {
	case n == nil:
		return fmt.Errorf("%w: %s", reconcile.ErrNotConnected, id)
	case n.spool != r.GetSpoolId():
		return fmt.Errorf("%w: %s", reconcile.ErrOtherSpool, id)
	case record:
		return nil
	}
	return n.resend(r.GetFromSeq(), r.GetToSeq())
}

func (f *fakeRelay) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// gaps renders a report's gaps as "node/spool from-to requested".
func gaps(rep *quotav1.ReconcileReport) []string {
	var out []string
	for _, g := range rep.GetGaps() {
		s := fmt.Sprintf("%s/%s %d-%d", g.GetNodeId(), g.GetSpoolId(), g.GetFromSeq(), g.GetToSeq())
		if g.GetRequested() {
			s += " requested"
		}
		out = append(out, s)
	}
	return out
}

func total(t *testing.T, st *store.Store, c *quotav1.Caller, product, period string) store.Counts {
	t.Helper()
	tot, err := st.Total(context.Background(), store.Key{Subject: store.Subject(c), Product: product, Period: period})
	if err != nil {
		t.Fatalf("Total(%s, %s, %s): %v", store.Subject(c), product, period, err)
	}
	return tot.Counts
}

func blockedHas(rep *quotav1.ReconcileReport, parts ...string) bool {
	for _, b := range rep.GetBlocked() {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(b, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// quiet is the reconcilers' logger in tests.
var quiet = slog.New(slog.DiscardHandler)
