// Package reconcile is the quota service's usage reconciler: it makes a
// billing period's totals exact, closes the period, and exports its
// billing lines.
//
// One run over a period (Run) does four things, in order.
//
//  1. Sequences. For every node spool the store has windows of, the seqs
//     above its contiguous mark up to its highest that are not wholly in
//     (Store.Sequences' Missing; when the store cut that list short, every
//     seq above its last up to the highest as well) are gaps; so are the
//     seqs above the store's highest up to the last seq the node says it
//     spooled (UsageSpool.last_seq on the relay: a trailing gap, windows
//     lost or still in flight). A spool the relay reports that the store
//     has no window of is a gap from seq 1 to its last_seq. Each gap of a
//     spool whose node the relay reports with that spool is asked to be
//     re-sent (Relay.Resend, through the control plane and the node's
//     stream), and Gap.requested says it was; a re-sent window that was in
//     already is a duplicate, which the store absorbs. A trailing gap is
//     asked for only up to the last seq the node reported at least Grace
//     ago: windows spooled since are most likely in flight, on Kafka
//     behind a consumer that lags, and asking for them again would add
//     the same backlog once more to the topic that lags. At most 64
//     ranges per spool are asked for in a run, the tail of a longer list
//     as one range. Gaps are a spool's, not a period's: every run reports
//     all of them, also over a final period.
//  2. Recount. The store's recount of the period (the rows of every window
//     part booked into it: its own windows, and the late windows of earlier
//     periods booked into it) is what each live total must be; a
//     difference is written back with Store.Correct, recorded as an
//     adjustment of kind "correction". Windows go on arriving while the
//     reconciler reads, so the totals are read before and after the
//     recount, and a total that changed in between is left for the next
//     run: a correction is only written from a consistent reading. Each
//     correction carries the figures it was computed against, and the
//     store applies it only while its total still has them (in the
//     transaction that writes it), so that a window applied since or
//     another reconciler's correction of the same total makes it wait for
//     the next run rather than count twice. A final period is never
//     corrected.
//  3. Node counters. Each window carries the node's own counters of its
//     period through that window. Where a spool is contiguous through its
//     last whole window of the period (seq LastSeq), what its windows of
//     the period add up to must equal the counters that window carries; a
//     difference is a counter mismatch (reported on every run).
//  4. Close, when asked (finalise) and allowed: Store.Finalise, after
//     which the period's totals never change again, and a window of it
//     that arrives later is booked into the next open period as a visible
//     late_window adjustment. Otherwise the report's Blocked says what
//     stands in the way.
//
// # Closing a period
//
// A period closes when all of these hold:
//
//   - it ended more than Grace ago (Now > end + Grace);
//   - the quota service has taken in what was waiting for it when it
//     started (Options.Ready: the Kafka consumer has read the usage topic
//     to its end and applied it), else the windows of the period still
//     unread would be booked late into the next one;
//   - some spool is known, in the store or on the relay, or the
//     reconciler was made (the service started) more than Grace ago: a
//     fresh service that has seen nothing yet does not close a period as
//     empty;
//   - the relay answered (else the connected nodes' spools are unknown);
//   - every spool is closed for it (below): the spools are every one the
//     store has windows of and every one the relay reports;
//   - no spool has a counter mismatch in it, but for one of a written-off
//     node.
//
// A spool is closed for the period when any of these holds:
//
//   - (a) it has a window at or after the period's end with every window
//     before it in: the store holds, at or below the spool's contiguous
//     mark, a whole window of the next period (its start, on the node's
//     corrected clock, is at or after the period's end); or the spool has
//     no window of the next period, but its latest window starts at or
//     after the end, every window up to its highest is in, and the relay
//     knows of none beyond it;
//   - (b) it ended before the period began: its latest window starts
//     before the period's start, and the relay knows of no window beyond
//     the store's highest;
//   - (c) it is retired: the relay does not report it (its node is gone,
//     or runs a new spool now), and every window up to its highest is in;
//   - (d) the relay reports it with nothing spooled (last_seq 0);
//   - (e) its node is written off (Options.WriteOff).
//
// # Lost nodes and regions
//
// A node or a region that is lost for good (its spool's missing windows
// will never come: the disk is gone, the node is not connected) keeps the
// period blocked, with a reason naming the node, the spool and the missing
// seqs; so does a connected node whose windows after the period's end do
// not arrive. The operator decides: bring it back, or name its node in
// Options.WriteOff or in a run's writeOff (ReconcileRequest.write_off),
// which closes the period without the missing windows. A write-off is
// visible and durable: each spool written off is recorded in the store,
// in the transaction that finalises the period, as an adjustment of the
// period of kind "write_off" (counts zero, since what was lost is not
// known; its source names the node, the spool and the missing seqs); the
// report of the run that finalised lists the spool's gaps in WrittenOff
// and says why in Blocked as "written off: node …" (with what the node's
// own counters say is missing, when they tell); and it is logged as a
// warning. Windows of a written-off node that do arrive later are late
// windows like any other.
//
// Rule (a) relies on a node spooling a window every Window, empty or not,
// and on the windows of one spool starting in seq order. A node whose
// clock is corrected backwards across the period's end can spool a window
// of the period after one of the next: if the period was finalised in
// between, that window is a late window, never lost, never counted twice.
// A node whose spool is full keeps its window open, with its start before
// the end, until the spool has room: its spool blocks the close until then.
//
// Loop runs Run hourly (Interval) over the current period, and over the
// previous one until it is final, finalising it from its end + Grace.
// Lines exports a final period's billing lines (one per tenant, app,
// product and plan), and WriteCSV and WriteJSON encode them.
//
// One Reconciler runs one run at a time. Two reconcilers on one store
// (two quota service processes) may run at once: a correction is written
// once (step 2), and a period is finalised once, with the write-offs of
// the run that finalised it.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/quota/store"
)

