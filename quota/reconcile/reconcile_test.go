package reconcile_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-gw/portico/quota/reconcile"
	"github.com/portico-gw/portico/quota/store"
	"github.com/portico-gw/portico/testing/pgtest"
	"github.com/portico-gw/portico/testing/testclock"
)

const nov, dec = "2026-11", "2026-12"

// TestGapsAreResent: a window the consumer dropped inside a spool's
// sequence is asked of the connected node at once; windows the node
// spooled that never arrived (the trailing gap the relay's last_seq
// shows) are asked for once the node has reported them for Grace, since
// until then they are most likely in flight; all are in once the node
// re-sent them. A node that is not connected has its gap reported, not
// requested.
func TestGapsAreResent(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		n1, n2 := newNode(st, "n1"), newNode(st, "n2")
		t0 := at("2026-11-10T10:00:00Z")
		n1.emit(t, t0, row(k1, "payments", 2, 3, 3))
		n1.emit(t, t0.Add(10*time.Second), row(k1, "payments", 2, 1, 1))
		n1.window(t0.Add(20*time.Second), row(k1, "payments", 2, 5, 4)) // dropped
		n1.emit(t, t0.Add(30*time.Second), row(k1, "payments", 4, 2, 0))
		n1.window(t0.Add(40*time.Second), row(k1, "payments", 2, 7, 7)) // spooled, never arrived
		n1.window(t0.Add(50*time.Second), row(k2, "payments", 2, 1, 1))
		n2.emit(t, t0, row(k3, "search", 2, 1, 1))
		n2.window(t0.Add(10*time.Second), row(k3, "search", 2, 1, 1)) // lost with its node
		n2.emit(t, t0.Add(20*time.Second), row(k3, "search", 2, 1, 1))

		relay := newRelay(n1)
		clock := testclock.New(t0.Add(time.Hour))
		r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Relay: relay, Now: clock.Now, Grace: time.Minute})
		rep, err := r.Run(ctx, nov, false)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{n1.id + "/" + n1.spool + " 3-3 requested", n1.id + "/" + n1.spool + " 5-6", n2.id + "/" + n2.spool + " 2-2"}
		if got := gaps(rep); !slices.Equal(got, want) {
			t.Errorf("gaps = %q, want %q", got, want)
		}
		if got, want := relay.takeCalls(), []string{"n1/" + n1.spool + " 3-3"}; !slices.Equal(got, want) {
			t.Errorf("re-sends asked = %q, want %q", got, want)
		}

		// Not yet Grace later: the trailing gap may still be in flight.
		clock.Add(time.Minute - time.Second)
		if rep, err = r.Run(ctx, nov, false); err != nil {
			t.Fatal(err)
		}
		want = []string{n1.id + "/" + n1.spool + " 5-6", n2.id + "/" + n2.spool + " 2-2"}
		if got := gaps(rep); !slices.Equal(got, want) {
			t.Errorf("gaps before Grace = %q, want %q", got, want)
		}
		if c := relay.takeCalls(); len(c) != 0 {
			t.Errorf("the run before Grace asked %q", c)
		}

		clock.Add(time.Second)
		if rep, err = r.Run(ctx, nov, false); err != nil {
			t.Fatal(err)
		}
		want = []string{n1.id + "/" + n1.spool + " 5-6 requested", n2.id + "/" + n2.spool + " 2-2"}
		if got := gaps(rep); !slices.Equal(got, want) {
			t.Errorf("gaps Grace later = %q, want %q", got, want)
		}
		if got, want := relay.takeCalls(), []string{"n1/" + n1.spool + " 5-6"}; !slices.Equal(got, want) {
			t.Errorf("re-sends asked Grace later = %q, want %q", got, want)
		}
		// The re-sent windows are in: the dropped window is recovered.
		if got := total(t, st, k1, "payments", nov); got.Counted != 18 || got.Billable != 15 {
			t.Errorf("k1's total after the re-send = %+v, want 18 counted, 15 billable", got)
		}
		seqs, err := st.Sequences(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range seqs {
			if q.NodeID == "n1" && (q.Contiguous != 6 || q.Highest != 6) {
				t.Errorf("n1's sequence after the re-send = %+v", q)
			}
		}

		rep, err = r.Run(ctx, nov, false)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := gaps(rep), []string{n2.id + "/" + n2.spool + " 2-2"}; !slices.Equal(got, want) {
			t.Errorf("gaps of the last run = %q, want %q", got, want)
		}
		if c := relay.takeCalls(); len(c) != 0 {
			t.Errorf("the last run asked %q", c)
		}
		if len(rep.GetCorrections()) != 0 || len(rep.GetCounterMismatches()) != 0 {
			t.Errorf("corrections %v, mismatches %v", rep.GetCorrections(), rep.GetCounterMismatches())
		}
	})
}

