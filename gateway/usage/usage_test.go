package usage_test

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/auth"
	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/snapshot"
	"github.com/portico-gw/portico/gateway/usage"
	"github.com/portico-gw/portico/gateway/usage/spool"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func open(t testing.TB, dir string, opts usage.Options) *usage.Recorder {
	t.Helper()
	if opts.NodeID == "" {
		opts.NodeID = "node-1"
	}
	opts.NoSync = true
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxSeries == 0 {
		opts.MaxSeries = 1 << 12
	}
	r, err := usage.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s) = %v", dir, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// call is one request to record.
type call struct {
	key, app, tenant, plan string
	kind                   auth.Kind
	route, product         string
	status                 int
	forwarded, synthetic   bool
	took                   time.Duration
}

func (c call) record(now time.Time) *exchange.Record {
	x := &exchange.Record{
		Start:     now.Add(-c.took),
		Status:    c.status,
		Forwarded: c.forwarded,
		Synthetic: c.synthetic,
		Identity:  auth.Identity{Kind: c.kind, KeyID: c.key, ClientID: c.app, Tenant: c.tenant, Plan: c.plan},
	}
	if c.route != "" {
		x.Route = &snapshot.Route{ID: c.route, Auth: &snapshot.RouteAuth{Product: c.product}}
	}
	return x
}

// windows reads every window in the spool, checking each is valid.
func windows(t testing.TB, sp *spool.Spool) []*quotav1.UsageWindow {
	t.Helper()
	v, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	var ws []*quotav1.UsageWindow
	err = sp.Scan(1, func(seq uint64, payload []byte) error {
		w := &quotav1.UsageWindow{}
		if err := proto.Unmarshal(payload, w); err != nil {
			return fmt.Errorf("seq %d: %w", seq, err)
		}
		if w.Seq != seq {
			return fmt.Errorf("record %d holds window seq %d", seq, w.Seq)
		}
		if err := v.Validate(w); err != nil {
			return fmt.Errorf("seq %d: %w", seq, err)
		}
		ws = append(ws, w)
		return nil
	})
	if err != nil {
		t.Fatalf("reading the spool: %v", err)
	}
	return ws
}