// Options configure a Reconciler.
type Options struct {
	Store *store.Store
	// Relay reaches the nodes; nil means none is known connected: no gap
	// is asked to be re-sent, and a spool is closed by rules (a) to (c)
	// on the store alone.
	Relay Relay
	// Caps returns a plan's cap on a product and whether it is hard (the
	// billed figure stops at it); nil means no caps.
	Caps func(plan, product string) (cap uint64, hard bool)
	// WriteOff names nodes whose missing windows the operator gave up
	// on: their spools do not block a close (see the package doc). A
	// run's own write-offs (Run's writeOff) join these.
	WriteOff []string
	// Ready, when set, says whether the quota service has taken in what
	// was already waiting for it when it started (the usage topic read
	// to its end and applied): a close is blocked, with the error's text,
	// until it returns nil. It may be called often and must not block
	// for long; nil means always ready.
	Ready func(ctx context.Context) error
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// After is Loop's timer; nil means time.After.
	After func(d time.Duration) <-chan time.Time
	// Observe, when set, is called with what every Run returned.
	Observe func(*quotav1.ReconcileReport, error)
	Logger  *slog.Logger // nil: slog.Default()
	// Interval between Loop's runs; zero means an hour.
	Interval time.Duration
	// Grace is how long after a period's end its windows may still
	// arrive before a close is attempted; zero means 2 minutes.
	Grace time.Duration
}

// Reconciler reconciles a store's periods. It is safe for concurrent
// use; runs take turns.
type Reconciler struct {
	opts     Options
	store    *store.Store
	log      *slog.Logger
	writeOff map[string]bool
	started  time.Time // New's Now: the service's start

	mu sync.Mutex // one run at a time
	// seen is, per spool (spoolKey), the last seq its node reported and
	// when it was first seen so: a trailing gap is asked for up to a seq
	// seen at least Grace ago. Guarded by mu.
	seen map[string]seenSeq
	// waiting is set by a run whose close waited for Ready or for the
	// grace after the start, so that Loop tries again soon.
	waiting atomic.Bool
}