// TestLaggingConsumerNotAskedAgain: while the consumer lags behind a node
// that spools a window every run, each run asks for at most the windows
// the node reported Grace before, never the ones spooled since, so a lag
// does not turn into a re-send of the whole backlog on every run.
func TestLaggingConsumerNotAskedAgain(t *testing.T) {
	t.Parallel()
	st := sqliteStore(t)
	n1 := newNode(st, "n1")
	t0 := at("2026-11-10T10:00:00Z")
	n1.emit(t, t0, row(k1, "payments", 2, 1, 1))
	relay := newRelay(n1)
	relay.record = true // asked for, not shipped: the consumer still lags
	clock := testclock.New(t0)
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Relay: relay, Now: clock.Now, Grace: 30 * time.Second})
	var asked []string
	for i := 1; i <= 10; i++ {
		n1.window(t0.Add(time.Duration(i)*10*time.Second), row(k1, "payments", 2, 1, 1))
		clock.Add(10 * time.Second)
		if _, err := r.Run(context.Background(), nov, false); err != nil {
			t.Fatal(err)
		}
		asked = append(asked, relay.takeCalls()...)
	}
	// Seq 2 was first reported at 10 s, seq 5 at 40 s, seq 8 at 70 s: each
	// is asked for 30 s later, with what is still missing below it.
	sp := "n1/" + n1.spool
	if want := []string{sp + " 2-2", sp + " 2-5", sp + " 2-8"}; !slices.Equal(asked, want) {
		t.Errorf("re-sends asked = %q, want %q", asked, want)
	}
}

// TestRelayOnlySpool: a node that spooled windows none of which arrived is
// a gap from seq 1; one that spooled none is not.
func TestRelayOnlySpool(t *testing.T) {
	t.Parallel()
	st := sqliteStore(t)
	n1, n2 := newNode(st, "n1"), newNode(st, "n2")
	t0 := at("2026-11-10T10:00:00Z")
	n1.window(t0, row(k1, "payments", 2, 1, 1))
	n1.window(t0.Add(10*time.Second), row(k1, "payments", 2, 1, 1))
	relay := newRelay(n1, n2)
	clock := testclock.New(t0)
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Relay: relay, Now: clock.Now})
	if _, err := r.Run(context.Background(), nov, false); err != nil {
		t.Fatal(err)
	}
	clock.Add(2 * time.Minute) // the default Grace: no longer in flight
	rep, err := r.Run(context.Background(), nov, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gaps(rep), []string{"n1/" + n1.spool + " 1-2 requested"}; !slices.Equal(got, want) {
		t.Errorf("gaps = %q, want %q", got, want)
	}
	if got := total(t, st, k1, "payments", nov); got.Counted != 2 {
		t.Errorf("k1 counted %d after the re-send, want 2", got.Counted)
	}
}

