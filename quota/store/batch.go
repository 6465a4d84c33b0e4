package store

import (
	"context"
	"database/sql"
	"strings"
)

// maxParams bounds the placeholders of one statement, below both
// databases' limits (PostgreSQL 65,535; SQLite 32,766).
const maxParams = 30000

// maxBatchRows bounds the rows of one multi-row statement.
const maxBatchRows = 1000

// insertMany writes n rows of width cols with multi-row statements:
// head, then "(?, ...), (?, ...)" with one group per row, then tail (an
// ON CONFLICT clause, say). Rows go in chunks of as many as the
// placeholder limit allows; the statement of a full chunk is prepared
// once and run for every full chunk, and the last, shorter chunk has its
// own. row appends row i's cols values to args.
func (s *Store) insertMany(ctx context.Context, tx *sql.Tx, head, tail string, cols, n int, row func(i int, args []any) []any) error {
	if n == 0 {
		return nil
	}
	chunk := min(maxBatchRows, maxParams/cols, n)
	args := make([]any, 0, chunk*cols)
	var full *sql.Stmt
	defer func() {
		if full != nil {
			_ = full.Close()
		}
	}()
	for from := 0; from < n; from += chunk {
		to := min(from+chunk, n)
		args = args[:0]
		for i := from; i < to; i++ {
			args = row(i, args)
		}
		if to-from < chunk || n == chunk {
			// The only chunk, or the last, shorter one: one use, no
			// preparing.
			if _, err := tx.ExecContext(ctx, s.db.Rebind(valuesQuery(head, tail, cols, to-from)), args...); err != nil {
				return err
			}
			continue
		}
		if full == nil {
			var err error
			if full, err = tx.PrepareContext(ctx, s.db.Rebind(valuesQuery(head, tail, cols, chunk))); err != nil {
				return err
			}
		}
		if _, err := full.ExecContext(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// valuesQuery is head, rows groups of cols placeholders, and tail.
func valuesQuery(head, tail string, cols, rows int) string {
	group := "(" + strings.Repeat("?, ", cols-1) + "?)"
	var b strings.Builder
	b.Grow(len(head) + len(tail) + rows*(len(group)+2) + 2)
	b.WriteString(head)
	b.WriteString(" VALUES ")
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(group)
	}
	if tail != "" {
		b.WriteByte(' ')
		b.WriteString(tail)
	}
	return b.String()
}