// New returns a Reconciler over opts.Store.
func New(opts Options) *Reconciler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.After == nil {
		opts.After = time.After
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Hour
	}
	if opts.Grace <= 0 {
		opts.Grace = 2 * time.Minute
	}
	r := &Reconciler{opts: opts, store: opts.Store, log: opts.Logger, writeOff: map[string]bool{}, started: opts.Now(), seen: map[string]seenSeq{}}
	for _, n := range opts.WriteOff {
		r.writeOff[n] = true
	}
	return r
}

const (
	// missingLimit bounds the missing seqs read per spool.
	missingLimit = 1000
	// maxRanges bounds the re-send ranges asked per spool and run.
	maxRanges = 64
	// pageSize is how many totals are read at once.
	pageSize = 1000
	// relayTimeout bounds one call to the relay, so that a control plane
	// that does not answer cannot hold a run (and the Loop) forever; and
	// one call of Ready.
	relayTimeout = 30 * time.Second
)

// spool is one node spool as the store and the relay know it.
type spool struct {
	nodeID, spoolID string
	seq             *store.Sequence           // nil: the store has no window of it
	node            *distributionv1.NodeSpool // nil: not on the relay with this spool
	// ripe is the highest seq of a trailing gap that is asked for: the
	// node reported it spooled at least Grace ago.
	ripe uint64
}

// seenSeq is a node's last seq of a spool and when it was first seen.
type seenSeq struct {
	last uint64
	at   time.Time
}

func (s *spool) name() string { return "node " + s.nodeID + " spool " + s.spoolID }

func spoolKey(node, spool string) string { return node + "/" + spool }

// Run reconciles period ("2026-12") and, with finalise, closes it when
// it can (see the package doc). writeOff names nodes written off for
// this run, beside Options.WriteOff. An error means a step could not
// read or write the store; a relay that fails is reported, not an error.
func (r *Reconciler) Run(ctx context.Context, period string, finalise bool, writeOff ...string) (*quotav1.ReconcileReport, error) {
	rep, err := r.run(ctx, period, finalise, writeOff)
	if r.opts.Observe != nil {
		r.opts.Observe(rep, err)
	}
	return rep, err
}