// TestCorrection: a live total that diverged from what the period's
// windows add up to (here by a correction written by hand) is corrected
// back to the recount, once.
func TestCorrection(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		n1 := newNode(st, "n1")
		t0 := at("2026-11-10T10:00:00Z")
		n1.emit(t, t0, row(k1, "payments", 2, 10, 9), row(k2, "payments", 5, 4, 4))
		n1.emit(t, t0.Add(10*time.Second), row(k1, "payments", 2, 5, 5))
		key := store.Key{Subject: store.Subject(k1), Product: "payments", Period: nov}
		edit := store.Correction{Key: key, Counted: 7, Billable: 3, ExpectCounted: 15, ExpectBillable: 14, Reason: "a bad hand edit"}
		if applied, err := st.Correct(ctx, nov, []store.Correction{edit}, "test"); err != nil || len(applied) != 1 {
			t.Fatalf("Correct(the hand edit) = %v, %v", applied, err)
		}
		if got := total(t, st, k1, "payments", nov); got.Counted != 22 || got.Billable != 17 {
			t.Fatalf("the hand edit left %+v", got)
		}

		r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Now: testclock.New(t0.Add(time.Hour)).Now})
		rep, err := r.Run(ctx, nov, false)
		if err != nil {
			t.Fatal(err)
		}
		cs := rep.GetCorrections()
		if len(cs) != 1 || cs[0].GetSubject() != "key:k1" || cs[0].GetProduct() != "payments" || cs[0].GetPeriod() != nov ||
			cs[0].GetCounted() != -7 || cs[0].GetBillable() != -3 || cs[0].GetReason() == "" {
			t.Fatalf("corrections = %v", cs)
		}
		if got := total(t, st, k1, "payments", nov); got.Counted != 15 || got.Billable != 14 {
			t.Errorf("k1's total after the correction = %+v, want 15, 14", got)
		}
		adjs, err := st.Adjustments(ctx, nov)
		if err != nil {
			t.Fatal(err)
		}
		if len(adjs) != 2 || adjs[1].Kind != "correction" || adjs[1].Counted != -7 || !strings.HasPrefix(adjs[1].Source, "reconcile ") {
			t.Errorf("adjustments = %+v", adjs)
		}
		rep, err = r.Run(ctx, nov, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.GetCorrections()) != 0 {
			t.Errorf("the second run corrected %v", rep.GetCorrections())
		}
		ps, err := st.Period(ctx, nov)
		if err != nil {
			t.Fatal(err)
		}
		if ps.Final || !ps.LastReconciled.Equal(t0.Add(time.Hour)) {
			t.Errorf("period state = %+v", ps)
		}
	})
}

// TestCounterMismatch: a node whose own counters say more than its
// contiguous windows add up to is reported, and keeps the period open;
// a spool with a gap is not compared yet.
func TestCounterMismatch(t *testing.T) {
	t.Parallel()
	st := sqliteStore(t)
	ctx := context.Background()
	n1, n2 := newNode(st, "n1"), newNode(st, "n2")
	t0 := at("2026-11-30T23:59:30Z")
	n1.emit(t, t0, row(k1, "payments", 2, 3, 2))
	n1.miscount(nov, 5, 4)
	n1.emit(t, t0.Add(10*time.Second), row(k1, "payments", 2, 1, 1))
	n1.emit(t, t0.Add(30*time.Second), row(k1, "payments", 2, 1, 1)) // December
	n2.emit(t, t0, row(k3, "payments", 2, 1, 1))
	n2.miscount(nov, 1, 1)
	n2.window(t0.Add(10*time.Second), row(k3, "payments", 2, 1, 1)) // not in: no comparison
	n2.emit(t, t0.Add(20*time.Second), row(k3, "payments", 2, 1, 1))

	clock := testclock.New(at("2026-12-01T01:00:00Z"))
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Now: clock.Now})
	rep, err := r.Run(ctx, nov, true)
	if err != nil {
		t.Fatal(err)
	}
	ms := rep.GetCounterMismatches()
	if len(ms) != 1 || ms[0].GetNodeId() != "n1" || ms[0].GetSeq() != 2 || ms[0].GetNodeCounted() != 9 || ms[0].GetWindowsCounted() != 4 ||
		ms[0].GetNodeBillable() != 7 || ms[0].GetWindowsBillable() != 3 {
		t.Errorf("mismatches = %v", ms)
	}
	if rep.GetFinalised() || !blockedHas(rep, "node n1 spool", "own counters through seq 2 say 9 counted, 7 billable", "add up to 4, 3") {
		t.Errorf("finalised %v, blocked %q", rep.GetFinalised(), rep.GetBlocked())
	}
	if !blockedHas(rep, "node n2 spool", "not connected", "2 are missing") {
		t.Errorf("blocked %q: n2's gap is missing", rep.GetBlocked())
	}
}

