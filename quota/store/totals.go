package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
)

// maxTotals caps the totals one call of Totals returns.
const maxTotals = 10000

// Key names one total.
type Key struct {
	Subject, Product, Period string
}

// Counts are a total's figures.
type Counts struct {
	Counted, Billable uint64
	ByClass           [6]uint64
}

// Total is one subject's usage of one product in one period.
type Total struct {
	Key
	Caller *quotav1.Caller // the last caller fields seen (app, tenant, plan)
	// Counts include every adjustment of the period.
	Counts Counts
	// Adjusted is the adjustments' net effect on Counted: the
	// reconciler's corrections and the late windows of earlier, final
	// periods booked into this one.
	Adjusted int64
	Updated  time.Time
}

const totalColumns = `period, subject, product, key_id, app_id, tenant, plan, counted, billable,
	class0, class1, class2, class3, class4, class5, adjusted, updated`

var totalInsertColumns = columns([]string{"period", "subject", "product", "key_id", "app_id", "tenant", "plan"},
	"counted", "billable", "class0", "class1", "class2", "class3", "class4", "class5", "adjusted", "updated")

// addTotals adds a part's totals to period's; late says they are a late
// window's, and so an adjustment.
func (s *Store) addTotals(ctx context.Context, tx *sql.Tx, period string, totals []totalRow, late bool, t time.Time) error {
	return s.insertMany(ctx, tx, "quota_totals", totalInsertColumns, `ON CONFLICT (period, subject, product) DO UPDATE SET
		key_id = excluded.key_id, app_id = excluded.app_id, tenant = excluded.tenant, plan = excluded.plan,
		counted = quota_totals.counted + excluded.counted, billable = quota_totals.billable + excluded.billable,
		class0 = quota_totals.class0 + excluded.class0, class1 = quota_totals.class1 + excluded.class1,
		class2 = quota_totals.class2 + excluded.class2, class3 = quota_totals.class3 + excluded.class3,
		class4 = quota_totals.class4 + excluded.class4, class5 = quota_totals.class5 + excluded.class5,
		adjusted = quota_totals.adjusted + excluded.adjusted, updated = excluded.updated`,
		len(totals), func(i int, args []any) []any {
			r := &totals[i]
			c := &r.counts
			var adjusted int64
			if late {
				adjusted = int64(c.Counted)
			}
			return append(args, period, r.subject, r.product,
				r.caller.GetKeyId(), r.caller.GetAppId(), r.caller.GetTenant(), r.caller.GetPlan(),
				int64(c.Counted), int64(c.Billable),
				int64(c.ByClass[0]), int64(c.ByClass[1]), int64(c.ByClass[2]), int64(c.ByClass[3]), int64(c.ByClass[4]), int64(c.ByClass[5]),
				adjusted, micros(t))
		})
}

// Total returns one total; ErrNotFound if nothing was counted.
func (s *Store) Total(ctx context.Context, k Key) (Total, error) {
	ts, err := s.scanTotals(s.db.SQL().QueryContext(ctx, s.db.Rebind("SELECT "+totalColumns+
		" FROM quota_totals WHERE period = ? AND subject = ? AND product = ?"), k.Period, k.Subject, k.Product))
	if err != nil {
		return Total{}, wrap(err, "reading the total %s %q of %s", k.Subject, k.Product, k.Period)
	}
	if len(ts) == 0 {
		return Total{}, wrap(ErrNotFound, "")
	}
	return ts[0], nil
}

// TotalsFilter selects totals. Empty fields select all.
type TotalsFilter struct {
	Period, Subject, Tenant string
	// After is the page token: the last key of the previous page.
	After Key
	Limit int // 0: 1,000
}

// Totals returns totals in (subject, product) order (then period), at
// most Limit (at most 10,000), and whether more follow. Tenant selects
// the totals whose caller, as last seen, has that tenant.
func (s *Store) Totals(ctx context.Context, f TotalsFilter) (totals []Total, more bool, err error) {
	n := f.Limit
	if n <= 0 {
		n = 1000
	}
	n = min(n, maxTotals)
	q := "SELECT " + totalColumns + " FROM quota_totals WHERE 1 = 1"
	var args []any
	if f.Period != "" {
		q += " AND period = ?"
		args = append(args, f.Period)
	}
	if f.Subject != "" {
		q += " AND subject = ?"
		args = append(args, f.Subject)
	}
	if f.Tenant != "" {
		q += " AND tenant = ?"
		args = append(args, f.Tenant)
	}
	if f.After != (Key{}) {
		q += " AND (subject > ? OR (subject = ? AND (product > ? OR (product = ? AND period > ?))))"
		args = append(args, f.After.Subject, f.After.Subject, f.After.Product, f.After.Product, f.After.Period)
	}
	q += " ORDER BY subject, product, period LIMIT ?"
	args = append(args, n+1)
	totals, err = s.scanTotals(s.db.SQL().QueryContext(ctx, s.db.Rebind(q), args...))
	if err != nil {
		return nil, false, wrap(err, "listing totals")
	}
	if len(totals) > n {
		return totals[:n], true, nil
	}
	return totals, false, nil
}

func (s *Store) scanTotals(rows *sql.Rows, err error) ([]Total, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Total
	for rows.Next() {
		var (
			t                 Total
			c                 quotav1.Caller
			counted, billable int64
			class             [6]int64
			adjusted, updated int64
		)
		if err := rows.Scan(&t.Period, &t.Subject, &t.Product, &c.KeyId, &c.AppId, &c.Tenant, &c.Plan, &counted, &billable,
			&class[0], &class[1], &class[2], &class[3], &class[4], &class[5], &adjusted, &updated); err != nil {
			return nil, err
		}
		t.Caller = &c
		t.Counts.Counted, t.Counts.Billable = uint64(counted), uint64(billable)
		for i, v := range class {
			t.Counts.ByClass[i] = uint64(v)
		}
		t.Adjusted, t.Updated = adjusted, fromMicros(updated)
		out = append(out, t)
	}
	return out, rows.Err()
}

// Recount sums, per key, the stored rows of every window part booked into
// period: its own windows that arrived while it was open, and the late
// windows of earlier, final periods booked into it. That is what the
// period's totals must equal but for the reconciler's corrections, which
// are what make them equal when they drifted: compare a recount with the
// totals, and correct the difference.
func (s *Store) Recount(ctx context.Context, period string) (map[Key]Counts, error) {
	out := make(map[Key]Counts)
	err := s.db.ReadTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, s.db.Rebind(`SELECT subject, product, class, CAST(SUM(counted) AS BIGINT), CAST(SUM(billable) AS BIGINT)
			FROM quota_window_rows WHERE period = ? GROUP BY subject, product, class`), period)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				k                 = Key{Period: period}
				class             int
				counted, billable int64
			)
			if err := rows.Scan(&k.Subject, &k.Product, &class, &counted, &billable); err != nil {
				return err
			}
			if class < 0 || class > 5 {
				return errors.New("a stored row of status class out of range")
			}
			c := out[k]
			c.Counted += uint64(counted)
			c.Billable += uint64(billable)
			c.ByClass[class] += uint64(counted)
			out[k] = c
		}
		return rows.Err()
	})
	if err != nil {
		return nil, wrap(err, "recounting %s", period)
	}
	return out, nil
}