func (r *Reconciler) run(ctx context.Context, period string, finalise bool, writeOff []string) (*quotav1.ReconcileReport, error) {
	start, end, err := Bounds(period)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.opts.Now()
	rep := &quotav1.ReconcileReport{Period: period, Ran: timestamppb.New(now)}
	state, err := r.store.Period(ctx, period)
	if err != nil {
		return nil, fmt.Errorf("reconcile: reading period %s: %w", period, err)
	}

	// 1. Sequences.
	spools, relayErr, err := r.spools(ctx)
	if err != nil {
		return nil, err
	}
	if relayErr != nil {
		r.log.WarnContext(ctx, "reconcile: the relay did not answer: no gap is asked to be re-sent", "period", period, "err", relayErr)
	}
	r.ripen(now, spools)
	for _, s := range spools {
		rep.Gaps = append(rep.Gaps, r.resend(ctx, s)...)
	}
	if state.Final {
		rep.Finalised = true
		return rep, nil
	}

	// 2. Recount.
	cs, err := r.corrections(ctx, period)
	if err != nil {
		return nil, err
	}
	if len(cs) > 0 {
		source := "reconcile " + now.UTC().Format(time.RFC3339)
		// The store applies a correction only while its total has what it
		// was computed against: one another writer (a window, another
		// reconciler) got to first is left for the next run.
		cs, err = r.store.Correct(ctx, period, cs, source)
		if err != nil {
			return nil, fmt.Errorf("reconcile: correcting %s: %w", period, err)
		}
		for _, c := range cs {
			rep.Corrections = append(rep.Corrections, &quotav1.Correction{
				Subject: c.Subject, Product: c.Product, Period: c.Period,
				Counted: c.Counted, Billable: c.Billable, Reason: c.Reason,
			})
		}
		if len(cs) > 0 {
			r.log.WarnContext(ctx, "reconcile: corrected live totals to the recount", "period", period, "corrections", len(cs))
		}
	}

	// 3. Node counters.
	sps, err := r.store.SpoolPeriods(ctx, period)
	if err != nil {
		return nil, fmt.Errorf("reconcile: reading %s's spools: %w", period, err)
	}
	bySpool := map[string]*spool{}
	for _, s := range spools {
		bySpool[spoolKey(s.nodeID, s.spoolID)] = s
	}
	for _, sp := range sps {
		s := bySpool[spoolKey(sp.NodeID, sp.SpoolID)]
		if s == nil || s.seq == nil || s.seq.Contiguous < sp.LastSeq {
			continue // a gap first; the counters say nothing yet
		}
		if sp.NodeCounted != sp.Counted || sp.NodeBillable != sp.Billable {
			rep.CounterMismatches = append(rep.CounterMismatches, &quotav1.CounterMismatch{
				NodeId: sp.NodeID, SpoolId: sp.SpoolID, Seq: sp.LastSeq,
				NodeCounted: sp.NodeCounted, WindowsCounted: sp.Counted,
				NodeBillable: sp.NodeBillable, WindowsBillable: sp.Billable,
			})
		}
	}
	if err := r.store.Reconciled(ctx, period, now); err != nil {
		return nil, fmt.Errorf("reconcile: recording the run over %s: %w", period, err)
	}

	// 4. Close.
	if !finalise {
		return rep, nil
	}
	if !now.After(end.Add(r.opts.Grace)) {
		rep.Blocked = append(rep.Blocked, fmt.Sprintf("the period ends at %s: it closes after %s (grace %s)",
			end.Format(time.RFC3339), end.Add(r.opts.Grace).Format(time.RFC3339), r.opts.Grace))
		return rep, nil
	}
	waiting := r.waitingFor(ctx, now, spools, relayErr)
	r.waiting.Store(len(waiting) > 0)
	wo := r.writeOff
	if len(writeOff) > 0 {
		wo = maps.Clone(r.writeOff)
		for _, n := range writeOff {
			wo[n] = true
		}
	}
	blocked, offs, err := r.blockers(ctx, period, start, end, spools, relayErr, rep.CounterMismatches, wo)
	if err != nil {
		return nil, err
	}
	if blocked = append(waiting, blocked...); len(blocked) > 0 {
		rep.Blocked = blocked
		r.log.InfoContext(ctx, "reconcile: the period cannot close yet", "period", period, "blocked", strings.Join(blocked, "; "))
		return rep, nil
	}
	var records []store.WriteOff
	for _, o := range offs {
		records = append(records, o.record)
	}
	err = r.store.Finalise(ctx, period, now, records...)
	switch {
	case errors.Is(err, store.ErrFinal):
		// Another reconciler closed it first, with its own write-offs.
		rep.Finalised = true
		return rep, nil
	case err != nil:
		return nil, fmt.Errorf("reconcile: finalising %s: %w", period, err)
	}
	rep.Finalised = true
	for _, o := range offs {
		rep.Blocked = append(rep.Blocked, o.notes...)
		rep.WrittenOff = append(rep.WrittenOff, o.gaps...)
		for _, n := range o.notes {
			r.log.WarnContext(ctx, "reconcile: closed the period without a node's missing windows", "period", period, "note", n)
		}
	}
	r.log.InfoContext(ctx, "reconcile: the period is final", "period", period)
	return rep, nil
}