// TestClose walks a period to its close: too early; blocked by a
// connected node whose window after the end is not in and by a lost node;
// then closed with the lost node written off, a retired node and a node
// that ended before the period never blocking. The lost node's window that
// arrives after is a late window in December's totals, which the
// reconciler keeps, and in December's billing lines as an adjustment.
func TestClose(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		n1, n2, n3, n4, n5 := newNode(st, "n1"), newNode(st, "n2"), newNode(st, "n3"), newNode(st, "n4"), newNode(st, "n5")
		n1.emit(t, at("2026-11-30T23:59:40Z"), row(k1, "payments", 2, 2, 2))
		n1.emit(t, at("2026-11-30T23:59:50Z"), row(k1, "payments", 2, 1, 1))
		n2.emit(t, at("2026-11-02T08:00:00Z"), row(k2, "payments", 2, 4, 4)) // retired: gone, all in
		n3.emit(t, at("2026-11-20T08:00:00Z"), row(k3, "payments", 2, 1, 1))
		lost := n3.window(at("2026-11-20T08:00:10Z"), row(k3, "payments", 2, 6, 5))
		n3.emit(t, at("2026-11-20T08:00:20Z"), row(k3, "payments", 2, 1, 1))
		n4.emit(t, at("2026-10-20T08:00:00Z"), row(k4, "payments", 2, 1, 1)) // ended in October
		n4.window(at("2026-10-20T08:00:10Z"))
		n4.emit(t, at("2026-10-20T08:00:20Z"), row(k4, "payments", 2, 1, 1))
		// n6 lost its spool and runs a new one, with nothing spooled yet.
		n6 := newNode(st, "n6")
		n6.emit(t, at("2026-11-15T08:00:00Z"), row(k2, "payments", 2, 1, 1))
		n6new := newNode(st, "n6")
		n6new.spool = "00000000000006aa"
		relay := newRelay(n1, n5, n6new) // n5 spooled nothing

		clock := testclock.New(at("2026-12-01T00:01:00Z"))
		r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Relay: relay, Now: clock.Now})
		rep, err := r.Run(ctx, nov, true)
		if err != nil {
			t.Fatal(err)
		}
		if rep.GetFinalised() || len(rep.GetBlocked()) != 1 || !blockedHas(rep, "the period ends at 2026-12-01T00:00:00Z", "closes after 2026-12-01T00:02:00Z") {
			t.Fatalf("within the grace: finalised %v, blocked %q", rep.GetFinalised(), rep.GetBlocked())
		}

		clock.Set(at("2026-12-01T00:03:00Z"))
		rep, err = r.Run(ctx, nov, true)
		if err != nil {
			t.Fatal(err)
		}
		if rep.GetFinalised() || len(rep.GetBlocked()) != 2 ||
			!blockedHas(rep, "node n1 spool "+n1.spool, "no window from the period's end on") ||
			!blockedHas(rep, "node n3 spool "+n3.spool+" is not connected and its windows 2 are missing", "--write-off NODE") {
			t.Fatalf("blocked %q", rep.GetBlocked())
		}

		n1.emit(t, at("2026-12-01T00:00:00Z"), row(k1, "payments", 2, 1, 1))
		rep, err = r.Run(ctx, nov, true)
		if err != nil {
			t.Fatal(err)
		}
		if rep.GetFinalised() || len(rep.GetBlocked()) != 1 || !blockedHas(rep, "node n3") {
			t.Fatalf("with n1's December window: blocked %q", rep.GetBlocked())
		}
		if _, err := r.Lines(ctx, nov); !errors.Is(err, reconcile.ErrNotFinal) {
			t.Errorf("Lines of an open period: %v, want ErrNotFinal", err)
		}

		// The operator writes n3 off, for this run.
		rep, err = r.Run(ctx, nov, true, "n3")
		if err != nil {
			t.Fatal(err)
		}
		if !rep.GetFinalised() || len(rep.GetBlocked()) != 1 || !blockedHas(rep, "written off: node n3 spool "+n3.spool, "windows 2 are missing",
			"its own counters say 6 counted, 5 billable of the period are not in") {
			t.Fatalf("with n3 written off: finalised %v, blocked %q", rep.GetFinalised(), rep.GetBlocked())
		}
		if wo := rep.GetWrittenOff(); len(wo) != 1 || wo[0].GetNodeId() != "n3" || wo[0].GetSpoolId() != n3.spool || wo[0].GetFromSeq() != 2 || wo[0].GetToSeq() != 2 {
			t.Errorf("written off %v, want n3's seq 2", wo)
		}
		var wos []store.Adjustment
		adjs, err := st.Adjustments(ctx, nov)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range adjs {
			if a.Kind == "write_off" {
				wos = append(wos, a)
			}
		}
		if len(wos) != 1 || wos[0].Source != "write-off of node n3 spool "+n3.spool+" seqs 2" || wos[0].Counted != 0 ||
			!strings.Contains(wos[0].Reason, "its own counters say 6 counted, 5 billable") || !wos[0].Recorded.Equal(clock.Now()) {
			t.Errorf("November's write-off adjustments = %+v", wos)
		}
		if ps, err := st.Period(ctx, nov); err != nil || !ps.Final || !ps.Finalised.Equal(clock.Now()) {
			t.Fatalf("November's state %+v, %v", ps, err)
		}
		// A final period: nothing more to do, no correction.
		if rep, err := r.Run(ctx, nov, true); err != nil || !rep.GetFinalised() || len(rep.GetBlocked()) != 0 || len(rep.GetCorrections()) != 0 {
			t.Fatalf("a run over a final period: %v, %v", rep, err)
		}

		// n3's lost window turns up: a late window booked into December.
		applied, err := st.Apply(ctx, lost)
		if err != nil || applied.LateInto != dec {
			t.Fatalf("the late window: %+v, %v", applied, err)
		}
		if got := total(t, st, k3, "payments", nov); got.Counted != 2 {
			t.Errorf("November's final total of k3 changed: %+v", got)
		}
		rep, err = r.Run(ctx, dec, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.GetCorrections()) != 0 {
			t.Errorf("December's run corrected the late window: %v", rep.GetCorrections())
		}

		// December closes: n1 has a January window; n2, n3 (now whole)
		// are retired, n4 ended before.
		n1.emit(t, at("2027-01-01T00:00:05Z"), row(k1, "payments", 2, 1, 1))
		clock.Set(at("2027-01-01T00:05:00Z"))
		rep, err = r.Run(ctx, dec, true)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.GetFinalised() || len(rep.GetBlocked()) != 0 {
			t.Fatalf("December: finalised %v, blocked %q", rep.GetFinalised(), rep.GetBlocked())
		}
		lines, err := r.Lines(ctx, dec)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range lines {
			got = append(got, strings.Join([]string{l.GetTenant(), l.GetAppId(), l.GetProduct(), l.GetPlan()}, "/")+
				" "+strings.Join([]string{u(l.GetCounted()), u(l.GetBillable()), u(l.GetBilled()), u(l.GetOvershoot()), u(uint64(l.GetAdjustments()))}, ","))
		}
		want := []string{"acme/app1/payments/gold 1,1,1,0,0", "acme/app2/payments/free 6,5,5,0,5"}
		if !slices.Equal(got, want) {
			t.Errorf("December's lines = %q, want %q", got, want)
		}
	})
}

