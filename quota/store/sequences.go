package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
)

// Sequence is how far the store has one node spool's windows.
type Sequence struct {
	NodeID, SpoolID, Region string
	// Contiguous: every window 1..Contiguous is wholly in.
	Contiguous uint64
	// Highest seq with any part in.
	Highest uint64
	// Missing seqs above Contiguous up to Highest that are not wholly in
	// (Highest itself among them when some of its parts are missing), at
	// most limit of them, in order.
	Missing []uint64
	// LastWindow is the latest start of the spool's windows.
	LastWindow time.Time
}

// Sequences returns every node spool's sequence, in (node, spool) order,
// with up to limit missing seqs each (0: 1,000), read in one snapshot.
func (s *Store) Sequences(ctx context.Context, limit int) ([]Sequence, error) {
	if limit <= 0 {
		limit = 1000
	}
	var out []Sequence
	err := s.db.ReadTx(ctx, func(tx *sql.Tx) error {
		out = nil
		rows, err := tx.QueryContext(ctx, `SELECT node_id, spool_id, region, contiguous, highest, last_window
			FROM quota_spools ORDER BY node_id, spool_id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				q                   Sequence
				contiguous, highest int64
				last                int64
			)
			if err := rows.Scan(&q.NodeID, &q.SpoolID, &q.Region, &contiguous, &highest, &last); err != nil {
				return err
			}
			q.Contiguous, q.Highest, q.LastWindow = uint64(contiguous), uint64(highest), fromMicros(last)
			out = append(out, q)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		for i := range out {
			if out[i].Highest > out[i].Contiguous {
				if out[i].Missing, err = s.missing(ctx, tx, &out[i], limit); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err, "reading the sequences")
	}
	return out, nil
}

// missing returns up to limit seqs of q above its contiguous mark, up to
// its highest, that are not wholly in: the gaps between the whole
// windows above the mark, and the seqs above the last of them.
func (s *Store) missing(ctx context.Context, tx *sql.Tx, q *Sequence, limit int) ([]uint64, error) {
	// Each whole window above the mark with the whole window before it
	// (or the mark): where the two are not adjacent, the seqs between
	// are missing.
	rows, err := tx.QueryContext(ctx, s.db.Rebind(`SELECT prev, seq FROM (
			SELECT seq, LAG(seq, 1, CAST(? AS BIGINT)) OVER (ORDER BY seq) AS prev
			FROM quota_windows WHERE node_id = ? AND spool_id = ? AND seq > ? AND parts_seen = parts
		) whole WHERE seq > prev + 1 ORDER BY seq LIMIT ?`),
		int64(q.Contiguous), q.NodeID, q.SpoolID, int64(q.Contiguous), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() && len(out) < limit {
		var prev, seq int64
		if err := rows.Scan(&prev, &seq); err != nil {
			return nil, err
		}
		for m := uint64(prev) + 1; m < uint64(seq) && len(out) < limit; m++ {
			out = append(out, m)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	var last sql.NullInt64
	if err := tx.QueryRowContext(ctx, s.db.Rebind(`SELECT MAX(seq) FROM quota_windows
		WHERE node_id = ? AND spool_id = ? AND seq > ? AND parts_seen = parts`), q.NodeID, q.SpoolID, int64(q.Contiguous)).Scan(&last); err != nil {
		return nil, err
	}
	from := q.Contiguous
	if last.Valid {
		from = uint64(last.Int64)
	}
	for m := from + 1; m <= q.Highest && len(out) < limit; m++ {
		out = append(out, m)
	}
	return out, nil
}

// advanceSpool records the part in its spool's sequence: the highest seq,
// the latest window, and, when the part made its window whole, the
// contiguous mark, which climbs over every whole window after it. When
// the mark rose it queues the new mark in the outbox with the next rev
// and returns it.
func (s *Store) advanceSpool(ctx context.Context, tx *sql.Tx, w *quotav1.UsageWindow, whole bool) (*configv1.UsageMark, error) {
	var (
		region                    string
		contiguous, highest, last int64
		seq                       = int64(w.GetSeq())
		start                     = micros(w.GetStart().AsTime())
	)
	err := tx.QueryRowContext(ctx, s.db.Rebind(`SELECT region, contiguous, highest, last_window FROM quota_spools
		WHERE node_id = ? AND spool_id = ?`), w.GetNodeId(), w.GetSpoolId()).Scan(&region, &contiguous, &highest, &last)
	if errors.Is(err, sql.ErrNoRows) {
		if _, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO quota_spools (node_id, spool_id, region, contiguous, highest, last_window)
			VALUES (?, ?, ?, 0, 0, 0)`), w.GetNodeId(), w.GetSpoolId(), w.GetRegion()); err != nil {
			return nil, err
		}
		region = w.GetRegion()
	} else if err != nil {
		return nil, err
	}
	was := contiguous
	if whole && seq == contiguous+1 {
		contiguous = seq
		// Climb over the whole windows that arrived before this one.
		for {
			n, next, err := s.wholeAfter(ctx, tx, w.GetNodeId(), w.GetSpoolId(), contiguous)
			if err != nil {
				return nil, err
			}
			contiguous = next
			if n < climbBatch {
				break
			}
		}
	}
	if w.GetRegion() != "" {
		region = w.GetRegion()
	}
	if _, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE quota_spools SET region = ?, contiguous = ?, highest = ?, last_window = ?
		WHERE node_id = ? AND spool_id = ?`), region, contiguous, max(highest, seq), max(last, start), w.GetNodeId(), w.GetSpoolId()); err != nil {
		return nil, err
	}
	if contiguous == was {
		return nil, nil
	}
	rev, err := s.nextRev(ctx, tx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO quota_marks (node_id, spool_id, seq, rev) VALUES (?, ?, ?, ?)
		ON CONFLICT (node_id, spool_id) DO UPDATE SET seq = excluded.seq, rev = excluded.rev`),
		w.GetNodeId(), w.GetSpoolId(), contiguous, rev); err != nil {
		return nil, err
	}
	return &configv1.UsageMark{NodeId: w.GetNodeId(), SpoolId: w.GetSpoolId(), Seq: uint64(contiguous)}, nil
}

// climbBatch is how many whole windows one query of the climb reads.
const climbBatch = 1000

// wholeAfter reads up to climbBatch whole windows above from and returns
// how many it read and the end of the run of consecutive seqs from
// from+1 among them (from if there is none).
func (s *Store) wholeAfter(ctx context.Context, tx *sql.Tx, node, spool string, from int64) (n int, to int64, err error) {
	rows, err := tx.QueryContext(ctx, s.db.Rebind(`SELECT seq FROM quota_windows
		WHERE node_id = ? AND spool_id = ? AND seq > ? AND parts_seen = parts ORDER BY seq LIMIT ?`), node, spool, from, climbBatch)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	to = from
	broken := false
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return 0, 0, err
		}
		n++
		if !broken && seq == to+1 {
			to = seq
		} else {
			broken = true
		}
	}
	if broken {
		n = 0 // stop climbing
	}
	return n, to, rows.Err()
}
