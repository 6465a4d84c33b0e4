package store

import (
	"context"
	"database/sql"
	"fmt"
	"math"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// maxChanges caps the entries one call of Changes returns.
const maxChanges = 10000

// Changes returns the spools' marks whose rev is after after, in rev
// order, at most limit of them (10,000 when limit is not positive or
// above it), as fast-lane entries: a spool whose mark rose several times
// since after appears once, with its newest mark at its latest rev.
//
// Revs are assigned in commit order, so a reader that asks again after
// the last rev it got misses no change.
func (s *Store) Changes(ctx context.Context, after uint64, limit int) ([]*configv1.FastLaneEntry, error) {
	n := limitOf(limit, maxChanges)
	rows, err := s.db.SQL().QueryContext(ctx, s.db.Rebind(`SELECT node_id, spool_id, seq, rev FROM quota_marks
		WHERE rev > ? ORDER BY rev LIMIT ?`), int64(min(after, math.MaxInt64)), n)
	if err != nil {
		return nil, wrap(err, "reading the marks changed after rev %d", after)
	}
	defer rows.Close()
	var out []*configv1.FastLaneEntry
	for rows.Next() {
		m := &configv1.UsageMark{}
		var seq, rev int64
		if err := rows.Scan(&m.NodeId, &m.SpoolId, &seq, &rev); err != nil {
			return nil, wrap(err, "reading the marks changed after rev %d", after)
		}
		m.Seq = uint64(seq)
		out = append(out, &configv1.FastLaneEntry{Rev: uint64(rev), Entry: &configv1.FastLaneEntry_UsageMark{UsageMark: m}})
	}
	return out, wrap(rows.Err(), "reading the marks changed after rev %d", after)
}

// Seq returns the last rev the outbox assigned, 0 if none yet.
func (s *Store) Seq(ctx context.Context) (uint64, error) {
	var rev int64
	if err := s.db.SQL().QueryRowContext(ctx, "SELECT rev FROM quota_seq WHERE id = 1").Scan(&rev); err != nil {
		return 0, wrap(err, "reading the sequence")
	}
	return uint64(rev), nil
}

// Advance moves the outbox's sequence forward to at least to, so that
// the next rev is above it, and reports whether it moved. It is how a
// store restored from a backup catches up with the revs the fast lane
// already holds (lanepub.Source).
func (s *Store) Advance(ctx context.Context, to uint64) (bool, error) {
	if to > math.MaxInt64 {
		return false, fmt.Errorf("%w: sequence %d is beyond the store's range", ErrInvalid, to)
	}
	moved := false
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Rebind("UPDATE quota_seq SET rev = ? WHERE id = 1 AND rev < ?"), int64(to), int64(to))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		moved = n > 0
		return err
	})
	if err != nil {
		return false, wrap(err, "advancing the sequence to %d", to)
	}
	return moved, nil
}

// nextRev assigns the next rev. The caller holds the writers' lock, so no
// other transaction assigns one until this one ends, and a rolled back
// transaction gives its rev back.
func (s *Store) nextRev(ctx context.Context, tx *sql.Tx) (int64, error) {
	var rev int64
	err := tx.QueryRowContext(ctx, "UPDATE quota_seq SET rev = rev + 1 WHERE id = 1 RETURNING rev").Scan(&rev)
	return rev, err
}