// TestRelayDown: without the relay's answer a period does not close.
func TestRelayDown(t *testing.T) {
	t.Parallel()
	st := sqliteStore(t)
	n1 := newNode(st, "n1")
	n1.emit(t, at("2026-11-30T23:59:50Z"), row(k1, "payments", 2, 1, 1))
	n1.emit(t, at("2026-12-01T00:00:00Z"), row(k1, "payments", 2, 1, 1))
	relay := newRelay(n1)
	relay.err = errors.New("connection refused")
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Relay: relay, Now: testclock.New(at("2026-12-01T01:00:00Z")).Now})
	rep, err := r.Run(context.Background(), nov, true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.GetFinalised() || len(rep.GetBlocked()) != 1 || !blockedHas(rep, "relay did not answer", "connection refused") {
		t.Fatalf("finalised %v, blocked %q", rep.GetFinalised(), rep.GetBlocked())
	}
	relay.err = nil
	if rep, err := r.Run(context.Background(), nov, true); err != nil || !rep.GetFinalised() {
		t.Fatalf("with the relay back: %v, %v", rep, err)
	}
}

// TestRunRefusesBadPeriod: a period is a month.
func TestRunRefusesBadPeriod(t *testing.T) {
	t.Parallel()
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: sqliteStore(t)})
	for _, p := range []string{"", "2026-13", "2026-1", "2026-11-01", "nov"} {
		if _, err := r.Run(context.Background(), p, false); err == nil {
			t.Errorf("Run(%q) succeeded", p)
		}
	}
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

