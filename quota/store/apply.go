package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
)

// maxCount bounds every count a window carries, far above what a node
// counts in a window and far enough below the databases' signed 64-bit
// integers that no sum of a period's windows overflows them.
const maxCount = 1 << 50

// Applied is what Apply did with a window part.
type Applied struct {
	// Duplicate: the part (node, spool, seq, part) was applied before;
	// nothing changed.
	Duplicate bool
	// LateInto is set when the part's period is final: its counts were
	// booked as a late_window adjustment into this period (the first
	// period after it that is not final) instead.
	LateInto string
	// Mark is set when the spool's contiguous high-water mark rose: the
	// new mark, whose fast-lane rev the outbox assigned.
	Mark *configv1.UsageMark
}

// Apply records the part w as seen and adds its rows to the totals of
// its period, in one transaction; a part seen before is a no-op. It
// also stores the part's rows per (subject, product, status class) as
// the window's record for recounts, and advances the spool's sequence
// (contiguous mark, highest, last window), queuing a new UsageMark in
// the outbox when the contiguous mark rises. A window of several parts
// counts towards contiguity once every part is in.
//
// A part is refused with ErrInvalid, and nothing is written, when it is
// malformed: no node, spool or seq; a part out of range; a period that is
// no month; rows whose status class is above 5, whose billable exceed
// their counted, or whose counts exceed the window's Counted or Billable;
// the one part of a window whose rows do not add up to them exactly, or
// the last part of one whose parts' rows do not; a part that disagrees
// with the window's earlier parts (parts, period, times, counts).
//
// When w's period is final its counts are booked into the first period
// after it that is not final, as adjustments of kind "late_window", and
// Applied.LateInto names that period.
func (s *Store) Apply(ctx context.Context, w *quotav1.UsageWindow) (Applied, error) {
	id := fmt.Sprintf("%s/%s/%d part %d", w.GetNodeId(), w.GetSpoolId(), w.GetSeq(), w.GetPart())
	p, err := check(w)
	if err != nil {
		return Applied{}, fmt.Errorf("%w: window %s: %v", ErrInvalid, id, err)
	}
	var out Applied
	err = s.db.InTx(ctx, func(tx *sql.Tx) error {
		out = Applied{}
		res, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO quota_seen (node_id, spool_id, seq, part, applied_at)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (node_id, spool_id, seq, part) DO NOTHING`),
			w.GetNodeId(), w.GetSpoolId(), int64(w.GetSeq()), int64(w.GetPart()), micros(now()))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			out.Duplicate = true
			return nil
		}
		windowID, whole, err := s.addPart(ctx, tx, w, p)
		if err != nil {
			return err
		}
		booked, err := s.openPeriod(ctx, tx, w.GetPeriod())
		if err != nil {
			return err
		}
		late := booked != w.GetPeriod()
		t := now()
		if err := s.addTotals(ctx, tx, booked, p.totals, late, t); err != nil {
			return err
		}
		if late {
			out.LateInto = booked
			source := fmt.Sprintf("late window %s/%s/%d of %s", w.GetNodeId(), w.GetSpoolId(), w.GetSeq(), w.GetPeriod())
			if w.GetParts() > 1 {
				source += fmt.Sprintf(" (part %d of %d)", w.GetPart()+1, w.GetParts())
			}
			if err := s.addAdjustments(ctx, tx, booked, "late_window", source, lateAdjustments(p.totals), t); err != nil {
				return err
			}
		}
		if err := s.insertMany(ctx, tx, "quota_window_rows", windowRowColumns, "", len(p.rows), func(i int, args []any) []any {
			r := &p.rows[i]
			return append(args, booked, r.subject, r.product, windowID, int64(w.GetPart()), int64(r.class), int64(r.counted), int64(r.billable))
		}); err != nil {
			return err
		}
		out.Mark, err = s.advanceSpool(ctx, tx, w, whole)
		return err
	})
	if err != nil && s.db.IsData(err) {
		return Applied{}, fmt.Errorf("%w: window %s: the database refuses it: %v", ErrInvalid, id, err)
	}
	if err != nil {
		return Applied{}, wrap(err, "applying window %s", id)
	}
	return out, nil
}

var windowRowColumns = columns([]string{"period", "subject", "product"}, "window_id", "part", "class", "counted", "billable")

// part is a window part's rows, summed per total and per recount row.
type part struct {
	totals            []totalRow
	rows              []recountRow
	counted, billable uint64 // the part's rows' sums
}

type totalRow struct {
	subject, product string
	caller           *quotav1.Caller // the last row's
	counts           Counts
}

type recountRow struct {
	subject, product  string
	class             uint32
	counted, billable uint64
}

// check validates what can be checked of w without the database, and sums
// its rows.
func check(w *quotav1.UsageWindow) (*part, error) {
	switch {
	case w.GetNodeId() == "" || w.GetSpoolId() == "":
		return nil, errors.New("no node or spool id")
	case w.GetSeq() == 0 || w.GetSeq() > math.MaxInt64:
		return nil, fmt.Errorf("seq %d out of range", w.GetSeq())
	case w.GetParts() == 0 || w.GetPart() >= w.GetParts():
		return nil, fmt.Errorf("part %d of %d parts", w.GetPart(), w.GetParts())
	case w.GetStart() == nil || w.GetEnd() == nil:
		return nil, errors.New("no start or end")
	case w.GetEnd().AsTime().Before(w.GetStart().AsTime()):
		return nil, errors.New("the window ends before it starts")
	case w.GetCounted() > maxCount || w.GetPeriodCounted() > maxCount || w.GetPeriodBillable() > maxCount:
		return nil, errors.New("counts out of range")
	case w.GetBillable() > w.GetCounted():
		return nil, fmt.Errorf("billable %d above counted %d", w.GetBillable(), w.GetCounted())
	}
	if _, err := parsePeriod(w.GetPeriod()); err != nil {
		return nil, err
	}
	if !text(w.GetNodeId(), w.GetSpoolId(), w.GetRegion()) {
		return nil, errors.New("a NUL byte or invalid UTF-8 in the node, spool or region")
	}
	p := &part{}
	type tkey struct{ subject, product string }
	type rkey struct {
		tkey
		class uint32
	}
	totals := make(map[tkey]int, len(w.GetRows()))
	rows := make(map[rkey]int, len(w.GetRows()))
	for i, r := range w.GetRows() {
		switch {
		case r.GetStatusClass() > 5:
			return nil, fmt.Errorf("row %d: status class %d", i, r.GetStatusClass())
		case !text(r.GetProduct(), r.GetRouteId(), r.GetCaller().GetKeyId(), r.GetCaller().GetAppId(), r.GetCaller().GetTenant(), r.GetCaller().GetPlan()):
			return nil, fmt.Errorf("row %d: a NUL byte or invalid UTF-8 in its caller, product or route", i)
		case r.GetBillable() > r.GetCounted():
			return nil, fmt.Errorf("row %d: billable %d above counted %d", i, r.GetBillable(), r.GetCounted())
		case r.GetCounted() > w.GetCounted()-p.counted:
			return nil, fmt.Errorf("the rows count more than the window's %d", w.GetCounted())
		case r.GetBillable() > w.GetBillable()-p.billable:
			return nil, fmt.Errorf("the rows' billable exceed the window's %d", w.GetBillable())
		}
		p.counted += r.GetCounted()
		p.billable += r.GetBillable()
		k := tkey{Subject(r.GetCaller()), r.GetProduct()}
		ti, ok := totals[k]
		if !ok {
			ti = len(p.totals)
			totals[k] = ti
			p.totals = append(p.totals, totalRow{subject: k.subject, product: k.product})
		}
		t := &p.totals[ti]
		t.caller = r.GetCaller()
		t.counts.Counted += r.GetCounted()
		t.counts.Billable += r.GetBillable()
		t.counts.ByClass[r.GetStatusClass()] += r.GetCounted()
		rk := rkey{k, r.GetStatusClass()}
		ri, ok := rows[rk]
		if !ok {
			ri = len(p.rows)
			rows[rk] = ri
			p.rows = append(p.rows, recountRow{subject: k.subject, product: k.product, class: rk.class})
		}
		p.rows[ri].counted += r.GetCounted()
		p.rows[ri].billable += r.GetBillable()
	}
	if w.GetParts() == 1 && (p.counted != w.GetCounted() || p.billable != w.GetBillable()) {
		return nil, fmt.Errorf("the rows count %d (billable %d), the window %d (billable %d)",
			p.counted, p.billable, w.GetCounted(), w.GetBillable())
	}
	return p, nil
}

// text reports whether every s is valid UTF-8 without a NUL byte, as both
// databases' text columns take it (PostgreSQL refuses a NUL): a window
// that breaks it is malformed, not a write to retry.
func text(ss ...string) bool {
	for _, s := range ss {
		if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// addPart adds the part to its window's record, made by the window's
// first part, after checking it agrees with the parts before it. It
// returns the window's id and whether the window is whole now.
func (s *Store) addPart(ctx context.Context, tx *sql.Tx, w *quotav1.UsageWindow, p *part) (id int64, whole bool, err error) {
	start, end := micros(w.GetStart().AsTime()), micros(w.GetEnd().AsTime())
	var (
		parts, seen, counted, billable, periodCounted, periodBillable, rowsCounted, rowsBillable int64
		period                                                                                   string
		startAt, endAt                                                                           int64
	)
	err = tx.QueryRowContext(ctx, s.db.Rebind(`SELECT id, period, start_at, end_at, parts, parts_seen, counted, billable,
		period_counted, period_billable, rows_counted, rows_billable
		FROM quota_windows WHERE node_id = ? AND spool_id = ? AND seq = ?`), w.GetNodeId(), w.GetSpoolId(), int64(w.GetSeq())).
		Scan(&id, &period, &startAt, &endAt, &parts, &seen, &counted, &billable, &periodCounted, &periodBillable, &rowsCounted, &rowsBillable)
	if errors.Is(err, sql.ErrNoRows) {
		whole = w.GetParts() == 1
		err = tx.QueryRowContext(ctx, s.db.Rebind(`INSERT INTO quota_windows (node_id, spool_id, seq, region, period, start_at, end_at,
			parts, parts_seen, counted, billable, period_counted, period_billable, rows_counted, rows_billable, recovered)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?) RETURNING id`),
			w.GetNodeId(), w.GetSpoolId(), int64(w.GetSeq()), w.GetRegion(), w.GetPeriod(), start, end,
			int64(w.GetParts()), int64(w.GetCounted()), int64(w.GetBillable()), int64(w.GetPeriodCounted()), int64(w.GetPeriodBillable()),
			int64(p.counted), int64(p.billable), boolInt(w.GetRecovered())).Scan(&id)
		return id, whole, err
	}
	if err != nil {
		return 0, false, err
	}
	var differs string
	switch {
	case parts != int64(w.GetParts()):
		differs = fmt.Sprintf("parts (%d, earlier parts %d)", w.GetParts(), parts)
	case period != w.GetPeriod():
		differs = fmt.Sprintf("the period (%s, earlier parts %s)", w.GetPeriod(), period)
	case startAt != start || endAt != end:
		differs = "the window's start or end"
	case counted != int64(w.GetCounted()) || billable != int64(w.GetBillable()):
		differs = fmt.Sprintf("counted or billable (%d, %d; earlier parts %d, %d)", w.GetCounted(), w.GetBillable(), counted, billable)
	case periodCounted != int64(w.GetPeriodCounted()) || periodBillable != int64(w.GetPeriodBillable()):
		differs = "the period counters"
	}
	if differs != "" {
		return 0, false, fmt.Errorf("%w: window %s/%s/%d part %d disagrees with its earlier parts on %s",
			ErrInvalid, w.GetNodeId(), w.GetSpoolId(), w.GetSeq(), w.GetPart(), differs)
	}
	rowsCounted += int64(p.counted)
	rowsBillable += int64(p.billable)
	seen++
	whole = seen == parts
	switch {
	case rowsCounted > counted || rowsBillable > billable:
		return 0, false, fmt.Errorf("%w: window %s/%s/%d: its parts' rows count %d (billable %d), more than the window's %d (%d)",
			ErrInvalid, w.GetNodeId(), w.GetSpoolId(), w.GetSeq(), rowsCounted, rowsBillable, counted, billable)
	case whole && (rowsCounted != counted || rowsBillable != billable):
		return 0, false, fmt.Errorf("%w: window %s/%s/%d: its %d parts' rows count %d (billable %d), the window %d (%d)",
			ErrInvalid, w.GetNodeId(), w.GetSpoolId(), w.GetSeq(), parts, rowsCounted, rowsBillable, counted, billable)
	}
	_, err = tx.ExecContext(ctx, s.db.Rebind(`UPDATE quota_windows SET parts_seen = ?, rows_counted = ?, rows_billable = ?,
		recovered = CASE WHEN recovered = 1 OR ? = 1 THEN 1 ELSE 0 END WHERE id = ?`),
		seen, rowsCounted, rowsBillable, boolInt(w.GetRecovered()), id)
	return id, whole, err
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// lateAdjustments are the adjustments that book a late part's totals.
func lateAdjustments(totals []totalRow) []Correction {
	out := make([]Correction, len(totals))
	for i, t := range totals {
		out[i] = Correction{Key: Key{Subject: t.subject, Product: t.product}, Counted: int64(t.counts.Counted), Billable: int64(t.counts.Billable)}
	}
	return out
}
