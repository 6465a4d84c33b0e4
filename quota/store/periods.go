package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// PeriodState is where a period stands.
type PeriodState struct {
	Period         string
	Final          bool
	Finalised      time.Time
	LastReconciled time.Time
}

// parsePeriod returns the start of period, a calendar month in UTC
// written "2026-12".
func parsePeriod(period string) (time.Time, error) {
	t, err := time.Parse("2006-01", period)
	if err != nil || t.Format("2006-01") != period {
		return time.Time{}, fmt.Errorf("period %q is no month (2026-12)", period)
	}
	return t, nil
}

// Period returns a period's state (a period never reconciled is not
// final, with zero times).
func (s *Store) Period(ctx context.Context, period string) (PeriodState, error) {
	if _, err := parsePeriod(period); err != nil {
		return PeriodState{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	st, err := s.period(ctx, s.db.SQL(), period)
	return st, wrap(err, "reading period %s", period)
}

func (s *Store) period(ctx context.Context, q querier, period string) (PeriodState, error) {
	st := PeriodState{Period: period}
	var final int
	var finalised, reconciled int64
	err := q.QueryRowContext(ctx, s.db.Rebind("SELECT final, finalised, last_reconciled FROM quota_periods WHERE period = ?"), period).
		Scan(&final, &finalised, &reconciled)
	if errors.Is(err, sql.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return PeriodState{}, err
	}
	st.Final, st.Finalised, st.LastReconciled = final != 0, fromMicros(finalised), fromMicros(reconciled)
	return st, nil
}

// openPeriod returns period if it is not final, else the first period
// after it that is not.
func (s *Store) openPeriod(ctx context.Context, tx *sql.Tx, period string) (string, error) {
	t, err := parsePeriod(period)
	if err != nil {
		return "", err
	}
	for {
		st, err := s.period(ctx, tx, period)
		if err != nil {
			return "", err
		}
		if !st.Final {
			return period, nil
		}
		t = t.AddDate(0, 1, 0)
		period = t.Format("2006-01")
	}
}

// Reconciled records that the reconciler ran over period at t.
func (s *Store) Reconciled(ctx context.Context, period string, t time.Time) error {
	if _, err := parsePeriod(period); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO quota_periods (period, final, finalised, last_reconciled) VALUES (?, 0, 0, ?)
			ON CONFLICT (period) DO UPDATE SET last_reconciled = excluded.last_reconciled`), period, micros(t))
		return err
	})
	return wrap(err, "recording a reconciliation of %s", period)
}

// WriteOff is a node spool whose missing windows a period was closed
// without: the operator gave up on them (its disk is gone). Finalise
// records it as an adjustment of kind "write_off" with counts zero (what
// was lost is not known) and Source naming the node, the spool and the
// missing seqs.
type WriteOff struct {
	NodeID, SpoolID string
	// Missing names the seqs given up on ("4-9, 12"); empty when none is
	// known (its windows after the period's end did not arrive, or its
	// own counters disagree with its windows).
	Missing string
	// Reason says why the spool kept the period open, and what the
	// node's own counters say is missing when they tell.
	Reason string
}

// source is a write-off's adjustment source.
func (w WriteOff) source() string {
	s := "write-off of node " + w.NodeID + " spool " + w.SpoolID
	if w.Missing != "" {
		s += " seqs " + w.Missing
	}
	return s
}

// Finalise makes period final at t: its totals never change again, and
// a late window of it is booked into the next period that is not final.
// Each of writeOffs is recorded as an adjustment of the period of kind
// "write_off" in the same transaction, so that a period closed without
// a spool's windows always says so. ErrFinal, and nothing recorded, if
// it already is final; ErrInvalid for a write-off without a node or a
// spool.
func (s *Store) Finalise(ctx context.Context, period string, t time.Time, writeOffs ...WriteOff) error {
	if _, err := parsePeriod(period); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	for _, w := range writeOffs {
		if w.NodeID == "" || w.SpoolID == "" {
			return fmt.Errorf("%w: a write-off of node %q spool %q", ErrInvalid, w.NodeID, w.SpoolID)
		}
	}
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		st, err := s.period(ctx, tx, period)
		if err != nil {
			return err
		}
		if st.Final {
			return fmt.Errorf("%w: %s was finalised at %s", ErrFinal, period, st.Finalised.Format(time.RFC3339))
		}
		_, err = tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO quota_periods (period, final, finalised, last_reconciled) VALUES (?, 1, ?, 0)
			ON CONFLICT (period) DO UPDATE SET final = 1, finalised = excluded.finalised`), period, micros(t))
		if err != nil {
			return err
		}
		return s.insertMany(ctx, tx, "quota_adjustments", adjustmentColumns, "", len(writeOffs), func(i int, args []any) []any {
			w := &writeOffs[i]
			return append(args, period, "", "", "write_off", w.source(), w.Reason, int64(0), int64(0), micros(t))
		})
	})
	return wrap(err, "finalising %s", period)
}
