package billing_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-gw/portico/control/distribution"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/quota"
	"github.com/portico-gw/portico/quota/reconcile"
	"github.com/portico-gw/portico/quota/store"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/kafkatest"
)

// fullEnv selects the full-length run of TestExactUnderFaults (the
// harness's): 10 s windows, Kafka away for 30 s.
const fullEnv = "PORTICO_BILLING_FULL"

// scenario is how long the phases of TestExactUnderFaults last.
type scenario struct {
	window time.Duration // the nodes' usage window
	lead   time.Duration // from the start to the month's end
	after  time.Duration // traffic after the month's end
	down   time.Duration // Kafka away
}

func scenarioOf() scenario {
	if os.Getenv(fullEnv) != "" {
		return scenario{window: 10 * time.Second, lead: 150 * time.Second, after: 30 * time.Second, down: 30 * time.Second}
	}
	return scenario{window: 200 * time.Millisecond, lead: 25 * time.Second, after: 2 * time.Second, down: 3 * time.Second}
}

// skew is node n2's clock error: 2 minutes ahead (and 73 ms, so that
// its raw clock is not a multiple of the window away from the others').
const skew = 2*time.Minute + 73*time.Millisecond

// TestExactUnderFaults is the headline test of billing-grade usage
// (issue 17): three nodes following one control plane ship their usage
// windows through Kafka (one long-lived in-process broker) to a quota
// service on PostgreSQL, while the clients count what every call
// answered. In the one run:
//
//	a. node n1, a child process, is SIGKILLed mid-window (once it has
//	   counted every call its clients saw answered) and restarted on the
//	   same usage directory: the window it left is spooled as recovered;
//	b. Kafka is unreachable for a while under traffic: the spools grow;
//	c. every batch is delivered twice (the nodes' Sender sends it twice);
//	d. the quota service is killed while it applies a batch, and a new
//	   one takes over the consumer group on the same store;
//	e. node n2's clock is 2 minutes ahead, corrected by the offset the
//	   control plane's stream measures; every clock is shifted so that a
//	   month ends mid-test, and windows go to the period of their
//	   corrected start (they close at multiples of the window on the
//	   corrected clock, so the skewed node's change period where the
//	   others' do; its first windows, before the stream measured its
//	   offset, are empty and stamped 2 minutes ahead);
//	f. the consumer drops one window of n3, which the reconciler finds
//	   missing and has re-sent through the control plane, n3's stream
//	   and its shipper.
//
// Then both periods are reconciled and finalised, and for every key and
// product the totals and the billing lines must equal what the clients
// saw, exactly: counted (by status class), billable (the forwarded calls,
// not the gateway's refusals), billed (min(billable, cap) for the
// hard-capped plan) and overshoot.
//
// Wall time: about 40 s in the suite (200 ms windows, Kafka away 3 s,
// the month's end 25 s in), about the same under -race; with
// PORTICO_BILLING_FULL=1 (10 s windows, Kafka away 30 s, the month's end
// 150 s in) about 4 minutes.
func TestExactUnderFaults(t *testing.T) {
	sc := scenarioOf()
	clk, monthEnd := clockBefore(sc.lead)
	p1, p2 := periodOf(monthEnd.Add(-time.Second)), periodOf(monthEnd)
	t.Logf("scenario: window %v, Kafka away %v; the month ends %v from now (%s | %s)", sc.window, sc.down, sc.lead, p1, p2)
	ctx := context.Background()

	// The parties.
	kc := kafkatest.Start(t, 3, topic)
	cp := startControl(t, clk)
	keys := newKeys(t)
	version, lane := configure(t, cp, keys)
	st, err := store.Open(ctx, pgDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	tp := newTap(clk)
	qopts := quota.Options{Store: st, Brokers: kc.Addrs(), Topic: topic, Group: "billing-quota", Drop: tp.drop,
		ControlURL: cp.url, ControlToken: publisherToken, HTTPClient: gatewaytest.H2CClient(t), Now: clk.now}
	q1 := startQuota(t, qopts)

	dir := t.TempDir()
	cfg := func(id string, sk time.Duration) nodeConfig {
		return nodeConfig{ID: id, Region: "eu", Dir: dir + "/" + id, ControlURL: cp.url, Brokers: kc.Addrs(), Topic: topic,
			Window: sc.window, Shift: clk.shift, Skew: sk}
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if err := os.MkdirAll(dir+"/"+id, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n1 := startChild(t, cfg("n1", 0))
	n2 := startLocal(t, cfg("n2", skew))
	n3 := startLocal(t, cfg("n3", 0))
	waitNodes(t, cp, version, lane, time.Time{}, "n1", "n2", "n3")
	// n2's windows are stamped on its corrected clock once the stream
	// measured its offset: a window from it that starts in the past
	// says the recorder has it.
	eventually(t, time.Minute, "a window of n2 on its corrected clock", func() bool {
		d, ok := tp.offset("n2")
		return ok && (d+skew).Abs() < time.Second
	})
	if now := clk.now(); !now.Before(monthEnd.Add(-5 * sc.window)) {
		t.Fatalf("the set-up took until %v, past the month's end %v less 5 windows: make scenario.lead longer", now, monthEnd)
	}

	c := newClients(t, keys)
	tr := startTraffic(t, c, n1, n2, n3)
	eventually(t, time.Minute, "traffic on every node", func() bool {
		return tr.rounds("n1") >= 5 && tr.rounds("n2") >= 5 && tr.rounds("n3") >= 5
	})

	// a. n1 SIGKILLed mid-window, restarted on the same directory.
	tr.pause("n1")
	seenN1 := sumOf(c.seen("n1")).Counted
	var before nodeStats
	eventually(t, 30*time.Second, "n1 to count every call its clients saw", func() bool {
		before = n1.stats(t)
		return before.Served == seenN1
	})
	killedAt := clk.now()
	n1.kill(t)
	n1 = startChild(t, cfg("n1", 0))
	waitNodes(t, cp, version, lane, killedAt, "n1")
	tr.resume("n1", n1.url())
	servedBase := sumOf(c.seen("n1")).Counted // the new process counts from 0
	t.Logf("a. n1 SIGKILLed after %d calls (spool at seq %d, %d windows spooled by it), restarted", seenN1, before.Usage.LastSeq, before.Usage.Windows)

	// b. Kafka away while the traffic goes on.
	kc.SetDown(true)
	downAt := time.Now()
	var maxPending uint64
	eventually(t, sc.down+time.Minute, "Kafka away for a while, the spools growing", func() bool {
		p := n2.stats(t).Ship.Pending + n3.stats(t).Ship.Pending + n1.stats(t).Ship.Pending
		maxPending = max(maxPending, p)
		return time.Since(downAt) >= sc.down && maxPending >= 3
	})
	kc.SetDown(false)
	t.Logf("b. Kafka away %v: %d connections cut, the spools grew to %d windows waiting to ship",
		time.Since(downAt).Round(time.Millisecond), kc.Cuts(), maxPending)

	// d. The quota service killed while it applies the backlog, a new
	// one on the same store and consumer group.
	killed := tp.armKill(3, q1.cancel)
	select {
	case <-killed:
	case <-time.After(time.Minute):
		t.Fatal("the quota service applied no window within a minute of Kafka's return")
	}
	q1.stop()
	st1 := q1.Stats()
	q2 := startQuota(t, qopts)
	t.Logf("d. the quota service killed applying window %v (first service: %d applied, %d duplicates); a new one took over",
		tp.killWin(), st1.Applied, st1.Duplicates)

	// f. One of n3's windows dropped by the new consumer.
	dropped := tp.armDrop("n3")
	select {
	case <-dropped:
	case <-time.After(time.Minute):
		t.Fatal("no window of n3 with calls reached the new quota service within a minute")
	}

	// Traffic on past the month's end.
	eventually(t, sc.lead+sc.after+2*time.Minute, "traffic past the month's end", func() bool {
		return clk.now().After(monthEnd.Add(sc.after))
	})
	tr.stop()
	seen := c.seen("")
	if n := c.failed(); n > 0 {
		t.Fatalf("%d calls were not answered as expected", n)
	}

	// Flush: every node's spool in the store, the dropped window re-sent
	// on the reconciler's asking, the quota service's marks back on
	// every node.
	var recNow atomic.Pointer[time.Time]
	rec := newReconciler(st, reconcile.NewRelay(gatewaytest.H2CClient(t), cp.url, publisherToken), func() time.Time {
		if p := recNow.Load(); p != nil {
			return *p
		}
		return clk.now()
	})
	droppedID := tp.droppedID()
	eventually(t, time.Minute, "both copies of the dropped window dropped, the gap in the store", func() bool {
		seqs := contiguous(t, st)
		s, ok := seqs[droppedID.node+"/"+droppedID.spool]
		return tp.drops() >= 2 && ok && s.Contiguous < droppedID.seq && s.Highest > droppedID.seq
	})
	tp.release()
	nodes := []node{n1, n2, n3}
	spoolIDs := map[string]string{}
	for _, ns := range cp.Distribution.Status().Nodes {
		spoolIDs[ns.ID] = ns.Usage.GetSpoolId()
	}
	var gapReports []*quotav1.Gap
	lastRun := time.Time{}
	eventuallyWhy(t, 2*time.Minute, "every node's windows in the store and its mark back on it", func() (bool, string) {
		if time.Since(lastRun) > 300*time.Millisecond {
			lastRun = time.Now()
			rep, err := rec.Run(ctx, p2, false)
			if err != nil {
				t.Fatalf("Run(%s): %v", p2, err)
			}
			for _, g := range rep.GetGaps() {
				if g.GetNodeId() == droppedID.node && g.GetFromSeq() <= droppedID.seq && droppedID.seq <= g.GetToSeq() {
					gapReports = append(gapReports, g)
				}
			}
		}
		for _, n := range nodes {
			last := n.stats(t)
			s := contiguous(t, st)[n.id()+"/"+spoolIDs[n.id()]]
			if s.Contiguous < last.Usage.LastSeq || last.Ship.Trimmed < last.Usage.LastSeq-1 {
				var seen []string
				for _, m := range s.Missing {
					w := tp.window(winID{n.id(), spoolIDs[n.id()], m, 0})
					seen = append(seen, fmt.Sprintf("seq %d delivered %d times (%v)", m, tp.times(winID{n.id(), spoolIDs[n.id()], m, 0}), w))
				}
				return false, fmt.Sprintf("node %s: spool at %d, shipper %+v; the store %+v; gaps reported %v; the consumer: %+v; missing: %v",
					n.id(), last.Usage.LastSeq, last.Ship, s, gapReports, q2.Stats(), seen)
			}
		}
		return true, ""
	})

	// Stop the nodes; each ships its last window.
	final := map[string]nodeStats{}
	for _, n := range nodes {
		final[n.id()] = n.stop(t)
	}
	eventually(t, time.Minute, "every node's last window in the store", func() bool {
		seqs := contiguous(t, st)
		for _, n := range nodes {
			s := seqs[n.id()+"/"+spoolIDs[n.id()]]
			if s.Contiguous < final[n.id()].Usage.LastSeq {
				return false
			}
		}
		return true
	})
	// The relay forgets the nodes as their streams end.
	ectx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := cp.Distribution.Wait(ectx, func(s distribution.Status) bool { return len(s.Nodes) == 0 }); err != nil {
		t.Fatalf("the nodes still connected: %v", err)
	}
	q2.stop()

	// Close both periods, on a clock past the second's end and grace.
	_, end2, err := reconcile.Bounds(p2)
	if err != nil {
		t.Fatal(err)
	}
	late := end2.Add(time.Minute)
	recNow.Store(&late)
	for _, p := range []string{p1, p2} {
		rep, err := rec.Run(ctx, p, true)
		if err != nil {
			t.Fatalf("Run(%s, finalise): %v", p, err)
		}
		if !rep.GetFinalised() || len(rep.GetCorrections()) > 0 || len(rep.GetCounterMismatches()) > 0 {
			t.Fatalf("Run(%s, finalise) = %v, want final with no correction and no counter mismatch", p, rep)
		}
	}

	// The figures, for every key and product: the store's totals and the
	// billing lines of both periods against what the clients saw.
	tot1, tot2 := totals(t, st, p1), totals(t, st, p2)
	lines1, lines2 := lines(t, rec, p1), lines(t, rec, p2)
	appOf := map[string]*apiKey{}
	for _, k := range keys {
		appOf[k.id] = k
	}
	var lost, doubled, overshoot uint64
	var all tally
	for _, k := range keys {
		for _, product := range []string{"pa", "pb"} {
			id := tk{k.id, product}
			want := seen[id]
			all.add(want)
			var got tally
			for _, tot := range []store.Total{tot1[id], tot2[id]} {
				got.add(tally{Counted: tot.Counts.Counted, Billable: tot.Counts.Billable, ByClass: tot.Counts.ByClass})
			}
			if got != want {
				t.Errorf("%s %s: the store counts %s; the clients saw %s", k.id, product, fmtTally(got), fmtTally(want))
			}
			if got.Counted < want.Counted {
				lost += want.Counted - got.Counted
			} else {
				doubled += got.Counted - want.Counted
			}
			for _, per := range []struct {
				name  string
				tot   store.Total
				lines map[[2]string]*quotav1.BillingLine
			}{{p1, tot1[id], lines1}, {p2, tot2[id], lines2}} {
				if per.tot.Counts.Counted == 0 {
					t.Errorf("%s %s: no calls counted in %s, want calls on both sides of the month's end", k.id, product, per.name)
				}
				l := per.lines[[2]string{k.app, product}]
				billable := per.tot.Counts.Billable
				billed := billable
				if k.plan == planCapped {
					billed = min(billable, capLimit)
				}
				if l.GetCounted() != per.tot.Counts.Counted || l.GetBillable() != billable || l.GetBilled() != billed ||
					l.GetOvershoot() != billable-billed || l.GetAdjustments() != 0 || l.GetPlan() != k.plan || l.GetTenant() != k.tenant {
					t.Errorf("%s's line of %s in %s = %v, want counted %d, billable %d, billed %d, overshoot %d, plan %s",
						k.app, product, per.name, l, per.tot.Counts.Counted, billable, billed, billable-billed, k.plan)
				}
				overshoot += l.GetOvershoot()
			}
		}
	}
	if overshoot == 0 {
		t.Errorf("the capped key overshot nothing: cap %d is not below its billable calls", capLimit)
	}
	t.Logf("totals: the clients saw %s on %d rounds; lost %d, doubled %d; the capped key %s overshot its cap of %d by %d",
		fmtTally(all), tr.rounds("n1")+tr.rounds("n2")+tr.rounds("n3"), lost, doubled, "k4", capLimit, overshoot)

	// The faults happened.
	if kc.Cuts() == 0 {
		t.Error("b. Kafka cut no connection")
	}
	qs := q1.Stats()
	qs2 := q2.Stats()
	var extra uint64
	for _, f := range final {
		extra += f.Extra
	}
	if qs.Duplicates+qs2.Duplicates == 0 || extra == 0 {
		t.Errorf("c. duplicates: %d sent twice, %d+%d absorbed, want both > 0", extra, qs.Duplicates, qs2.Duplicates)
	}
	t.Logf("c. %d messages sent twice; the consumers absorbed %d duplicates (%d applied, %d late, %d dropped)",
		extra, qs.Duplicates+qs2.Duplicates, qs.Applied+qs2.Applied, qs.Late+qs2.Late, qs.Dropped+qs2.Dropped)
	if n := tp.times(tp.killWin()); n < 2 {
		t.Errorf("d. the window the quota service was killed on was delivered %d times, want again to the new one", n)
	}
	if final["n1"].Served+servedBase != sumOf(c.seen("n1")).Counted {
		t.Errorf("a. the restarted n1 served %d calls, its clients saw %d after the restart",
			final["n1"].Served, sumOf(c.seen("n1")).Counted-servedBase)
	}
	rw := tp.recovered("n1")
	if len(rw) == 0 {
		t.Error("a. no recovered window of n1 reached the quota service")
	}
	for _, w := range rw {
		t.Logf("a. n1's recovered window: seq %d, %d calls counted (%d billable), %v to %v", w.GetSeq(), w.GetCounted(), w.GetBillable(),
			w.GetStart().AsTime().Format("15:04:05.000"), w.GetEnd().AsTime().Format("15:04:05.000"))
	}
	if final["n1"].Usage.Recovered == 0 {
		t.Error("a. the restarted n1 recovered no window")
	}
	if d, ok := tp.offset("n2"); !ok || (d+skew).Abs() > time.Second {
		t.Errorf("e. n2's windows carry a clock offset of %v, want about %v", d, -skew)
	} else {
		t.Logf("e. n2's clock offset as measured: %v (its skew %v)", d, skew)
	}
	if f := tp.future(); len(f) > 0 {
		t.Errorf("e. windows with calls that end in the future (uncorrected clocks): %v", f)
	}
	for _, n := range nodes {
		// The windows either side of the month's end, on the corrected
		// clock: the skewed node's change period where the others' do.
		around := tp.around(n.id(), monthEnd, sc.window)
		if len(around) == 0 {
			t.Errorf("e. %s has no window with calls within a window of the month's end", n.id())
		}
		for _, w := range around {
			t.Logf("e. %s's window seq %d, %v to %v (offset %v): %s", n.id(), w.GetSeq(), w.GetStart().AsTime().Format("15:04:05.000"),
				w.GetEnd().AsTime().Format("15:04:05.000"), w.GetClockOffset().AsDuration().Round(time.Millisecond), w.GetPeriod())
		}
		for _, p := range []string{p1, p2} {
			sps, err := st.SpoolPeriods(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(sps, func(sp store.SpoolPeriod) bool { return sp.NodeID == n.id() })
			if i < 0 || sps[i].Counted == 0 {
				t.Errorf("e. %s has no calls in %s", n.id(), p)
				continue
			}
			t.Logf("e. %s in %s: seqs %d to %d, %d counted, its own counter %d", n.id(), p, sps[i].FirstSeq, sps[i].LastSeq, sps[i].Counted, sps[i].NodeCounted)
		}
	}
	if bad := tp.misattributed(); len(bad) > 0 {
		t.Errorf("e. windows whose period is not their start's: %v", bad)
	}
	if n3s := final["n3"]; n3s.Ship.Resent == 0 || len(gapReports) == 0 || !gapReports[0].GetRequested() || tp.times(droppedID) < 3 {
		t.Errorf("f. the dropped window %v: re-sent %d windows, gaps reported %v, delivered %d times; want it asked for, re-sent and applied",
			droppedID, n3s.Ship.Resent, gapReports, tp.times(droppedID))
	} else {
		t.Logf("f. the dropped window %v: the reconciler found the gap (%v) and asked, n3 re-sent %d window(s), delivered %d times in all",
			droppedID, gapReports[0], n3s.Ship.Resent, tp.times(droppedID))
	}
}

// winID names a window part.
type winID struct {
	node, spool string
	seq         uint64
	part        uint32
}

// tap watches every window the quota service's consumers take (their
// Drop hook), and is where the test kills the service and drops a
// window.
type tap struct {
	clk clock

	mu    sync.Mutex
	wins  map[winID]*seenWindow
	fut   []winID
	mis   []winID
	kill  func() // armed: called at the killAt-th window
	left  int
	kwin  winID
	kdone chan struct{}

	dropNode string // armed: drop the next new window with calls of it
	dropped  *winID
	holding  bool
	ndrops   int
	ddone    chan struct{}
}

type seenWindow struct {
	w     *quotav1.UsageWindow
	times int
}

func newTap(c clock) *tap { return &tap{clk: c, wins: map[winID]*seenWindow{}} }

func (tp *tap) drop(w *quotav1.UsageWindow) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	id := winID{w.GetNodeId(), w.GetSpoolId(), w.GetSeq(), w.GetPart()}
	s := tp.wins[id]
	if s == nil {
		s = &seenWindow{w: w}
		tp.wins[id] = s
		if w.GetCounted() > 0 && w.GetEnd().AsTime().After(tp.clk.now().Add(time.Second)) {
			tp.fut = append(tp.fut, id)
		}
		if w.GetPeriod() != periodOf(w.GetStart().AsTime()) {
			tp.mis = append(tp.mis, id)
		}
	}
	s.times++
	if tp.kill != nil {
		if tp.left--; tp.left <= 0 {
			// The service's Run ends now: this window's Apply fails, and
			// it is not committed.
			tp.kill()
			tp.kill, tp.kwin = nil, id
			close(tp.kdone)
		}
		return false
	}
	if tp.dropNode != "" && w.GetNodeId() == tp.dropNode && w.GetCounted() > 0 && s.times == 1 {
		tp.dropNode, tp.dropped, tp.holding = "", &id, true
		close(tp.ddone)
	}
	if tp.holding && id == *tp.dropped {
		// Every copy (the nodes send each twice) until released.
		tp.ndrops++
		return true
	}
	return false
}

// armKill calls kill at the n-th window from now; the channel is closed
// then.
func (tp *tap) armKill(n int, kill func()) <-chan struct{} {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.kill, tp.left, tp.kdone = kill, n, make(chan struct{})
	return tp.kdone
}

func (tp *tap) killWin() winID {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.kwin
}

// armDrop drops every copy of the next new window with calls of node,
// until release; the channel is closed at the first.
func (tp *tap) armDrop(node string) <-chan struct{} {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.dropNode, tp.ddone = node, make(chan struct{})
	return tp.ddone
}

func (tp *tap) droppedID() winID {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return *tp.dropped
}

func (tp *tap) drops() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.ndrops
}

func (tp *tap) release() {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.holding = false
}

func (tp *tap) window(id winID) *quotav1.UsageWindow {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if s := tp.wins[id]; s != nil {
		return s.w
	}
	return nil
}

func (tp *tap) times(id winID) int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if s := tp.wins[id]; s != nil {
		return s.times
	}
	return 0
}

// offset is the clock offset of node's latest window.
func (tp *tap) offset(node string) (time.Duration, bool) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var latest *quotav1.UsageWindow
	for id, s := range tp.wins {
		if id.node == node && (latest == nil || s.w.GetSeq() > latest.GetSeq()) {
			latest = s.w
		}
	}
	if latest == nil || latest.GetClockOffset() == nil {
		return 0, false
	}
	return latest.GetClockOffset().AsDuration(), true
}

func (tp *tap) recovered(node string) []*quotav1.UsageWindow {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out []*quotav1.UsageWindow
	for id, s := range tp.wins {
		if id.node == node && s.w.GetRecovered() {
			out = append(out, s.w)
		}
	}
	return out
}

// around returns node's windows with calls that start within d of at,
// in seq order.
func (tp *tap) around(node string, at time.Time, d time.Duration) []*quotav1.UsageWindow {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out []*quotav1.UsageWindow
	for id, s := range tp.wins {
		if id.node == node && s.w.GetCounted() > 0 && s.w.GetStart().AsTime().Sub(at).Abs() <= d {
			out = append(out, s.w)
		}
	}
	slices.SortFunc(out, func(a, b *quotav1.UsageWindow) int { return int(a.GetSeq()) - int(b.GetSeq()) })
	return out
}

func (tp *tap) future() []winID {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return slices.Clone(tp.fut)
}

func (tp *tap) misattributed() []winID {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return slices.Clone(tp.mis)
}
