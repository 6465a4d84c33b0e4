package store

import (
	"context"
	"database/sql"
	"time"
)

// SpoolPeriod is what one node spool's windows of a period add up to,
// and what the node's own counters said.
type SpoolPeriod struct {
	NodeID, SpoolID string
	// FirstSeq and LastSeq: the lowest and highest seq of the spool's
	// windows of the period (whole windows only).
	FirstSeq, LastSeq uint64
	// Counted and Billable sum the windows' totals.
	Counted, Billable uint64
	// NodeCounted and NodeBillable are the period counters of the window
	// LastSeq (UsageWindow.period_counted, period_billable).
	NodeCounted, NodeBillable uint64
	// LastEnd is the end of the window LastSeq.
	LastEnd time.Time
}

// SpoolPeriods returns, per node spool in (node, spool) order, what its
// whole windows of period add up to (windows of the period booked late
// into a later one included), read in one snapshot.
func (s *Store) SpoolPeriods(ctx context.Context, period string) ([]SpoolPeriod, error) {
	var out []SpoolPeriod
	err := s.db.ReadTx(ctx, func(tx *sql.Tx) error {
		out = nil
		rows, err := tx.QueryContext(ctx, s.db.Rebind(`SELECT node_id, spool_id, MIN(seq), MAX(seq),
			CAST(SUM(counted) AS BIGINT), CAST(SUM(billable) AS BIGINT)
			FROM quota_windows WHERE period = ? AND parts_seen = parts
			GROUP BY node_id, spool_id ORDER BY node_id, spool_id`), period)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p SpoolPeriod
			var first, last, counted, billable int64
			if err := rows.Scan(&p.NodeID, &p.SpoolID, &first, &last, &counted, &billable); err != nil {
				return err
			}
			p.FirstSeq, p.LastSeq, p.Counted, p.Billable = uint64(first), uint64(last), uint64(counted), uint64(billable)
			out = append(out, p)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		for i := range out {
			p := &out[i]
			var counted, billable, end int64
			if err := tx.QueryRowContext(ctx, s.db.Rebind(`SELECT period_counted, period_billable, end_at FROM quota_windows
				WHERE node_id = ? AND spool_id = ? AND seq = ?`), p.NodeID, p.SpoolID, int64(p.LastSeq)).Scan(&counted, &billable, &end); err != nil {
				return err
			}
			p.NodeCounted, p.NodeBillable, p.LastEnd = uint64(counted), uint64(billable), fromMicros(end)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err, "reading the spools' windows of %s", period)
	}
	return out, nil
}
