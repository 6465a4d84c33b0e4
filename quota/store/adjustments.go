package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Correction is a difference the reconciler writes back to a total. It
// was computed against the total's figures ExpectCounted and
// ExpectBillable (zero for a total that does not exist yet), and Correct
// applies it only while the total still has them.
type Correction struct {
	Key
	Counted, Billable int64
	// ExpectCounted and ExpectBillable are the total's Counted and
	// Billable the correction was computed against.
	ExpectCounted, ExpectBillable uint64
	Reason                        string
}

// Adjustment is one recorded change outside a period's own windows.
type Adjustment struct {
	Key
	Counted, Billable int64
	// Kind is "correction", "late_window" or "write_off" (a node spool
	// whose missing windows the period was closed without: no subject,
	// counts zero).
	Kind   string
	Source string
	// Reason is the correction's or the write-off's; empty for a late
	// window.
	Reason   string
	Recorded time.Time
}

// Correct adds corrections to the live totals of period and records each
// as an adjustment of kind "correction" with source, in one transaction;
// a correction's Period may be empty (it is period's). It adds to
// Counted, Billable and Adjusted, never to a status class.
//
// A correction is applied only if its total still has the figures it
// was computed against (ExpectCounted, ExpectBillable) when the
// transaction reads it: one that another writer got to first (a window
// applied since, or another reconciler's correction) is skipped, to be
// computed again. Correct returns the corrections it applied, in the
// order given. ErrFinal if the period is final; ErrInvalid, and nothing
// written, for a correction of another period or no subject, or one
// that would take its expected total below zero.
func (s *Store) Correct(ctx context.Context, period string, cs []Correction, source string) ([]Correction, error) {
	if _, err := parsePeriod(period); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	for _, c := range cs {
		if c.Subject == "" || (c.Period != "" && c.Period != period) {
			return nil, fmt.Errorf("%w: a correction of %s %q in %s, not of a subject in %s", ErrInvalid, c.Subject, c.Product, c.Period, period)
		}
		if int64(c.ExpectCounted)+c.Counted < 0 || int64(c.ExpectBillable)+c.Billable < 0 {
			return nil, fmt.Errorf("%w: a correction of %s %q in %s by %d (billable %d) takes the total below zero",
				ErrInvalid, c.Subject, c.Product, period, c.Counted, c.Billable)
		}
	}
	var applied []Correction
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		applied = applied[:0]
		st, err := s.period(ctx, tx, period)
		if err != nil {
			return err
		}
		if st.Final {
			return fmt.Errorf("%w: %s was finalised at %s", ErrFinal, period, st.Finalised.Format(time.RFC3339))
		}
		t := now()
		for _, c := range cs {
			var counted, billable int64
			err := tx.QueryRowContext(ctx, s.db.Rebind("SELECT counted, billable FROM quota_totals WHERE period = ? AND subject = ? AND product = ?"),
				period, c.Subject, c.Product).Scan(&counted, &billable)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if counted != int64(c.ExpectCounted) || billable != int64(c.ExpectBillable) {
				continue // the total moved on: the next run computes it again
			}
			if _, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO quota_totals (`+totalColumns+`)
				VALUES (?, ?, ?, '', '', '', '', ?, ?, 0, 0, 0, 0, 0, 0, ?, ?)
				ON CONFLICT (period, subject, product) DO UPDATE SET
				counted = quota_totals.counted + excluded.counted, billable = quota_totals.billable + excluded.billable,
				adjusted = quota_totals.adjusted + excluded.adjusted, updated = excluded.updated`),
				period, c.Subject, c.Product, c.Counted, c.Billable, c.Counted, micros(t)); err != nil {
				return err
			}
			applied = append(applied, c)
		}
		return s.addAdjustments(ctx, tx, period, "correction", source, applied, t)
	})
	if err != nil {
		return nil, wrap(err, "correcting %s", period)
	}
	return applied, nil
}

var adjustmentColumns = columns([]string{"period", "subject", "product", "kind", "source", "reason"}, "counted", "billable", "recorded")

// addAdjustments records adjustments of kind into period.
func (s *Store) addAdjustments(ctx context.Context, tx *sql.Tx, period, kind, source string, cs []Correction, t time.Time) error {
	return s.insertMany(ctx, tx, "quota_adjustments", adjustmentColumns, "", len(cs), func(i int, args []any) []any {
		c := &cs[i]
		return append(args, period, c.Subject, c.Product, kind, source, c.Reason, c.Counted, c.Billable, micros(t))
	})
}

// Adjustments returns a period's adjustments in the order recorded.
func (s *Store) Adjustments(ctx context.Context, period string) ([]Adjustment, error) {
	rows, err := s.db.SQL().QueryContext(ctx, s.db.Rebind(`SELECT subject, product, counted, billable, kind, source, reason, recorded
		FROM quota_adjustments WHERE period = ? ORDER BY id`), period)
	if err != nil {
		return nil, wrap(err, "reading the adjustments of %s", period)
	}
	defer rows.Close()
	var out []Adjustment
	for rows.Next() {
		a := Adjustment{Key: Key{Period: period}}
		var recorded int64
		if err := rows.Scan(&a.Subject, &a.Product, &a.Counted, &a.Billable, &a.Kind, &a.Source, &a.Reason, &recorded); err != nil {
			return nil, wrap(err, "reading the adjustments of %s", period)
		}
		a.Recorded = fromMicros(recorded)
		out = append(out, a)
	}
	return out, wrap(rows.Err(), "reading the adjustments of %s", period)
}