// waitingFor returns why a close must wait for the service itself: it
// has not taken in what was waiting for it when it started (Ready), or
// it knows of no spool at all, in the store or on the relay, and
// started less than Grace ago (a fresh service has seen nothing yet).
func (r *Reconciler) waitingFor(ctx context.Context, now time.Time, spools []*spool, relayErr error) []string {
	var out []string
	if r.opts.Ready != nil {
		rctx, cancel := context.WithTimeout(ctx, relayTimeout)
		err := r.opts.Ready(rctx)
		cancel()
		if err != nil {
			out = append(out, err.Error())
		}
	}
	if len(spools) == 0 && relayErr == nil && now.Before(r.started.Add(r.opts.Grace)) {
		out = append(out, fmt.Sprintf("no node spool is known yet, in the store or on the relay, and the quota service started at %s: it closes a period with none from %s (grace %s)",
			r.started.UTC().Format(time.RFC3339), r.started.Add(r.opts.Grace).UTC().Format(time.RFC3339), r.opts.Grace))
	}
	return out
}

// spools joins the store's sequences and the relay's spools, in (node,
// spool) order. relayErr is the relay's failure; err the store's.
func (r *Reconciler) spools(ctx context.Context) (spools []*spool, relayErr, err error) {
	seqs, err := r.store.Sequences(ctx, missingLimit)
	if err != nil {
		return nil, nil, fmt.Errorf("reconcile: reading the sequences: %w", err)
	}
	by := map[string]*spool{}
	for i := range seqs {
		q := &seqs[i]
		s := &spool{nodeID: q.NodeID, spoolID: q.SpoolID, seq: q}
		by[spoolKey(q.NodeID, q.SpoolID)] = s
		spools = append(spools, s)
	}
	if r.opts.Relay != nil {
		var nodes []*distributionv1.NodeSpool
		rctx, cancel := context.WithTimeout(ctx, relayTimeout)
		nodes, relayErr = r.opts.Relay.Spools(rctx)
		cancel()
		for _, n := range nodes {
			id := n.GetUsage().GetSpoolId()
			if id == "" {
				continue // the node counts no usage
			}
			if s := by[spoolKey(n.GetNodeId(), id)]; s != nil {
				s.node = n
				continue
			}
			s := &spool{nodeID: n.GetNodeId(), spoolID: id, node: n}
			by[spoolKey(s.nodeID, s.spoolID)] = s
			spools = append(spools, s)
		}
	}
	slices.SortFunc(spools, func(a, b *spool) int {
		return strings.Compare(spoolKey(a.nodeID, a.spoolID), spoolKey(b.nodeID, b.spoolID))
	})
	return spools, relayErr, nil
}

// ripen sets each spool's ripe seq from what its node reported before,
// and remembers what it reports now. A node's last seq only grows within
// a spool, so an older report is a lower bound on what it has spooled
// for at least that long.
func (r *Reconciler) ripen(now time.Time, spools []*spool) {
	live := map[string]bool{}
	for _, s := range spools {
		last := s.node.GetUsage().GetLastSeq()
		if last == 0 {
			continue
		}
		k := spoolKey(s.nodeID, s.spoolID)
		live[k] = true
		old, ok := r.seen[k]
		switch {
		case !ok || last < old.last:
			r.seen[k] = seenSeq{last: last, at: now}
		case now.Sub(old.at) >= r.opts.Grace:
			s.ripe = old.last
			if last > old.last {
				r.seen[k] = seenSeq{last: last, at: now}
			}
		}
	}
	for k := range r.seen {
		if !live[k] {
			delete(r.seen, k) // the node is gone, or runs another spool
		}
	}
}

// span is a range of seqs, both ends included.
type span struct{ from, to uint64 }