// TestManyGaps: a gap longer than the store lists is asked for whole, and
// a spool with more than 64 gaps has the tail of them asked as one range.
func TestManyGaps(t *testing.T) {
	t.Parallel()
	st := sqliteStore(t)
	n1, n2 := newNode(st, "n1"), newNode(st, "n2")
	t0 := at("2026-11-10T10:00:00Z")
	n1.emit(t, t0, row(k1, "payments", 2, 1, 1))
	for i := 1; i < 1200; i++ {
		n1.window(t0.Add(time.Duration(i)*10*time.Second), row(k1, "payments", 2, 1, 1))
	}
	n1.emit(t, t0.Add(1200*10*time.Second), row(k1, "payments", 2, 1, 1))
	for i := range 141 { // 2, 4, ... 140 dropped: 70 gaps
		w := n2.window(t0.Add(time.Duration(i)*10*time.Second), row(k2, "payments", 2, 1, 1))
		if i%2 == 0 {
			n2.ship(t, w)
		}
	}
	relay := newRelay(n1, n2)
	relay.record = true // 1,200 re-sent windows would be slow under -race
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Relay: relay, Now: testclock.New(t0.Add(time.Hour)).Now})
	rep, err := r.Run(context.Background(), nov, false)
	if err != nil {
		t.Fatal(err)
	}
	got := gaps(rep)
	if len(got) != 65 || got[0] != "n1/"+n1.spool+" 2-1201 requested" ||
		got[1] != "n2/"+n2.spool+" 2-2 requested" || got[63] != "n2/"+n2.spool+" 126-126 requested" ||
		got[64] != "n2/"+n2.spool+" 128-140 requested" {
		t.Errorf("%d gaps: %q", len(got), got)
	}
	if calls := relay.takeCalls(); len(calls) != 65 || calls[0] != "n1/"+n1.spool+" 2-1201" || calls[64] != "n2/"+n2.spool+" 128-140" {
		t.Errorf("%d re-sends asked: %q", len(calls), calls)
	}
}

// TestRunWhileApplying: windows arriving while the reconciler reads never
// make it write a correction (it reads the totals before and after the
// recount and leaves a total that moved to the next run).
func TestRunWhileApplying(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		n1 := newNode(st, "n1")
		t0 := at("2026-11-10T10:00:00Z")
		const windows = 150
		done := make(chan error, 1)
		go func() {
			for i := range windows {
				w := n1.window(t0.Add(time.Duration(i)*10*time.Second),
					row(k1, "payments", 2, 2, 1), row(k2, "payments", 2, 1, 1), row(k3, "search", 5, 1, 0))
				if _, err := st.Apply(ctx, w); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Now: testclock.New(t0.Add(time.Hour)).Now})
		runs := 0
		for finished := false; !finished; runs++ {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				finished = true
			default:
			}
			rep, err := r.Run(ctx, nov, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.GetCorrections()) != 0 {
				t.Fatalf("run %d corrected %v", runs, rep.GetCorrections())
			}
		}
		if got := total(t, st, k1, "payments", nov); got.Counted != 2*windows || got.Billable != windows {
			t.Errorf("k1's total = %+v", got)
		}
		t.Logf("%d runs while %d windows arrived", runs, windows)
	})
}

// TestWaitsForReady: a period does not close while Options.Ready says
// the service has not taken in what was waiting for it; the report says
// why with Ready's text.
func TestWaitsForReady(t *testing.T) {
	t.Parallel()
	st := sqliteStore(t)
	n1 := newNode(st, "n1")
	n1.emit(t, at("2026-11-30T23:59:50Z"), row(k1, "payments", 2, 1, 1))
	n1.emit(t, at("2026-12-01T00:00:00Z"), row(k1, "payments", 2, 1, 1))
	var ready error = errors.New("consume: 3 messages of the usage topic are not applied yet")
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Now: testclock.New(at("2026-12-01T01:00:00Z")).Now,
		Ready: func(context.Context) error { return ready }})
	rep, err := r.Run(context.Background(), nov, true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.GetFinalised() || len(rep.GetBlocked()) != 1 || rep.GetBlocked()[0] != ready.Error() {
		t.Fatalf("not ready: finalised %v, blocked %q", rep.GetFinalised(), rep.GetBlocked())
	}
	ready = nil
	if rep, err := r.Run(context.Background(), nov, true); err != nil || !rep.GetFinalised() || len(rep.GetBlocked()) != 0 {
		t.Fatalf("ready: %v, %v", rep, err)
	}
}

