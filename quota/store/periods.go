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

// Finalise makes period final at t: its totals never change again, and
// a late window of it is booked into the next period that is not final.
// ErrFinal if it already is.
func (s *Store) Finalise(ctx context.Context, period string, t time.Time) error {
	if _, err := parsePeriod(period); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
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
		return err
	})
	return wrap(err, "finalising %s", period)
}