// gaps returns a spool's gaps (step 1 of the package doc).
func (s *spool) gaps() []span {
	var out []span
	add := func(from, to uint64) {
		if from > to {
			return
		}
		if n := len(out); n > 0 && out[n-1].to+1 >= from {
			out[n-1].to = max(out[n-1].to, to)
			return
		}
		out = append(out, span{from, to})
	}
	highest := uint64(0)
	if q := s.seq; q != nil {
		highest = q.Highest
		for _, m := range q.Missing {
			if m > q.Contiguous && m <= q.Highest {
				add(m, m)
			}
		}
		switch {
		case q.Highest > q.Contiguous && len(q.Missing) == 0:
			// The store did not say what is missing: ask for it all.
			add(q.Contiguous+1, q.Highest)
		case len(q.Missing) >= missingLimit:
			// Missing was cut short: everything above its last up to
			// the highest may be missing too.
			add(q.Missing[len(q.Missing)-1]+1, q.Highest)
		}
	}
	if last := s.node.GetUsage().GetLastSeq(); last > highest {
		add(highest+1, last)
	}
	if len(out) > maxRanges {
		out[maxRanges-1].to = out[len(out)-1].to
		out = out[:maxRanges]
	}
	return out
}

// resend reports a spool's gaps and asks its node to re-send them when
// it is connected: the gaps below the store's highest, and a trailing gap
// up to the spool's ripe seq. The part of a trailing gap above it is
// reported, not asked for.
func (r *Reconciler) resend(ctx context.Context, s *spool) []*quotav1.Gap {
	limit := s.ripe
	if s.seq != nil {
		limit = max(limit, s.seq.Highest)
	}
	var out []*quotav1.Gap
	for _, g := range s.gaps() {
		if g.from <= limit && g.to > limit {
			out = append(out, r.ask(ctx, s, span{g.from, limit}))
			g.from = limit + 1
		}
		if g.from > limit {
			out = append(out, &quotav1.Gap{NodeId: s.nodeID, SpoolId: s.spoolID, FromSeq: g.from, ToSeq: g.to})
			continue
		}
		out = append(out, r.ask(ctx, s, g))
	}
	return out
}

// ask asks a spool's node to re-send g, when it is connected.
func (r *Reconciler) ask(ctx context.Context, s *spool, g span) *quotav1.Gap {
	gap := &quotav1.Gap{NodeId: s.nodeID, SpoolId: s.spoolID, FromSeq: g.from, ToSeq: g.to}
	if s.node == nil {
		return gap
	}
	rctx, cancel := context.WithTimeout(ctx, relayTimeout)
	err := r.opts.Relay.Resend(rctx, s.nodeID, &distributionv1.ResendUsage{SpoolId: s.spoolID, FromSeq: g.from, ToSeq: g.to})
	cancel()
	if err != nil {
		r.log.WarnContext(ctx, "reconcile: could not ask for a re-send", "node", s.nodeID, "spool", s.spoolID, "from", g.from, "to", g.to, "err", err)
		return gap
	}
	gap.Requested = true
	return gap
}

// late sums the late_window adjustments booked into period, per total.
func (r *Reconciler) late(ctx context.Context, period string) (map[store.Key][2]int64, error) {
	adjs, err := r.store.Adjustments(ctx, period)
	if err != nil {
		return nil, fmt.Errorf("reconcile: reading %s's adjustments: %w", period, err)
	}
	out := map[store.Key][2]int64{}
	for _, a := range adjs {
		if a.Kind != kindLateWindow {
			continue
		}
		v := out[a.Key]
		v[0] += a.Counted
		v[1] += a.Billable
		out[a.Key] = v
	}
	return out, nil
}

// kindLateWindow is the store's adjustment kind of a late window.
const kindLateWindow = "late_window"

// totals reads every total of period.
func (r *Reconciler) totals(ctx context.Context, period string) (map[store.Key]store.Total, []store.Total, error) {
	byKey := map[store.Key]store.Total{}
	var all []store.Total
	f := store.TotalsFilter{Period: period, Limit: pageSize}
	for {
		ts, more, err := r.store.Totals(ctx, f)
		if err != nil {
			return nil, nil, fmt.Errorf("reconcile: reading %s's totals: %w", period, err)
		}
		for _, t := range ts {
			byKey[t.Key] = t
		}
		all = append(all, ts...)
		if !more || len(ts) == 0 {
			return byKey, all, nil
		}
		f.After = ts[len(ts)-1].Key
	}
}

