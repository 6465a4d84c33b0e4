// Package storetest is the conformance suite of quota/store: the same
// tests against every database the store runs on.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/quota/store"
)

// Opener opens the store under test. Each call of one Opener opens the
// same database (a second process, as far as the store can tell); the
// suite closes what it opens. It may be called from several goroutines.
type Opener func(ctx context.Context) (*store.Store, error)

// Run runs every test of the suite; newDB returns an Opener of a new,
// empty database for each test.
func Run(t *testing.T, newDB func(t *testing.T) Opener) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Opener)
	}{
		{"Empty", testEmpty},
		{"Apply", testApply},
		{"Duplicate", testDuplicate},
		{"MultiPart", testMultiPart},
		{"Gaps", testGaps},
		{"Invalid", testInvalid},
		{"InvalidParts", testInvalidParts},
		{"LateWindows", testLateWindows},
		{"FinalBetweenParts", testFinalBetweenParts},
		{"Corrections", testCorrections},
		{"StaleCorrections", testStaleCorrections},
		{"RacingCorrections", testRacingCorrections},
		{"WriteOffs", testWriteOffs},
		{"Recount", testRecount},
		{"ConcurrentApply", testConcurrentApply},
		{"MarkOutbox", testMarkOutbox},
		{"Advance", testAdvance},
		{"SpoolPeriods", testSpoolPeriods},
		{"Periods", testPeriods},
		{"TotalsPaging", testTotalsPaging},
		{"Reopen", testReopen},
		{"Canceled", testCanceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newDB(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func open(t *testing.T, o Opener) *store.Store {
	t.Helper()
	s, err := o(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Spool ids of the suite's nodes.
const (
	spoolA = "aaaaaaaaaaaaaaaa"
	spoolB = "bbbbbbbbbbbbbbbb"
)

var (
	key1 = &quotav1.Caller{KeyId: "k1", AppId: "app1", Tenant: "t1", Plan: "pro"}
	key2 = &quotav1.Caller{KeyId: "k2", AppId: "app2", Tenant: "t2", Plan: "free"}
	app3 = &quotav1.Caller{AppId: "app3", Tenant: "t1", Plan: "pro"}
	anon = &quotav1.Caller{}
)

// row counts n calls of c to product with status class class, billable
// when forwarded.
func row(c *quotav1.Caller, product string, class uint32, n uint64, forwarded bool) *quotav1.UsageRow {
	r := &quotav1.UsageRow{Caller: c, Product: product, RouteId: "r-" + product, StatusClass: class, Counted: n}
	if forwarded {
		r.Billable = n
	}
	return r
}

// periodStart is the start of period.
func periodStart(period string) time.Time {
	t, err := time.Parse("2006-01", period)
	if err != nil {
		panic(err)
	}
	return t
}

// window is seq of node's spool: one part, in period, 10 s long at
// seq*10 s into the period, its sums those of rows.
func window(node, spool string, seq uint64, period string, rows ...*quotav1.UsageRow) *quotav1.UsageWindow {
	start := periodStart(period).Add(time.Duration(seq) * 10 * time.Second)
	w := &quotav1.UsageWindow{
		NodeId: node, SpoolId: spool, Seq: seq, Parts: 1, Region: "eu",
		Start: timestamppb.New(start), End: timestamppb.New(start.Add(10 * time.Second)),
		Period: period, Rows: rows,
	}
	for _, r := range rows {
		w.Counted += r.GetCounted()
		w.Billable += r.GetBillable()
	}
	w.PeriodCounted, w.PeriodBillable = w.Counted, w.Billable
	return w
}

// split returns w's parts: each with the window's fields and the rows of
// its share.
func split(w *quotav1.UsageWindow, shares ...[]*quotav1.UsageRow) []*quotav1.UsageWindow {
	var out []*quotav1.UsageWindow
	for i, rows := range shares {
		p := clone(w)
		p.Part, p.Parts, p.Rows = uint32(i), uint32(len(shares)), rows
		out = append(out, p)
	}
	return out
}

func clone(w *quotav1.UsageWindow) *quotav1.UsageWindow {
	return proto.Clone(w).(*quotav1.UsageWindow)
}

func mustApply(t *testing.T, s *store.Store, w *quotav1.UsageWindow) store.Applied {
	t.Helper()
	a, err := s.Apply(ctx(t), w)
	if err != nil {
		t.Fatalf("Apply(%s/%d part %d): %v", w.GetNodeId(), w.GetSeq(), w.GetPart(), err)
	}
	return a
}

func total(t *testing.T, s *store.Store, subject, product, period string) store.Total {
	t.Helper()
	tot, err := s.Total(ctx(t), store.Key{Subject: subject, Product: product, Period: period})
	if err != nil {
		t.Fatalf("Total(%s, %s, %s): %v", subject, product, period, err)
	}
	return tot
}

// allTotals returns every total of period (all periods for "").
func allTotals(t *testing.T, s *store.Store, period string) []store.Total {
	t.Helper()
	ts, more, err := s.Totals(ctx(t), store.TotalsFilter{Period: period, Limit: 10000})
	if err != nil || more {
		t.Fatalf("Totals(%q) = %d totals, more %v, %v", period, len(ts), more, err)
	}
	return ts
}

// counts maps totals to their keys' counts.
func counts(ts []store.Total) map[store.Key]store.Counts {
	out := make(map[store.Key]store.Counts, len(ts))
	for _, t := range ts {
		out[t.Key] = t.Counts
	}
	return out
}

func sequences(t *testing.T, s *store.Store, limit int) []store.Sequence {
	t.Helper()
	qs, err := s.Sequences(ctx(t), limit)
	if err != nil {
		t.Fatalf("Sequences: %v", err)
	}
	return qs
}

// wantSequence checks the one sequence of node's spool.
func wantSequence(t *testing.T, s *store.Store, node, spool string, contiguous, highest uint64, missing ...uint64) {
	t.Helper()
	for _, q := range sequences(t, s, 0) {
		if q.NodeID != node || q.SpoolID != spool {
			continue
		}
		if q.Contiguous != contiguous || q.Highest != highest || !cmp.Equal(q.Missing, missing, cmp.Comparer(func(a, b []uint64) bool {
			return len(a) == len(b) && (len(a) == 0 || cmp.Equal(a, b))
		})) {
			t.Errorf("sequence of %s/%s = contiguous %d, highest %d, missing %v; want %d, %d, %v",
				node, spool, q.Contiguous, q.Highest, q.Missing, contiguous, highest, missing)
		}
		return
	}
	t.Errorf("no sequence of %s/%s", node, spool)
}

func wantSeq(t *testing.T, s *store.Store, want uint64) {
	t.Helper()
	if seq, err := s.Seq(ctx(t)); err != nil || seq != want {
		t.Errorf("Seq() = %d, %v; want %d", seq, err, want)
	}
}

func mark(node, spool string, seq uint64) *configv1.UsageMark {
	return &configv1.UsageMark{NodeId: node, SpoolId: spool, Seq: seq}
}

func wantMark(t *testing.T, a store.Applied, want *configv1.UsageMark) {
	t.Helper()
	if diff := cmp.Diff(want, a.Mark, protocmp.Transform()); diff != "" {
		t.Errorf("Applied.Mark (-want +got):\n%s", diff)
	}
}

func testEmpty(t *testing.T, o Opener) {
	s := open(t, o)
	wantSeq(t, s, 0)
	if es, err := s.Changes(ctx(t), 0, 0); err != nil || len(es) != 0 {
		t.Errorf("Changes(0) of an empty store = %v, %v", es, err)
	}
	if qs := sequences(t, s, 0); len(qs) != 0 {
		t.Errorf("Sequences of an empty store = %v", qs)
	}
	if ts := allTotals(t, s, ""); len(ts) != 0 {
		t.Errorf("Totals of an empty store = %v", ts)
	}
	if _, err := s.Total(ctx(t), store.Key{Subject: "key:k1", Period: "2026-11"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Total of an empty store: %v, want ErrNotFound", err)
	}
	if rc, err := s.Recount(ctx(t), "2026-11"); err != nil || len(rc) != 0 {
		t.Errorf("Recount of an empty store = %v, %v", rc, err)
	}
	if sp, err := s.SpoolPeriods(ctx(t), "2026-11"); err != nil || len(sp) != 0 {
		t.Errorf("SpoolPeriods of an empty store = %v, %v", sp, err)
	}
	if as, err := s.Adjustments(ctx(t), "2026-11"); err != nil || len(as) != 0 {
		t.Errorf("Adjustments of an empty store = %v, %v", as, err)
	}
	if st, err := s.Period(ctx(t), "2026-11"); err != nil || st != (store.PeriodState{Period: "2026-11"}) {
		t.Errorf("Period of an empty store = %+v, %v", st, err)
	}
	if s.Driver() != "postgres" && s.Driver() != "sqlite" {
		t.Errorf("Driver() = %q", s.Driver())
	}
}

func testApply(t *testing.T, o Opener) {
	s := open(t, o)
	before := time.Now().Add(-time.Second)
	w := window("n1", spoolA, 1, "2026-11",
		row(key1, "orders", 2, 10, true),
		row(key1, "orders", 4, 3, false),
		row(key1, "orders", 5, 2, true),
		row(key1, "billing", 2, 1, true),
		row(key2, "orders", 2, 7, true),
		row(app3, "orders", 0, 1, false),
		row(anon, "", 4, 5, false),
	)
	// The same key and product on another route: one total.
	r := row(key1, "orders", 2, 4, true)
	r.RouteId = "other"
	w.Rows = append(w.Rows, r)
	w.Counted += 4
	w.Billable += 4
	a := mustApply(t, s, w)
	if a.Duplicate || a.LateInto != "" {
		t.Errorf("Apply = %+v, want neither duplicate nor late", a)
	}
	wantMark(t, a, mark("n1", spoolA, 1))
	got := total(t, s, "key:k1", "orders", "2026-11")
	want := store.Counts{Counted: 19, Billable: 16, ByClass: [6]uint64{2: 14, 4: 3, 5: 2}}
	if got.Counts != want || got.Adjusted != 0 {
		t.Errorf("Total(key:k1 orders) = %+v, adjusted %d; want %+v, 0", got.Counts, got.Adjusted, want)
	}
	if diff := cmp.Diff(key1, got.Caller, protocmp.Transform()); diff != "" {
		t.Errorf("Total(key:k1 orders).Caller (-want +got):\n%s", diff)
	}
	if got.Updated.Before(before) || got.Updated.After(time.Now()) || got.Updated.Location() != time.UTC {
		t.Errorf("Total(key:k1 orders).Updated = %v", got.Updated)
	}
	keys := func(ts []store.Total) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Subject+" "+t.Product)
		}
		return out
	}
	wantKeys := []string{"anonymous ", "app:app3 orders", "key:k1 billing", "key:k1 orders", "key:k2 orders"}
	if got := keys(allTotals(t, s, "2026-11")); !cmp.Equal(got, wantKeys) {
		t.Errorf("Totals(2026-11) = %q, want %q", got, wantKeys)
	}
	if ts := allTotals(t, s, "2026-12"); len(ts) != 0 {
		t.Errorf("Totals(2026-12) = %v, want none", keys(ts))
	}
	if got := total(t, s, "app:app3", "orders", "2026-11").Counts; got != (store.Counts{Counted: 1, ByClass: [6]uint64{0: 1}}) {
		t.Errorf("Total(app:app3 orders) = %+v", got)
	}
	wantSequence(t, s, "n1", spoolA, 1, 1)
	q := sequences(t, s, 0)[0]
	if q.Region != "eu" || !q.LastWindow.Equal(w.GetStart().AsTime()) {
		t.Errorf("sequence region %q, last window %v; want eu, %v", q.Region, q.LastWindow, w.GetStart().AsTime())
	}
	// The next window: the totals add up, the mark rises.
	a = mustApply(t, s, window("n1", spoolA, 2, "2026-11", row(key1, "orders", 2, 5, true)))
	wantMark(t, a, mark("n1", spoolA, 2))
	if got := total(t, s, "key:k1", "orders", "2026-11").Counts; got.Counted != 24 || got.Billable != 21 || got.ByClass[2] != 19 {
		t.Errorf("Total(key:k1 orders) after a second window = %+v", got)
	}
	// An empty window moves the mark too.
	wantMark(t, mustApply(t, s, window("n1", spoolA, 3, "2026-11")), mark("n1", spoolA, 3))
	wantSeq(t, s, 3)
}

func testDuplicate(t *testing.T, o Opener) {
	s := open(t, o)
	w := window("n1", spoolA, 1, "2026-11", row(key1, "orders", 2, 10, true))
	mustApply(t, s, w)
	for range 3 {
		a := mustApply(t, s, clone(w))
		if !a.Duplicate || a.Mark != nil || a.LateInto != "" {
			t.Errorf("Apply of a duplicate = %+v, want Duplicate only", a)
		}
	}
	// A duplicate whose content differs is a duplicate still: the part is
	// identified by (node, spool, seq, part).
	other := window("n1", spoolA, 1, "2026-11", row(key2, "orders", 2, 99, true))
	if a := mustApply(t, s, other); !a.Duplicate {
		t.Errorf("Apply of a different part 0 of seq 1 = %+v, want Duplicate", a)
	}
	if got := total(t, s, "key:k1", "orders", "2026-11").Counts.Counted; got != 10 {
		t.Errorf("counted after duplicates = %d, want 10", got)
	}
	if _, err := s.Total(ctx(t), store.Key{Subject: "key:k2", Product: "orders", Period: "2026-11"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the duplicate's key has a total: %v", err)
	}
	wantSeq(t, s, 1)
	// Another spool of the node, or another node, is not a duplicate.
	if a := mustApply(t, s, window("n1", spoolB, 1, "2026-11", row(key1, "orders", 2, 1, true))); a.Duplicate {
		t.Error("seq 1 of another spool taken for a duplicate")
	}
	if a := mustApply(t, s, window("n2", spoolA, 1, "2026-11", row(key1, "orders", 2, 1, true))); a.Duplicate {
		t.Error("seq 1 of another node taken for a duplicate")
	}
	if got := total(t, s, "key:k1", "orders", "2026-11").Counts.Counted; got != 12 {
		t.Errorf("counted = %d, want 12", got)
	}
	rc, err := s.Recount(ctx(t), "2026-11")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(counts(allTotals(t, s, "2026-11")), rc); diff != "" {
		t.Errorf("Recount after duplicates (-totals +recount):\n%s", diff)
	}
}

func testMultiPart(t *testing.T, o Opener) {
	s := open(t, o)
	rows := []*quotav1.UsageRow{
		row(key1, "orders", 2, 10, true), row(key1, "orders", 5, 2, true),
		row(key2, "orders", 2, 7, true), row(key1, "orders", 4, 1, false),
	}
	w := window("n1", spoolA, 1, "2026-11", rows...)
	parts := split(w, rows[:1], rows[1:3], rows[3:])
	if a := mustApply(t, s, parts[2]); a.Mark != nil {
		t.Errorf("the last part alone moved the mark: %+v", a.Mark)
	}
	wantSequence(t, s, "n1", spoolA, 0, 1, 1)
	mustApply(t, s, parts[0])
	if a := mustApply(t, s, parts[0]); !a.Duplicate {
		t.Error("part 0 again is not a duplicate")
	}
	// The next window, whole, cannot move the mark past a window missing
	// a part.
	if a := mustApply(t, s, window("n1", spoolA, 2, "2026-11", row(key1, "orders", 2, 1, true))); a.Mark != nil {
		t.Errorf("window 2 moved the mark past window 1, a part short: %+v", a.Mark)
	}
	wantSequence(t, s, "n1", spoolA, 0, 2, 1)
	// Whole windows count in SpoolPeriods; window 1 is not yet.
	sp, err := s.SpoolPeriods(ctx(t), "2026-11")
	if err != nil || len(sp) != 1 || sp[0].FirstSeq != 2 {
		t.Errorf("SpoolPeriods with window 1 a part short = %+v, %v; want window 2 only", sp, err)
	}
	// The counts of the parts in are in the totals already.
	if got := total(t, s, "key:k1", "orders", "2026-11").Counts.Counted; got != 12 {
		t.Errorf("counted before the last part = %d, want 12", got)
	}
	a := mustApply(t, s, parts[1])
	wantMark(t, a, mark("n1", spoolA, 2))
	wantSequence(t, s, "n1", spoolA, 2, 2)
	got := total(t, s, "key:k1", "orders", "2026-11").Counts
	if want := (store.Counts{Counted: 14, Billable: 13, ByClass: [6]uint64{2: 11, 4: 1, 5: 2}}); got != want {
		t.Errorf("Total(key:k1 orders) = %+v, want %+v", got, want)
	}
	wantSeq(t, s, 1)
}

func testGaps(t *testing.T, o Opener) {
	s := open(t, o)
	apply := func(seq uint64) store.Applied {
		return mustApply(t, s, window("n1", spoolA, seq, "2026-11", row(key1, "orders", 2, seq, true)))
	}
	for _, seq := range []uint64{1, 2, 4, 6, 9} {
		apply(seq)
	}
	wantSequence(t, s, "n1", spoolA, 2, 9, 3, 5, 7, 8)
	if q := sequences(t, s, 3)[0]; !cmp.Equal(q.Missing, []uint64{3, 5, 7}) {
		t.Errorf("Sequences(3).Missing = %v, want [3 5 7]", q.Missing)
	}
	if q := sequences(t, s, 1)[0]; !cmp.Equal(q.Missing, []uint64{3}) {
		t.Errorf("Sequences(1).Missing = %v, want [3]", q.Missing)
	}
	// A part of window 10 in: 10 is missing too.
	w10 := window("n1", spoolA, 10, "2026-11", row(key1, "orders", 2, 1, true), row(key2, "orders", 2, 1, true))
	mustApply(t, s, split(w10, w10.Rows[:1], w10.Rows[1:])[0])
	wantSequence(t, s, "n1", spoolA, 2, 10, 3, 5, 7, 8, 10)
	wantMark(t, apply(3), mark("n1", spoolA, 4))
	wantSequence(t, s, "n1", spoolA, 4, 10, 5, 7, 8, 10)
	wantMark(t, apply(5), mark("n1", spoolA, 6))
	if a := apply(8); a.Mark != nil {
		t.Errorf("window 8 moved the mark to %v past missing 7", a.Mark)
	}
	wantMark(t, apply(7), mark("n1", spoolA, 9))
	wantSequence(t, s, "n1", spoolA, 9, 10, 10)
	// Another spool's sequence is its own.
	mustApply(t, s, window("n1", spoolB, 2, "2026-11"))
	wantSequence(t, s, "n1", spoolB, 0, 2, 1)
	var n uint64
	for seq := uint64(1); seq <= 9; seq++ {
		n += seq
	}
	if got := total(t, s, "key:k1", "orders", "2026-11").Counts.Counted; got != n+1 {
		t.Errorf("counted = %d, want %d", got, n+1)
	}
}

func testInvalid(t *testing.T, o Opener) {
	s := open(t, o)
	valid := func() *quotav1.UsageWindow {
		return window("n1", spoolA, 1, "2026-11", row(key1, "orders", 2, 10, true), row(key2, "orders", 4, 3, false))
	}
	for _, tc := range []struct {
		name   string
		modify func(w *quotav1.UsageWindow)
	}{
		{"no node", func(w *quotav1.UsageWindow) { w.NodeId = "" }},
		{"no spool", func(w *quotav1.UsageWindow) { w.SpoolId = "" }},
		{"seq 0", func(w *quotav1.UsageWindow) { w.Seq = 0 }},
		{"seq beyond int64", func(w *quotav1.UsageWindow) { w.Seq = 1 << 63 }},
		{"no parts", func(w *quotav1.UsageWindow) { w.Parts = 0 }},
		{"part out of range", func(w *quotav1.UsageWindow) { w.Part = 1 }},
		{"no period", func(w *quotav1.UsageWindow) { w.Period = "" }},
		{"period no month", func(w *quotav1.UsageWindow) { w.Period = "2026-13" }},
		{"period not canonical", func(w *quotav1.UsageWindow) { w.Period = "2026-1" }},
		{"no start", func(w *quotav1.UsageWindow) { w.Start = nil }},
		{"no end", func(w *quotav1.UsageWindow) { w.End = nil }},
		{"end before start", func(w *quotav1.UsageWindow) { w.End = timestamppb.New(w.Start.AsTime().Add(-time.Second)) }},
		{"status class 6", func(w *quotav1.UsageWindow) { w.Rows[1].StatusClass = 6 }},
		{"row billable above counted", func(w *quotav1.UsageWindow) { w.Rows[1].Billable = 4; w.Billable += 4 }},
		{"window billable above counted", func(w *quotav1.UsageWindow) { w.Billable = w.Counted + 1 }},
		{"rows above counted", func(w *quotav1.UsageWindow) { w.Counted-- }},
		{"rows below counted", func(w *quotav1.UsageWindow) { w.Counted++ }},
		{"rows above billable", func(w *quotav1.UsageWindow) { w.Billable-- }},
		{"rows below billable", func(w *quotav1.UsageWindow) { w.Billable++ }},
		{"huge counts", func(w *quotav1.UsageWindow) { w.Rows[0].Counted, w.Counted = 1<<62, 1<<62+3 }},
		{"NUL in the key id", func(w *quotav1.UsageWindow) { w.Rows[0].Caller = &quotav1.Caller{KeyId: "k\x001"} }},
		{"NUL in the tenant", func(w *quotav1.UsageWindow) { w.Rows[1].Caller = &quotav1.Caller{KeyId: "k2", Tenant: "acme\x00"} }},
		{"NUL in the route", func(w *quotav1.UsageWindow) { w.Rows[1].RouteId = "\x00" }},
		{"NUL in the product", func(w *quotav1.UsageWindow) { w.Rows[0].Product = "or\x00ders" }},
		{"NUL in the node", func(w *quotav1.UsageWindow) { w.NodeId = "n\x001" }},
		{"invalid UTF-8 in the app", func(w *quotav1.UsageWindow) { w.Rows[0].Caller = &quotav1.Caller{AppId: "app\xff"} }},
		{"rows overflow", func(w *quotav1.UsageWindow) {
			w.Rows[0].Counted, w.Rows[1].Counted = 1<<63, 1<<63+13 // they wrap around to 13
		}},
	} {
		w := valid()
		tc.modify(w)
		if a, err := s.Apply(ctx(t), w); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Apply of a window with %s = %+v, %v; want ErrInvalid", tc.name, a, err)
		}
	}
	// Nothing of them was written: the valid window is no duplicate.
	if ts := allTotals(t, s, ""); len(ts) != 0 {
		t.Errorf("malformed windows made totals: %v", ts)
	}
	if qs := sequences(t, s, 0); len(qs) != 0 {
		t.Errorf("malformed windows made sequences: %v", qs)
	}
	wantSeq(t, s, 0)
	if a := mustApply(t, s, valid()); a.Duplicate {
		t.Error("the valid window after refused ones is a duplicate")
	}
	if got := total(t, s, "key:k1", "orders", "2026-11").Counts.Counted; got != 10 {
		t.Errorf("counted = %d, want 10", got)
	}
}

func testInvalidParts(t *testing.T, o Opener) {
	s := open(t, o)
	rows := []*quotav1.UsageRow{row(key1, "orders", 2, 10, true), row(key2, "orders", 4, 3, false), row(key1, "orders", 2, 5, true)}
	w := window("n1", spoolA, 1, "2026-11", rows...)
	parts := split(w, rows[:1], rows[1:2], rows[2:])
	mustApply(t, s, parts[0])
	for _, tc := range []struct {
		name string
		part *quotav1.UsageWindow
	}{
		{"other parts", func() *quotav1.UsageWindow { p := clone(parts[1]); p.Parts = 4; return p }()},
		{"other period", func() *quotav1.UsageWindow { p := clone(parts[1]); p.Period = "2026-12"; return p }()},
		{"other start", func() *quotav1.UsageWindow {
			p := clone(parts[1])
			p.Start = timestamppb.New(p.Start.AsTime().Add(time.Second))
			return p
		}()},
		{"other counted", func() *quotav1.UsageWindow { p := clone(parts[1]); p.Counted++; return p }()},
		{"other period counters", func() *quotav1.UsageWindow { p := clone(parts[1]); p.PeriodCounted++; return p }()},
		{"rows beyond the window's", func() *quotav1.UsageWindow {
			p := clone(parts[1])
			p.Rows = []*quotav1.UsageRow{row(key2, "orders", 4, 9, false)} // 10 + 9 > 18
			return p
		}()},
	} {
		if a, err := s.Apply(ctx(t), tc.part); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Apply of a part with %s = %+v, %v; want ErrInvalid", tc.name, a, err)
		}
	}
	mustApply(t, s, parts[1])
	// The last part falls short of the window's counts: refused, and the
	// window stays a part short.
	short := clone(parts[2])
	short.Rows = []*quotav1.UsageRow{row(key1, "orders", 2, 4, true)}
	if a, err := s.Apply(ctx(t), short); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Apply of a last part short of the window = %+v, %v; want ErrInvalid", a, err)
	}
	wantSequence(t, s, "n1", spoolA, 0, 1, 1)
	if got := total(t, s, "key:k1", "orders", "2026-11").Counts.Counted; got != 10 {
		t.Errorf("counted after refused parts = %d, want 10", got)
	}
	if got := total(t, s, "key:k2", "orders", "2026-11").Counts.Counted; got != 3 {
		t.Errorf("key2 counted after refused parts = %d, want 3", got)
	}
	wantMark(t, mustApply(t, s, parts[2]), mark("n1", spoolA, 1))
	if got := total(t, s, "key:k1", "orders", "2026-11").Counts.Counted; got != 15 {
		t.Errorf("counted = %d, want 15", got)
	}
}

func testLateWindows(t *testing.T, o Opener) {
	s := open(t, o)
	mustApply(t, s, window("n1", spoolA, 1, "2026-11", row(key1, "orders", 2, 10, true)))
	mustApply(t, s, window("n1", spoolA, 2, "2026-12", row(key1, "orders", 2, 1, true)))
	fin := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	if err := s.Finalise(ctx(t), "2026-11", fin); err != nil {
		t.Fatal(err)
	}
	if err := s.Finalise(ctx(t), "2026-11", fin); !errors.Is(err, store.ErrFinal) {
		t.Errorf("Finalise of a final period: %v, want ErrFinal", err)
	}
	nov := allTotals(t, s, "2026-11")
	// A late window of 2026-11, on another spool: booked into 2026-12.
	late := window("n2", spoolB, 7, "2026-11", row(key1, "orders", 2, 4, true), row(key1, "orders", 5, 2, false), row(key2, "orders", 2, 3, true))
	a := mustApply(t, s, late)
	if a.LateInto != "2026-12" || a.Duplicate {
		t.Errorf("Apply of a late window = %+v, want LateInto 2026-12", a)
	}
	if a := mustApply(t, s, late); !a.Duplicate {
		t.Errorf("the late window again = %+v, want Duplicate", a)
	}
	if diff := cmp.Diff(nov, allTotals(t, s, "2026-11"), protocmp.Transform()); diff != "" {
		t.Errorf("a late window changed the final period's totals (-before +after):\n%s", diff)
	}
	dec := total(t, s, "key:k1", "orders", "2026-12")
	if want := (store.Counts{Counted: 7, Billable: 5, ByClass: [6]uint64{2: 5, 5: 2}}); dec.Counts != want || dec.Adjusted != 6 {
		t.Errorf("Total(key:k1 orders 2026-12) = %+v, adjusted %d; want %+v, 6", dec.Counts, dec.Adjusted, want)
	}
	adj, err := s.Adjustments(ctx(t), "2026-12")
	if err != nil {
		t.Fatal(err)
	}
	if len(adj) != 2 {
		t.Fatalf("Adjustments(2026-12) = %+v, want two late_window", adj)
	}
	for _, a := range adj {
		if a.Kind != "late_window" || a.Period != "2026-12" || !strings.Contains(a.Source, "n2/"+spoolB+"/7") || !strings.Contains(a.Source, "2026-11") {
			t.Errorf("adjustment %+v, want a late_window of n2/%s/7 of 2026-11", a, spoolB)
		}
	}
	if adj[0].Subject != "key:k1" || adj[0].Counted != 6 || adj[0].Billable != 4 || adj[1].Subject != "key:k2" || adj[1].Counted != 3 {
		t.Errorf("Adjustments(2026-12) = %+v", adj)
	}
	if adj, _ := s.Adjustments(ctx(t), "2026-11"); len(adj) != 0 {
		t.Errorf("Adjustments(2026-11) = %+v, want none", adj)
	}
	// The late window is a window of 2026-11 for its spool, and what
	// 2026-12's totals must equal.
	if sp, err := s.SpoolPeriods(ctx(t), "2026-11"); err != nil || len(sp) != 2 || sp[1].NodeID != "n2" || sp[1].Counted != 9 {
		t.Errorf("SpoolPeriods(2026-11) = %+v, %v; want n1's and n2's windows", sp, err)
	}
	for _, p := range []string{"2026-11", "2026-12"} {
		rc, err := s.Recount(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(counts(allTotals(t, s, p)), rc); diff != "" {
			t.Errorf("Recount(%s) (-totals +recount):\n%s", p, diff)
		}
	}
	wantSequence(t, s, "n2", spoolB, 0, 7, 1, 2, 3, 4, 5, 6)
	// With 2026-12 final too, a late window of 2026-11 goes to 2027-01.
	if err := s.Finalise(ctx(t), "2026-12", fin.AddDate(0, 1, 0)); err != nil {
		t.Fatal(err)
	}
	decTotals := allTotals(t, s, "2026-12")
	a = mustApply(t, s, window("n2", spoolB, 8, "2026-11", row(key1, "orders", 2, 1, true)))
	if a.LateInto != "2027-01" {
		t.Errorf("a late window with two periods final: LateInto %q, want 2027-01", a.LateInto)
	}
	a = mustApply(t, s, window("n1", spoolA, 3, "2026-12", row(key1, "orders", 2, 2, true)))
	if a.LateInto != "2027-01" {
		t.Errorf("a late window of 2026-12: LateInto %q, want 2027-01", a.LateInto)
	}
	if diff := cmp.Diff(decTotals, allTotals(t, s, "2026-12"), protocmp.Transform()); diff != "" {
		t.Errorf("late windows changed the final 2026-12 (-before +after):\n%s", diff)
	}
	if got := total(t, s, "key:k1", "orders", "2027-01"); got.Counts.Counted != 3 || got.Adjusted != 3 {
		t.Errorf("Total(key:k1 orders 2027-01) = %+v, want counted 3, adjusted 3", got)
	}
	if st, err := s.Period(ctx(t), "2026-11"); err != nil || !st.Final || !st.Finalised.Equal(fin) {
		t.Errorf("Period(2026-11) = %+v, %v; want final at %v", st, err, fin)
	}
}

// testFinalBetweenParts: a period finalised while a window of it is a
// part short books the parts that come after into the next period; the
// window is whole for its spool all the same.
func testFinalBetweenParts(t *testing.T, o Opener) {
	s := open(t, o)
	rows := []*quotav1.UsageRow{row(key1, "orders", 2, 10, true), row(key1, "orders", 2, 5, true)}
	w := window("n1", spoolA, 1, "2026-11", rows...)
	parts := split(w, rows[:1], rows[1:])
	if a := mustApply(t, s, parts[0]); a.LateInto != "" {
		t.Errorf("part 0 before the period is final: LateInto %q", a.LateInto)
	}
	if err := s.Finalise(ctx(t), "2026-11", time.Now()); err != nil {
		t.Fatal(err)
	}
	a := mustApply(t, s, parts[1])
	if a.LateInto != "2026-12" {
		t.Errorf("part 1 after: LateInto %q, want 2026-12", a.LateInto)
	}
	wantMark(t, a, mark("n1", spoolA, 1))
	if got := total(t, s, "key:k1", "orders", "2026-11").Counts.Counted; got != 10 {
		t.Errorf("2026-11 counted = %d, want 10", got)
	}
	if got := total(t, s, "key:k1", "orders", "2026-12"); got.Counts.Counted != 5 || got.Adjusted != 5 {
		t.Errorf("2026-12 total = %+v, want counted 5, adjusted 5", got)
	}
	adj, _ := s.Adjustments(ctx(t), "2026-12")
	if len(adj) != 1 || !strings.Contains(adj[0].Source, "part 2 of 2") {
		t.Errorf("Adjustments(2026-12) = %+v, want one naming part 2 of 2", adj)
	}
	if sp, _ := s.SpoolPeriods(ctx(t), "2026-11"); len(sp) != 1 || sp[0].Counted != 15 {
		t.Errorf("SpoolPeriods(2026-11) = %+v, want the whole window's 15", sp)
	}
	for _, p := range []string{"2026-11", "2026-12"} {
		rc, _ := s.Recount(ctx(t), p)
		if diff := cmp.Diff(counts(allTotals(t, s, p)), rc); diff != "" {
			t.Errorf("Recount(%s) (-totals +recount):\n%s", p, diff)
		}
	}
}

func testCorrections(t *testing.T, o Opener) {
	s := open(t, o)
	mustApply(t, s, window("n1", spoolA, 1, "2026-11", row(key1, "orders", 2, 10, true), row(key2, "orders", 2, 5, true)))
	cs := []store.Correction{
		{Key: store.Key{Subject: "key:k1", Product: "orders"}, Counted: 3, Billable: 2, ExpectCounted: 10, ExpectBillable: 10, Reason: "recount"},
		{Key: store.Key{Subject: "key:k2", Product: "orders", Period: "2026-11"}, Counted: -5, Billable: -5, ExpectCounted: 5, ExpectBillable: 5, Reason: "recount"},
		{Key: store.Key{Subject: "app:new", Product: "orders"}, Counted: 4, Billable: 1, Reason: "recount"},
	}
	applied, err := s.Correct(ctx(t), "2026-11", cs, "reconcile 2026-11T10:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cs, applied); diff != "" {
		t.Errorf("Correct applied (-given +applied):\n%s", diff)
	}
	if got := total(t, s, "key:k1", "orders", "2026-11"); got.Counts.Counted != 13 || got.Counts.Billable != 12 || got.Adjusted != 3 || got.Caller.GetTenant() != "t1" {
		t.Errorf("Total(key:k1) after a correction = %+v", got)
	}
	if got := total(t, s, "key:k2", "orders", "2026-11"); got.Counts.Counted != 0 || got.Adjusted != -5 || got.Counts.ByClass[2] != 5 {
		t.Errorf("Total(key:k2) after a correction = %+v", got)
	}
	if got := total(t, s, "app:new", "orders", "2026-11"); got.Counts.Counted != 4 || got.Adjusted != 4 {
		t.Errorf("Total(app:new) made by a correction = %+v", got)
	}
	adj, err := s.Adjustments(ctx(t), "2026-11")
	if err != nil || len(adj) != 3 {
		t.Fatalf("Adjustments = %+v, %v; want 3", adj, err)
	}
	if a := adj[1]; a.Kind != "correction" || a.Subject != "key:k2" || a.Counted != -5 || a.Source != "reconcile 2026-11T10:00:00Z" || a.Reason != "recount" || a.Recorded.IsZero() {
		t.Errorf("adjustment 1 = %+v", a)
	}
	for _, tc := range []struct {
		name string
		c    store.Correction
	}{
		{"below zero", store.Correction{Key: store.Key{Subject: "key:k1", Product: "orders"}, Counted: -14, ExpectCounted: 13, ExpectBillable: 12}},
		{"billable below zero", store.Correction{Key: store.Key{Subject: "key:k1", Product: "orders"}, Billable: -13, ExpectCounted: 13, ExpectBillable: 12}},
		{"of another period", store.Correction{Key: store.Key{Subject: "key:k1", Product: "orders", Period: "2026-12"}, Counted: 1}},
		{"of no subject", store.Correction{Key: store.Key{Product: "orders"}, Counted: 1}},
	} {
		ok := store.Correction{Key: store.Key{Subject: "key:k1", Product: "orders"}, Counted: 1, ExpectCounted: 13, ExpectBillable: 12}
		if _, err := s.Correct(ctx(t), "2026-11", []store.Correction{ok, tc.c}, "x"); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Correct %s: %v, want ErrInvalid", tc.name, err)
		}
	}
	if got := total(t, s, "key:k1", "orders", "2026-11").Counts.Counted; got != 13 {
		t.Errorf("counted after refused corrections = %d, want 13", got)
	}
	if err := s.Finalise(ctx(t), "2026-11", time.Now()); err != nil {
		t.Fatal(err)
	}
	before := allTotals(t, s, "2026-11")
	if _, err := s.Correct(ctx(t), "2026-11", []store.Correction{{Key: store.Key{Subject: "key:k1", Product: "orders"}, Counted: 1, ExpectCounted: 13, ExpectBillable: 12}}, "x"); !errors.Is(err, store.ErrFinal) {
		t.Errorf("Correct of a final period: %v, want ErrFinal", err)
	}
	if diff := cmp.Diff(before, allTotals(t, s, "2026-11"), protocmp.Transform()); diff != "" {
		t.Errorf("a refused correction changed a final period (-before +after):\n%s", diff)
	}
	if adj, _ := s.Adjustments(ctx(t), "2026-11"); len(adj) != 3 {
		t.Errorf("Adjustments after refused corrections = %d, want 3", len(adj))
	}
}

// testStaleCorrections: a correction computed against figures its total
// no longer has (a window came in, or another writer corrected it
// first) is skipped, and recorded nowhere; the others of the call are
// applied.
func testStaleCorrections(t *testing.T, o Opener) {
	s := open(t, o)
	mustApply(t, s, window("n1", spoolA, 1, "2026-11", row(key1, "orders", 2, 10, true), row(key2, "orders", 2, 5, true)))
	k1 := store.Key{Subject: "key:k1", Product: "orders"}
	k2 := store.Key{Subject: "key:k2", Product: "orders"}
	fresh := store.Correction{Key: k2, Counted: 1, Billable: 1, ExpectCounted: 5, ExpectBillable: 5, Reason: "fresh"}
	// Computed before a window of k1 came in.
	stale := store.Correction{Key: k1, Counted: 2, Billable: 2, ExpectCounted: 10, ExpectBillable: 10, Reason: "stale"}
	mustApply(t, s, window("n1", spoolA, 2, "2026-11", row(key1, "orders", 2, 3, true)))
	applied, err := s.Correct(ctx(t), "2026-11", []store.Correction{stale, fresh}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 1 || applied[0].Reason != "fresh" {
		t.Errorf("Correct applied %+v, want the fresh one alone", applied)
	}
	if got := total(t, s, "key:k1", "orders", "2026-11"); got.Counts.Counted != 13 || got.Adjusted != 0 {
		t.Errorf("Total(key:k1) after a stale correction = %+v, want 13, unadjusted", got)
	}
	if got := total(t, s, "key:k2", "orders", "2026-11"); got.Counts.Counted != 6 || got.Adjusted != 1 {
		t.Errorf("Total(key:k2) = %+v, want 6, adjusted 1", got)
	}
	// The same correction again: the total has moved on, by it.
	if applied, err := s.Correct(ctx(t), "2026-11", []store.Correction{fresh}, "test"); err != nil || len(applied) != 0 {
		t.Errorf("Correct the same again = %+v, %v; want nothing applied", applied, err)
	}
	// One of a total that does not exist expects zero; once it exists,
	// a correction expecting zero is stale.
	k3 := store.Key{Subject: "app:new", Product: "orders"}
	if applied, _ := s.Correct(ctx(t), "2026-11", []store.Correction{{Key: k3, Counted: 4}}, "test"); len(applied) != 1 {
		t.Errorf("Correct of a new total applied %+v", applied)
	}
	if applied, _ := s.Correct(ctx(t), "2026-11", []store.Correction{{Key: k3, Counted: 4}}, "test"); len(applied) != 0 {
		t.Errorf("Correct of it again, expecting zero, applied %+v", applied)
	}
	adj, err := s.Adjustments(ctx(t), "2026-11")
	if err != nil || len(adj) != 2 || adj[0].Reason != "fresh" || adj[1].Subject != "app:new" {
		t.Errorf("Adjustments = %+v, %v; want the two applied", adj, err)
	}
}

// testRacingCorrections: two writers (two processes on the database)
// correct one total at once, both computed against the same figures:
// the total is corrected once.
func testRacingCorrections(t *testing.T, o Opener) {
	a, b := open(t, o), open(t, o)
	for round := range 20 {
		period := fmt.Sprintf("20%02d-01", 30+round)
		mustApply(t, a, window("n1", spoolA, uint64(round+1), period, row(key1, "orders", 2, 10, true)))
		c := store.Correction{Key: store.Key{Subject: "key:k1", Product: "orders"}, Counted: -1, Billable: -1, ExpectCounted: 10, ExpectBillable: 10}
		var n [2]int
		var errs [2]error
		var wg sync.WaitGroup
		for i, s := range []*store.Store{a, b} {
			wg.Go(func() {
				var applied []store.Correction
				applied, errs[i] = s.Correct(ctx(t), period, []store.Correction{c}, fmt.Sprint("writer ", i))
				n[i] = len(applied)
			})
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil || n[0]+n[1] != 1 {
			t.Fatalf("round %d: the writers applied %v (errors %v), want one correction", round, n, errs)
		}
		if got := total(t, a, "key:k1", "orders", period); got.Counts.Counted != 9 || got.Adjusted != -1 {
			t.Fatalf("round %d: total %+v, want 9, adjusted -1", round, got)
		}
		if adj, _ := a.Adjustments(ctx(t), period); len(adj) != 1 {
			t.Fatalf("round %d: adjustments %+v, want one", round, adj)
		}
	}
}

// testWriteOffs: the write-offs of a close are recorded with it, as
// adjustments of kind write_off that change no total; a refused close
// records none.
func testWriteOffs(t *testing.T, o Opener) {
	s := open(t, o)
	mustApply(t, s, window("n1", spoolA, 1, "2026-11", row(key1, "orders", 2, 10, true)))
	before := allTotals(t, s, "2026-11")
	fin := time.Date(2026, 12, 1, 0, 5, 0, 0, time.UTC)
	wos := []store.WriteOff{
		{NodeID: "n2", SpoolID: spoolB, Missing: "4-9, 12", Reason: "its own counters say 6 counted, 5 billable of the period are not in"},
		{NodeID: "n3", SpoolID: spoolA, Reason: "its counters disagree"},
	}
	for _, bad := range []store.WriteOff{{SpoolID: spoolA}, {NodeID: "n2"}} {
		if err := s.Finalise(ctx(t), "2026-11", fin, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Finalise with a write-off %+v: %v, want ErrInvalid", bad, err)
		}
	}
	if st, _ := s.Period(ctx(t), "2026-11"); st.Final {
		t.Fatal("a refused Finalise made the period final")
	}
	if err := s.Finalise(ctx(t), "2026-11", fin, wos...); err != nil {
		t.Fatal(err)
	}
	adj, err := s.Adjustments(ctx(t), "2026-11")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Adjustment{
		{Key: store.Key{Period: "2026-11"}, Kind: "write_off", Source: "write-off of node n2 spool " + spoolB + " seqs 4-9, 12", Reason: wos[0].Reason, Recorded: fin},
		{Key: store.Key{Period: "2026-11"}, Kind: "write_off", Source: "write-off of node n3 spool " + spoolA, Reason: wos[1].Reason, Recorded: fin},
	}
	if diff := cmp.Diff(want, adj); diff != "" {
		t.Errorf("Adjustments after a close with write-offs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, allTotals(t, s, "2026-11"), protocmp.Transform()); diff != "" {
		t.Errorf("write-offs changed the totals (-before +after):\n%s", diff)
	}
	if err := s.Finalise(ctx(t), "2026-11", fin, wos[0]); !errors.Is(err, store.ErrFinal) {
		t.Errorf("Finalise again: %v, want ErrFinal", err)
	}
	if adj, _ := s.Adjustments(ctx(t), "2026-11"); len(adj) != 2 {
		t.Errorf("a refused Finalise recorded its write-offs: %+v", adj)
	}
}

func testRecount(t *testing.T, o Opener) {
	s := open(t, o)
	callers := []*quotav1.Caller{key1, key2, app3, anon}
	want := map[store.Key]store.Counts{}
	for seq := uint64(1); seq <= 40; seq++ {
		period := "2026-11"
		if seq > 25 {
			period = "2026-12"
		}
		var rows []*quotav1.UsageRow
		for i := range int(seq%5) + 1 {
			c := callers[(int(seq)+i)%len(callers)]
			product := []string{"orders", "billing", ""}[(int(seq)*7+i)%3]
			class := uint32((int(seq) + 3*i) % 6)
			n := seq*3 + uint64(i)
			fwd := class == 2 || class == 5
			rows = append(rows, row(c, product, class, n, fwd))
			k := store.Key{Subject: store.Subject(c), Product: product, Period: period}
			got := want[k]
			got.Counted += n
			if fwd {
				got.Billable += n
			}
			got.ByClass[class] += n
			want[k] = got
		}
		w := window("n1", spoolA, seq, period, rows...)
		if seq%4 == 0 && len(rows) > 1 {
			for _, p := range split(w, rows[:1], rows[1:]) {
				mustApply(t, s, p)
			}
			continue
		}
		mustApply(t, s, w)
		mustApply(t, s, w) // a duplicate
	}
	for _, p := range []string{"2026-11", "2026-12"} {
		rc, err := s.Recount(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		tot := counts(allTotals(t, s, p))
		if diff := cmp.Diff(tot, rc); diff != "" {
			t.Errorf("Recount(%s) (-totals +recount):\n%s", p, diff)
		}
		for k, c := range rc {
			if want[k] != c {
				t.Errorf("Recount(%s)[%v] = %+v, want %+v", p, k, c, want[k])
			}
		}
	}
	if got := len(allTotals(t, s, "")); got != len(want) {
		t.Errorf("%d totals, want %d", got, len(want))
	}
	// A correction is not in the recount: it makes the totals equal it
	// when they drifted.
	k := store.Key{Subject: "key:k1", Product: "orders", Period: "2026-11"}
	rc, _ := s.Recount(ctx(t), "2026-11")
	if applied, err := s.Correct(ctx(t), "2026-11", []store.Correction{{Key: k, Counted: 2, ExpectCounted: rc[k].Counted, ExpectBillable: rc[k].Billable}}, "test"); err != nil || len(applied) != 1 {
		t.Fatalf("Correct = %v, %v; want it applied", applied, err)
	}
	if got := total(t, s, k.Subject, k.Product, k.Period).Counts.Counted; got != rc[k].Counted+2 {
		t.Errorf("after a correction of +2: total %d, recount %d", got, rc[k].Counted)
	}
}

// testConcurrentApply: the same parts applied at once by two stores (two
// consumers of a rebalanced partition) count once each.
func testConcurrentApply(t *testing.T, o Opener) {
	stores := []*store.Store{open(t, o), open(t, o)}
	const windows = 20
	var mu sync.Mutex
	applied, duplicates := 0, 0
	marks := map[uint64]int{}
	var wg sync.WaitGroup
	for g := range 4 {
		s := stores[g%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(1); seq <= windows; seq++ {
				w := window("n1", spoolA, seq, "2026-11", row(key1, "orders", 2, seq, true), row(key2, "orders", 4, 1, false))
				a, err := s.Apply(ctx(t), w)
				if err != nil {
					t.Errorf("Apply(%d): %v", seq, err)
					return
				}
				mu.Lock()
				if a.Duplicate {
					duplicates++
				} else {
					applied++
				}
				if a.Mark != nil {
					marks[a.Mark.GetSeq()]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if applied != windows || duplicates != 3*windows {
		t.Errorf("%d applied, %d duplicates; want %d, %d", applied, duplicates, windows, 3*windows)
	}
	for seq := uint64(1); seq <= windows; seq++ {
		if marks[seq] != 1 {
			t.Errorf("mark %d returned %d times, want once", seq, marks[seq])
		}
	}
	if got := total(t, stores[0], "key:k1", "orders", "2026-11").Counts.Counted; got != windows*(windows+1)/2 {
		t.Errorf("counted = %d, want %d", got, windows*(windows+1)/2)
	}
	if got := total(t, stores[1], "key:k2", "orders", "2026-11").Counts.Counted; got != windows {
		t.Errorf("key2 counted = %d, want %d", got, windows)
	}
	wantSequence(t, stores[0], "n1", spoolA, windows, windows)
	wantSeq(t, stores[1], windows)
}

func testMarkOutbox(t *testing.T, o Opener) {
	s := open(t, o)
	type step struct {
		node, spool string
		seq         uint64
	}
	// Rises: a1 1, a1 2, b1 1, a2 1, (b1 3 no rise), b1 3 (2 fills), a1 3.
	for _, st := range []step{{"n1", spoolA, 1}, {"n1", spoolA, 2}, {"n1", spoolB, 1}, {"n2", spoolA, 1}, {"n1", spoolB, 3}, {"n1", spoolB, 2}, {"n1", spoolA, 3}} {
		mustApply(t, s, window(st.node, st.spool, st.seq, "2026-11"))
	}
	wantSeq(t, s, 6)
	// Each spool once, at its newest mark's rev.
	want := []*configv1.FastLaneEntry{
		{Rev: 4, Entry: &configv1.FastLaneEntry_UsageMark{UsageMark: mark("n2", spoolA, 1)}},
		{Rev: 5, Entry: &configv1.FastLaneEntry_UsageMark{UsageMark: mark("n1", spoolB, 3)}},
		{Rev: 6, Entry: &configv1.FastLaneEntry_UsageMark{UsageMark: mark("n1", spoolA, 3)}},
	}
	got, err := s.Changes(ctx(t), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("Changes(0) (-want +got):\n%s", diff)
	}
	// Paged two at a time, from each page's last rev.
	var paged []*configv1.FastLaneEntry
	for after := uint64(0); ; {
		page, err := s.Changes(ctx(t), after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 {
			t.Fatalf("Changes(%d, 2) returned %d", after, len(page))
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1].GetRev()
	}
	if diff := cmp.Diff(want, paged, protocmp.Transform()); diff != "" {
		t.Errorf("Changes in pages of 2 (-want +got):\n%s", diff)
	}
	if got, _ := s.Changes(ctx(t), 5, 10); len(got) != 1 || got[0].GetRev() != 6 {
		t.Errorf("Changes(5) = %v, want rev 6", got)
	}
	// Revs are gap-free across writers: concurrent windows of many spools
	// take revs 7, 8, ... one each.
	var wg sync.WaitGroup
	const spools = 8
	for i := range spools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spool := fmt.Sprintf("%016x", 0xc0+i)
			if _, err := s.Apply(ctx(t), window("n3", spool, 1, "2026-11")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	wantSeq(t, s, 6+spools)
	got, _ = s.Changes(ctx(t), 6, 0)
	for i, e := range got {
		if e.GetRev() != uint64(7+i) || e.GetUsageMark().GetNodeId() != "n3" {
			t.Errorf("Changes(6)[%d] = %v, want rev %d of n3", i, e, 7+i)
		}
	}
	if len(got) != spools {
		t.Errorf("Changes(6) = %d entries, want %d", len(got), spools)
	}
	// A refused window takes no rev.
	bad := window("n1", spoolA, 4, "2026-11", row(key1, "orders", 2, 1, true))
	bad.Counted = 5
	if _, err := s.Apply(ctx(t), bad); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a malformed window: %v", err)
	}
	wantSeq(t, s, 6+spools)
}

func testAdvance(t *testing.T, o Opener) {
	s := open(t, o)
	mustApply(t, s, window("n1", spoolA, 1, "2026-11"))
	if moved, err := s.Advance(ctx(t), 1); err != nil || moved {
		t.Errorf("Advance(1) at 1 = %v, %v; want false", moved, err)
	}
	if moved, err := s.Advance(ctx(t), 100); err != nil || !moved {
		t.Errorf("Advance(100) = %v, %v; want true", moved, err)
	}
	if moved, err := s.Advance(ctx(t), 50); err != nil || moved {
		t.Errorf("Advance(50) at 100 = %v, %v; want false", moved, err)
	}
	wantSeq(t, s, 100)
	mustApply(t, s, window("n1", spoolA, 2, "2026-11"))
	got, _ := s.Changes(ctx(t), 0, 0)
	if len(got) != 1 || got[0].GetRev() != 101 || got[0].GetUsageMark().GetSeq() != 2 {
		t.Errorf("Changes after Advance(100) = %v, want mark 2 at rev 101", got)
	}
	if _, err := s.Advance(ctx(t), 1<<63); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Advance(1<<63): %v, want ErrInvalid", err)
	}
}

func testSpoolPeriods(t *testing.T, o Opener) {
	s := open(t, o)
	var nodeCounted, nodeBillable uint64
	apply := func(node, spool string, seq uint64, period string, rows ...*quotav1.UsageRow) *quotav1.UsageWindow {
		w := window(node, spool, seq, period, rows...)
		nodeCounted += w.Counted
		nodeBillable += w.Billable
		w.PeriodCounted, w.PeriodBillable = nodeCounted+100, nodeBillable // the node counted 100 more
		mustApply(t, s, w)
		return w
	}
	apply("n1", spoolA, 1, "2026-11", row(key1, "orders", 2, 3, true))
	apply("n1", spoolA, 2, "2026-11", row(key1, "orders", 4, 2, false))
	last := apply("n1", spoolA, 4, "2026-11", row(key2, "orders", 2, 5, true))
	nodeCounted, nodeBillable = 0, 0
	apply("n1", spoolA, 5, "2026-12", row(key2, "orders", 2, 1, true))
	// A window a part short counts not.
	w := window("n1", spoolA, 6, "2026-11", row(key1, "orders", 2, 1, true), row(key1, "orders", 2, 1, true))
	mustApply(t, s, split(w, w.Rows[:1], w.Rows[1:])[0])
	nodeCounted, nodeBillable = 0, 0
	apply("n2", spoolB, 9, "2026-11", row(key1, "orders", 2, 7, true))
	got, err := s.SpoolPeriods(ctx(t), "2026-11")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.SpoolPeriod{
		{NodeID: "n1", SpoolID: spoolA, FirstSeq: 1, LastSeq: 4, Counted: 10, Billable: 8, NodeCounted: 110, NodeBillable: 8, LastEnd: last.End.AsTime()},
		{NodeID: "n2", SpoolID: spoolB, FirstSeq: 9, LastSeq: 9, Counted: 7, Billable: 7, NodeCounted: 107, NodeBillable: 7, LastEnd: periodStart("2026-11").Add(100 * time.Second)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SpoolPeriods(2026-11) (-want +got):\n%s", diff)
	}
	if got, _ := s.SpoolPeriods(ctx(t), "2026-12"); len(got) != 1 || got[0].FirstSeq != 5 || got[0].NodeCounted != 101 {
		t.Errorf("SpoolPeriods(2026-12) = %+v", got)
	}
}

func testPeriods(t *testing.T, o Opener) {
	s := open(t, o)
	t1 := time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC)
	if err := s.Reconciled(ctx(t), "2026-11", t1); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Period(ctx(t), "2026-11"); err != nil || st != (store.PeriodState{Period: "2026-11", LastReconciled: t1}) {
		t.Errorf("Period after Reconciled = %+v, %v", st, err)
	}
	t2 := t1.Add(time.Hour)
	if err := s.Reconciled(ctx(t), "2026-11", t2); err != nil {
		t.Fatal(err)
	}
	t3 := t2.Add(time.Minute)
	if err := s.Finalise(ctx(t), "2026-11", t3); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Period(ctx(t), "2026-11"); err != nil || st != (store.PeriodState{Period: "2026-11", Final: true, Finalised: t3, LastReconciled: t2}) {
		t.Errorf("Period after Finalise = %+v, %v", st, err)
	}
	if st, _ := s.Period(ctx(t), "2026-12"); st.Final {
		t.Error("2026-12 final")
	}
	for _, p := range []string{"", "2026-13", "26-11", "2026-11-01"} {
		if err := s.Finalise(ctx(t), p, t3); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Finalise(%q): %v, want ErrInvalid", p, err)
		}
		if _, err := s.Period(ctx(t), p); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Period(%q): %v, want ErrInvalid", p, err)
		}
	}
}

func testTotalsPaging(t *testing.T, o Opener) {
	s := open(t, o)
	var rows []*quotav1.UsageRow
	for i := range 12 {
		c := &quotav1.Caller{KeyId: fmt.Sprintf("k%02d", i), Tenant: []string{"t1", "t2", "t3"}[i%3]}
		rows = append(rows, row(c, "orders", 2, 1, true), row(c, "billing", 2, 1, true))
	}
	mustApply(t, s, window("n1", spoolA, 1, "2026-11", rows...))
	mustApply(t, s, window("n1", spoolA, 2, "2026-12", rows[:4]...))
	all := allTotals(t, s, "")
	if len(all) != 28 {
		t.Fatalf("%d totals, want 28", len(all))
	}
	for i := 1; i < len(all); i++ {
		a, b := all[i-1].Key, all[i].Key
		if a.Subject > b.Subject || (a.Subject == b.Subject && (a.Product > b.Product || (a.Product == b.Product && a.Period >= b.Period))) {
			t.Errorf("totals out of order: %v before %v", a, b)
		}
	}
	for _, f := range []store.TotalsFilter{{}, {Period: "2026-11"}, {Tenant: "t2"}, {Tenant: "t2", Period: "2026-12"}, {Subject: "key:k01"}} {
		var want []store.Key
		for _, tot := range all {
			if (f.Period == "" || tot.Period == f.Period) && (f.Tenant == "" || tot.Caller.GetTenant() == f.Tenant) && (f.Subject == "" || tot.Subject == f.Subject) {
				want = append(want, tot.Key)
			}
		}
		var got []store.Key
		pages := 0
		for {
			f.Limit = 5
			page, more, err := s.Totals(ctx(t), f)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, tot := range page {
				got = append(got, tot.Key)
			}
			if !more {
				break
			}
			if len(page) != 5 {
				t.Errorf("Totals(%+v) = %d totals with more, want 5", f, len(page))
			}
			f.After = page[len(page)-1].Key
			if pages > 10 {
				t.Fatal("no end of pages")
			}
		}
		if !cmp.Equal(got, want) {
			t.Errorf("Totals(%+v) in pages of 5 = %v, want %v", f, got, want)
		}
	}
}

func testReopen(t *testing.T, o Opener) {
	s := open(t, o)
	mustApply(t, s, window("n1", spoolA, 1, "2026-11", row(key1, "orders", 2, 10, true)))
	v, err := s.SchemaVersion(ctx(t))
	if err != nil || v < 1 {
		t.Errorf("SchemaVersion = %d, %v", v, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, o)
	if v2, _ := s.SchemaVersion(ctx(t)); v2 != v {
		t.Errorf("SchemaVersion after reopening = %d, want %d", v2, v)
	}
	if a := mustApply(t, s, window("n1", spoolA, 1, "2026-11", row(key1, "orders", 2, 10, true))); !a.Duplicate {
		t.Error("a window applied before reopening is no duplicate")
	}
	wantSequence(t, s, "n1", spoolA, 1, 1)
	wantSeq(t, s, 1)
}

// testCanceled: a canceled context writes nothing.
func testCanceled(t *testing.T, o Opener) {
	s := open(t, o)
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Apply(c, window("n1", spoolA, 1, "2026-11", row(key1, "orders", 2, 1, true))); err == nil {
		t.Error("Apply with a canceled context succeeded")
	}
	if qs := sequences(t, s, 0); len(qs) != 0 {
		t.Errorf("a canceled Apply left sequences: %v", qs)
	}
	if a := mustApply(t, s, window("n1", spoolA, 1, "2026-11", row(key1, "orders", 2, 1, true))); a.Duplicate {
		t.Error("the window of a canceled Apply is a duplicate")
	}
}