// TestFreshStart: a service that knows of no spool at all (an empty
// store, nothing on the relay) does not close a period within Grace of
// its start, and does after.
func TestFreshStart(t *testing.T) {
	t.Parallel()
	for _, relay := range []*fakeRelay{nil, newRelay()} {
		st := sqliteStore(t)
		clock := testclock.New(at("2026-12-01T01:00:00Z"))
		opts := reconcile.Options{Logger: quiet, Store: st, Now: clock.Now}
		if relay != nil {
			opts.Relay = relay
		}
		r := reconcile.New(opts)
		rep, err := r.Run(context.Background(), nov, true)
		if err != nil {
			t.Fatal(err)
		}
		if rep.GetFinalised() || len(rep.GetBlocked()) != 1 || !blockedHas(rep, "no node spool is known yet", "closes a period with none from 2026-12-01T01:02:00Z") {
			t.Fatalf("relay %v, at the start: finalised %v, blocked %q", relay != nil, rep.GetFinalised(), rep.GetBlocked())
		}
		clock.Add(2*time.Minute + time.Millisecond)
		if rep, err := r.Run(context.Background(), nov, true); err != nil || !rep.GetFinalised() {
			t.Fatalf("relay %v, after the grace: %v, %v", relay != nil, rep, err)
		}
	}
	// A spool known (here a node with nothing spooled) lets it close.
	st := sqliteStore(t)
	n1 := newNode(st, "n1")
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Relay: newRelay(n1), Now: testclock.New(at("2026-12-01T01:00:00Z")).Now})
	if rep, err := r.Run(context.Background(), nov, true); err != nil || !rep.GetFinalised() {
		t.Fatalf("with a spool on the relay: %v, %v", rep, err)
	}
}

// TestRacingReconcilers: two reconcilers on one PostgreSQL store (two
// quota service processes) run at once over a total that drifted: it is
// corrected once, never twice.
func TestRacingReconcilers(t *testing.T) {
	t.Parallel()
	st := openStore(t, pgtest.Start(t).NewDatabase(t))
	ctx := context.Background()
	n1 := newNode(st, "n1")
	t0 := at("2026-11-10T10:00:00Z")
	clock := testclock.New(t0.Add(time.Hour))
	a := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Now: clock.Now})
	b := reconcile.New(reconcile.Options{Logger: quiet, Store: st, Now: clock.Now})
	key := store.Key{Subject: store.Subject(k1), Product: "payments", Period: nov}
	var want uint64
	for round := range 20 {
		n1.emit(t, t0.Add(time.Duration(round)*10*time.Second), row(k1, "payments", 2, 10, 10))
		want += 10
		edit := store.Correction{Key: key, Counted: 7, Billable: 7, ExpectCounted: want, ExpectBillable: want, Reason: "a bad hand edit"}
		if applied, err := st.Correct(ctx, nov, []store.Correction{edit}, "test"); err != nil || len(applied) != 1 {
			t.Fatalf("round %d: the hand edit: %v, %v", round, applied, err)
		}
		var corrections [2]int
		var wg sync.WaitGroup
		for i, r := range []*reconcile.Reconciler{a, b} {
			wg.Go(func() {
				rep, err := r.Run(ctx, nov, false)
				if err != nil {
					t.Errorf("round %d: reconciler %d: %v", round, i, err)
					return
				}
				corrections[i] = len(rep.GetCorrections())
			})
		}
		wg.Wait()
		if got := total(t, st, k1, "payments", nov); got.Counted != want || got.Billable != want {
			t.Fatalf("round %d: total %d, %d after both runs, want %d (corrections reported %v)", round, got.Counted, got.Billable, want, corrections)
		}
		if corrections[0]+corrections[1] != 1 {
			t.Fatalf("round %d: the reconcilers reported %v corrections, want one in all", round, corrections)
		}
	}
}