// spooled reads the windows in the spool of the closed recorder of dir.
func spooled(t testing.TB, dir string) []*quotav1.UsageWindow {
	t.Helper()
	sp, err := spool.Open(filepath.Join(dir, "spool"), spool.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	return windows(t, sp)
}

// rowID names a row for comparisons.
func rowID(r *quotav1.UsageRow) string {
	c := r.GetCaller()
	return fmt.Sprintf("%s/%s/%s/%s %s %s %dxx", c.GetKeyId(), c.GetAppId(), c.GetTenant(), c.GetPlan(), r.GetProduct(), r.GetRouteId(), r.GetStatusClass())
}

func rows(ws ...*quotav1.UsageWindow) map[string][2]uint64 {
	m := map[string][2]uint64{}
	for _, w := range ws {
		for _, r := range w.GetRows() {
			v := m[rowID(r)]
			m[rowID(r)] = [2]uint64{v[0] + r.GetCounted(), v[1] + r.GetBillable()}
		}
	}
	return m
}

func counted(ws ...*quotav1.UsageWindow) (c, b uint64) {
	for _, w := range ws {
		for _, r := range w.GetRows() {
			c += r.GetCounted()
			b += r.GetBillable()
		}
	}
	return c, b
}

var t0 = time.Date(2026, 12, 31, 23, 59, 40, 0, time.UTC)

func TestWindowRows(t *testing.T) {
	t.Parallel()
	clk := newClock(t0)
	r := open(t, t.TempDir(), usage.Options{NodeID: "node-a", Region: "eu", Now: clk.Now})
	if id := r.SpoolID(); len(id) != 32 {
		t.Errorf("SpoolID() = %q, want 32 hex digits", id)
	}
	key := call{key: "k1", app: "app1", tenant: "t1", plan: "gold", kind: auth.APIKey, route: "r1", product: "p1"}
	ok, limited := key, key
	ok.status, ok.forwarded, ok.took = 200, true, 3*time.Millisecond
	limited.status, limited.took = 429, 100*time.Microsecond
	token := call{app: "cli", tenant: "t2", kind: auth.Token, route: "r2", product: "p2", status: 503, forwarded: true, took: 20 * time.Second}
	lost := call{status: 0}
	probe := ok
	probe.synthetic = true
	for _, c := range []struct {
		call
		n int
	}{{ok, 3}, {limited, 2}, {token, 1}, {lost, 1}, {probe, 5}} {
		for range c.n {
			r.Record(c.record(clk.Now()))
		}
	}
	if err := r.CloseWindow(); err != nil {
		t.Fatalf("CloseWindow() = %v", err)
	}
	ws := windows(t, r.Spool())
	if len(ws) != 1 {
		t.Fatalf("spool holds %d windows, want 1", len(ws))
	}
	w := ws[0]
	want := map[string][2]uint64{
		"k1/app1/t1/gold p1 r1 2xx": {3, 3},
		"k1/app1/t1/gold p1 r1 4xx": {2, 0},
		"/cli/t2/ p2 r2 5xx":        {1, 1},
		"///   0xx":                 {1, 0},
	}
	if got := rows(w); !equal(got, want) {
		t.Errorf("rows = %v, want %v", got, want)
	}
	if w.GetSeq() != 1 || w.GetNodeId() != "node-a" || w.GetRegion() != "eu" || w.GetSpoolId() != r.SpoolID() || w.GetParts() != 1 {
		t.Errorf("window seq %d node %q region %q spool %q parts %d, want 1 node-a eu %s 1",
			w.GetSeq(), w.GetNodeId(), w.GetRegion(), w.GetSpoolId(), w.GetParts(), r.SpoolID())
	}
	if w.GetCounted() != 7 || w.GetBillable() != 4 || w.GetPeriodCounted() != 7 || w.GetPeriodBillable() != 4 {
		t.Errorf("counted %d billable %d period %d/%d, want 7 4 7/4", w.GetCounted(), w.GetBillable(), w.GetPeriodCounted(), w.GetPeriodBillable())
	}
	if w.GetPeriod() != "2026-12" || w.GetRecovered() {
		t.Errorf("period %q recovered %v, want 2026-12 false", w.GetPeriod(), w.GetRecovered())
	}
	lat := map[string][]uint64{}
	for _, l := range w.GetLatencies() {
		c := l.GetCaller()
		lat[c.GetKeyId()+"/"+c.GetAppId()+" "+l.GetRouteId()] = l.GetBuckets()
	}
	wantLat := map[string][]uint64{
		"k1/app1 r1": {2, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, // 0.1 ms twice, 3 ms three times
		"/cli r2":    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, // 20 s
		"/ ":         {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	}
	if fmt.Sprint(lat) != fmt.Sprint(wantLat) {
		t.Errorf("latencies = %v, want %v", lat, wantLat)
	}

	// An empty window still carries the period's counters; the one after
	// it starts in January, a new period, whose counters start again.
	clk.Set(t0.Add(30 * time.Second))
	if err := r.CloseWindow(); err != nil {
		t.Fatalf("CloseWindow() = %v", err)
	}
	r.Record(ok.record(clk.Now()))
	r.Record(limited.record(clk.Now()))
	clk.Set(t0.Add(40 * time.Second))
	if err := r.CloseWindow(); err != nil {
		t.Fatalf("CloseWindow() = %v", err)
	}
	ws = windows(t, r.Spool())
	for i, want := range []struct {
		period        string
		counted, c, b uint64
		start, end    time.Duration
	}{{"2026-12", 0, 7, 4, 0, 30 * time.Second}, {"2027-01", 2, 2, 1, 30 * time.Second, 40 * time.Second}} {
		w := ws[i+1]
		c, _ := counted(w)
		if w.GetSeq() != uint64(i+2) || w.GetPeriod() != want.period || c != want.counted || w.GetPeriodCounted() != want.c || w.GetPeriodBillable() != want.b {
			t.Errorf("window %d: seq %d period %q counted %d period counters %d/%d, want %d %s %d %d/%d",
				i+2, w.GetSeq(), w.GetPeriod(), c, w.GetPeriodCounted(), w.GetPeriodBillable(), i+2, want.period, want.counted, want.c, want.b)
		}
		if !w.GetStart().AsTime().Equal(t0.Add(want.start)) || !w.GetEnd().AsTime().Equal(t0.Add(want.end)) {
			t.Errorf("window %d spans %v to %v, want %v to %v", i+2, w.GetStart().AsTime(), w.GetEnd().AsTime(), t0.Add(want.start), t0.Add(want.end))
		}
	}
	if s := r.Stats(); s.Windows != 3 || s.LastSeq != 3 || s.SpoolFull {
		t.Errorf("Stats() = %+v, want 3 windows, last seq 3", s)
	}
}

func equal(a, b map[string][2]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestClockOffsetPicksPeriod(t *testing.T) {
	t.Parallel()
	clk := newClock(t0) // 20 s before January on the node's clock
	r := open(t, t.TempDir(), usage.Options{Now: clk.Now})
	r.SetClockOffset(2 * time.Minute)
	if got := r.ClockOffset(); got != 2*time.Minute {
		t.Fatalf("ClockOffset() = %v, want 2m", got)
	}
	if err := r.CloseWindow(); err != nil { // the window opened before the offset was known
		t.Fatal(err)
	}
	r.Record(call{key: "k", status: 200}.record(clk.Now()))
	if err := r.CloseWindow(); err != nil {
		t.Fatal(err)
	}
	w := windows(t, r.Spool())[1]
	if w.GetPeriod() != "2027-01" || w.GetClockOffset().AsDuration() != 2*time.Minute || !w.GetStart().AsTime().Equal(t0.Add(2*time.Minute)) {
		t.Errorf("window period %q offset %v start %v, want 2027-01 2m %v", w.GetPeriod(), w.GetClockOffset().AsDuration(), w.GetStart().AsTime(), t0.Add(2*time.Minute))
	}
}

// TestClockOffsetBackwards: an offset set backwards while a window is
// open (the node's clock was ahead) closes that window at its start, not
// before it, and counts its calls there; the next window starts on the
// corrected clock.
func TestClockOffsetBackwards(t *testing.T) {
	t.Parallel()
	clk := newClock(t0)
	r := open(t, t.TempDir(), usage.Options{Now: clk.Now})
	if err := r.CloseWindow(); err != nil { // the window opened at t0
		t.Fatal(err)
	}
	r.Record(call{key: "k", status: 200}.record(clk.Now()))
	r.SetClockOffset(-2 * time.Minute)
	if err := r.CloseWindow(); err != nil {
		t.Fatal(err)
	}
	r.Record(call{key: "k", status: 200}.record(clk.Now()))
	if err := r.CloseWindow(); err != nil {
		t.Fatal(err)
	}
	ws := windows(t, r.Spool())
	if len(ws) != 3 {
		t.Fatalf("%d windows spooled, want 3", len(ws))
	}
	for _, w := range ws {
		if w.GetEnd().AsTime().Before(w.GetStart().AsTime()) {
			t.Errorf("window %d ends at %v, before its start %v", w.GetSeq(), w.GetEnd().AsTime(), w.GetStart().AsTime())
		}
	}
	if w := ws[1]; w.GetCounted() != 1 || !w.GetEnd().AsTime().Equal(w.GetStart().AsTime()) {
		t.Errorf("the window the offset moved in: %d counted, %v to %v; want 1, ending at its start", w.GetCounted(), w.GetStart().AsTime(), w.GetEnd().AsTime())
	}
	if w := ws[2]; w.GetCounted() != 1 || !w.GetStart().AsTime().Equal(clk.Now().Add(-2*time.Minute)) {
		t.Errorf("the next window: %d counted, starting %v; want 1, at %v", w.GetCounted(), w.GetStart().AsTime(), clk.Now().Add(-2*time.Minute))
	}
}

// TestRotationExact races Record calls on many goroutines against windows
// closing as fast as they can: every call must be in exactly one window.
func TestRotationExact(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := open(t, dir, usage.Options{})
	// Yielding inside Record's steps makes the races with the closer
	// likely on any machine.
	var yields atomic.Uint64
	r.SetInFlightHook(func() {
		if yields.Add(1)%4 == 0 {
			runtime.Gosched()
		}
	})
	const goroutines, calls, keys = 8, 20000, 37
	var wg sync.WaitGroup
	var mu sync.Mutex
	want := map[string][2]uint64{}
	for g := range goroutines {
		wg.Go(func() {
			mine := map[string][2]uint64{}
			for i := range calls {
				c := call{key: fmt.Sprintf("k%d", (g*7+i)%keys), route: fmt.Sprintf("r%d", i%3), product: "p", status: 200 + 100*(i%4), forwarded: i%3 != 0}
				r.Record(c.record(time.Now()))
				id := fmt.Sprintf("%s/// p %s %dxx", c.key, c.route, c.status/100)
				v := mine[id]
				v[0]++
				if c.forwarded {
					v[1]++
				}
				mine[id] = v
			}
			mu.Lock()
			for k, v := range mine {
				w := want[k]
				want[k] = [2]uint64{w[0] + v[0], w[1] + v[1]}
			}
			mu.Unlock()
		})
	}
	var writing sync.WaitGroup
	writing.Go(wg.Wait)
	finished := make(chan struct{})
	go func() { writing.Wait(); close(finished) }()
	closes := 0
	for loop := true; loop; closes++ {
		if err := r.CloseWindow(); err != nil {
			t.Fatalf("CloseWindow() = %v", err)
		}
		select {
		case <-finished:
			loop = false
		default:
		}
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	ws := spooled(t, dir)
	got := rows(ws...)
	if !equal(got, want) {
		t.Errorf("rows over %d windows differ from the calls made:\n got %v\nwant %v", len(ws), got, want)
	}
	c, _ := counted(ws...)
	if c != goroutines*calls || ws[len(ws)-1].GetPeriodCounted() != c {
		t.Errorf("windows count %d calls, last window's period counter %d, want %d", c, ws[len(ws)-1].GetPeriodCounted(), goroutines*calls)
	}
	t.Logf("%d calls in %d windows (%d closes)", c, len(ws), closes)
}