// corrections compares the recount with the live totals (step 2 of the
// package doc).
func (r *Reconciler) corrections(ctx context.Context, period string) ([]store.Correction, error) {
	before, _, err := r.totals(ctx, period)
	if err != nil {
		return nil, err
	}
	recount, err := r.store.Recount(ctx, period)
	if err != nil {
		return nil, fmt.Errorf("reconcile: recounting %s: %w", period, err)
	}
	after, _, err := r.totals(ctx, period)
	if err != nil {
		return nil, err
	}
	keys := map[store.Key]bool{}
	for k := range recount {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	var out []store.Correction
	for k := range keys {
		b, inBefore := before[k]
		a, inAfter := after[k]
		if inBefore != inAfter || inAfter && !unchanged(a, b) {
			continue // a window came in while we read: the next run
		}
		want := recount[k]
		dc := int64(want.Counted) - int64(a.Counts.Counted)
		db := int64(want.Billable) - int64(a.Counts.Billable)
		if dc == 0 && db == 0 {
			continue
		}
		out = append(out, store.Correction{Key: k, Counted: dc, Billable: db,
			ExpectCounted: a.Counts.Counted, ExpectBillable: a.Counts.Billable, Reason: fmt.Sprintf(
				"the windows booked into the period add up to %d counted, %d billable; the total said %d, %d",
				want.Counted, want.Billable, a.Counts.Counted, a.Counts.Billable)})
	}
	slices.SortFunc(out, func(a, b store.Correction) int { return compareKeys(a.Key, b.Key) })
	return out, nil
}

func unchanged(a, b store.Total) bool {
	return a.Counts == b.Counts && a.Adjusted == b.Adjusted && a.Updated.Equal(b.Updated)
}

func compareKeys(a, b store.Key) int {
	if c := strings.Compare(a.Subject, b.Subject); c != 0 {
		return c
	}
	if c := strings.Compare(a.Product, b.Product); c != 0 {
		return c
	}
	return strings.Compare(a.Period, b.Period)
}

// writtenOff is a spool a close would write off: what Finalise records,
// what the report's Blocked notes and WrittenOff list.
type writtenOff struct {
	record store.WriteOff
	notes  []string
	gaps   []*quotav1.Gap
}

// blockers returns why period cannot close (step 4 of the package doc),
// and the spools of written-off nodes (writeOff) it would close without,
// in spool order.
func (r *Reconciler) blockers(ctx context.Context, period string, start, end time.Time, spools []*spool,
	relayErr error, mismatches []*quotav1.CounterMismatch, writeOff map[string]bool) (blocked []string, offs []*writtenOff, err error) {
	if relayErr != nil {
		blocked = append(blocked, fmt.Sprintf("the relay did not answer, so the connected nodes' spools are unknown: %v", relayErr))
	}
	later, err := r.store.SpoolPeriods(ctx, next(period))
	if err != nil {
		return nil, nil, fmt.Errorf("reconcile: reading %s's spools: %w", next(period), err)
	}
	firstLater := map[string]uint64{}
	for _, sp := range later {
		firstLater[spoolKey(sp.NodeID, sp.SpoolID)] = sp.FirstSeq
	}
	mine, err := r.store.SpoolPeriods(ctx, period)
	if err != nil {
		return nil, nil, fmt.Errorf("reconcile: reading %s's spools: %w", period, err)
	}
	counters := map[string]store.SpoolPeriod{}
	for _, sp := range mine {
		counters[spoolKey(sp.NodeID, sp.SpoolID)] = sp
	}
	bySpool := map[string]*writtenOff{}
	off := func(nodeID, spoolID string, s *spool, note string) {
		k := spoolKey(nodeID, spoolID)
		o := bySpool[k]
		if o == nil {
			o = &writtenOff{record: store.WriteOff{NodeID: nodeID, SpoolID: spoolID}}
			if s != nil {
				o.record.Missing = s.missing()
				for _, g := range s.gaps() {
					o.gaps = append(o.gaps, &quotav1.Gap{NodeId: nodeID, SpoolId: spoolID, FromSeq: g.from, ToSeq: g.to})
				}
			}
			if len(o.gaps) == 0 {
				o.gaps = []*quotav1.Gap{{NodeId: nodeID, SpoolId: spoolID}}
			}
			bySpool[k] = o
			offs = append(offs, o)
		}
		o.notes = append(o.notes, "written off: "+note)
		if o.record.Reason != "" {
			o.record.Reason += "; "
		}
		o.record.Reason += note
	}
	for _, s := range spools {
		why := s.open(start, end, firstLater[spoolKey(s.nodeID, s.spoolID)])
		if why == "" {
			continue
		}
		if !writeOff[s.nodeID] {
			blocked = append(blocked, why)
			continue
		}
		if sp, ok := counters[spoolKey(s.nodeID, s.spoolID)]; ok && sp.NodeCounted >= sp.Counted && sp.NodeBillable >= sp.Billable {
			why += fmt.Sprintf("; its own counters say %d counted, %d billable of the period are not in",
				sp.NodeCounted-sp.Counted, sp.NodeBillable-sp.Billable)
		}
		off(s.nodeID, s.spoolID, s, why)
	}
	spoolOf := map[string]*spool{}
	for _, s := range spools {
		spoolOf[spoolKey(s.nodeID, s.spoolID)] = s
	}
	for _, m := range mismatches {
		why := fmt.Sprintf("node %s spool %s: its own counters through seq %d say %d counted, %d billable; its windows add up to %d, %d",
			m.GetNodeId(), m.GetSpoolId(), m.GetSeq(), m.GetNodeCounted(), m.GetNodeBillable(), m.GetWindowsCounted(), m.GetWindowsBillable())
		if writeOff[m.GetNodeId()] {
			off(m.GetNodeId(), m.GetSpoolId(), spoolOf[spoolKey(m.GetNodeId(), m.GetSpoolId())], why)
			continue
		}
		blocked = append(blocked, why)
	}
	return blocked, offs, nil
}

// open returns why s is not closed for the period [start, end) ("" when
// it is), given the lowest seq of its windows of the next period (0:
// none).
func (s *spool) open(start, end time.Time, firstLater uint64) string {
	q, n := s.seq, s.node
	last := n.GetUsage().GetLastSeq()
	if q == nil {
		if last == 0 {
			return "" // (d)
		}
		return fmt.Sprintf("%s: the node spooled windows through seq %d and none is in yet", s.name(), last)
	}
	switch {
	case firstLater > 0 && firstLater <= q.Contiguous: // (a)
		return ""
	case firstLater == 0 && !q.LastWindow.IsZero() && !q.LastWindow.Before(end) && q.Contiguous == q.Highest && last <= q.Highest:
		return "" // (a), with the window after the end in a period after the next
	case !q.LastWindow.IsZero() && q.LastWindow.Before(start) && last <= q.Highest:
		return "" // (b)
	case n == nil && q.Contiguous == q.Highest: // (c)
		return ""
	case n == nil:
		return fmt.Sprintf("%s is not connected and its windows %s are missing: they are lost unless it comes back (or write the node off: porticoctl usage reconcile --finalise --write-off NODE)",
			s.name(), s.missing())
	}
	return fmt.Sprintf("%s: no window from the period's end on is in with every window before it (contiguous through seq %d, highest %d, spooled through %d)",
		s.name(), q.Contiguous, q.Highest, last)
}

// missing describes a spool's gaps.
func (s *spool) missing() string {
	var b strings.Builder
	for i, g := range s.gaps() {
		if i > 0 {
			b.WriteString(", ")
		}
		if g.from == g.to {
			fmt.Fprint(&b, g.from)
		} else {
			fmt.Fprintf(&b, "%d-%d", g.from, g.to)
		}
	}
	return b.String()
}
