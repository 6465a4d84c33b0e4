package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// maxParams bounds the placeholders of one statement, below both
// databases' limits (PostgreSQL 65,535; SQLite 32,766).
const maxParams = 30000

// maxBatchRows bounds the rows of one multi-row statement.
const maxBatchRows = 1000

// column is one column of a multi-row insert: its name and whether it
// holds text (else a 64-bit integer).
type column struct {
	name string
	text bool
}

func columns(text []string, ints ...string) []column {
	var out []column
	for _, n := range text {
		out = append(out, column{name: n, text: true})
	}
	for _, n := range ints {
		out = append(out, column{name: n})
	}
	return out
}

// insertMany writes n rows into table: row appends row i's values to
// args, one per column in cols' order (a string for a text column, an
// int64 for another); tail follows the rows (an ON CONFLICT clause, say).
//
// On PostgreSQL the rows go in one statement of one array parameter per
// column, unnested: its text is the same whatever n, so the connection
// prepares it once, and the server neither parses nor plans thousands of
// placeholders. On SQLite they go in multi-row VALUES statements, in
// chunks as large as the placeholder limit allows; the statement of a
// full chunk is prepared once and run for every full chunk.
func (s *Store) insertMany(ctx context.Context, tx *sql.Tx, table string, cols []column, tail string, n int, row func(i int, args []any) []any) error {
	if n == 0 {
		return nil
	}
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	head := "INSERT INTO " + table + " (" + strings.Join(names, ", ") + ")"
	if s.db.Driver() == "postgres" {
		return s.insertArrays(ctx, tx, head, cols, tail, n, row)
	}
	chunk := min(maxBatchRows, maxParams/len(cols), n)
	args := make([]any, 0, chunk*len(cols))
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
			if _, err := tx.ExecContext(ctx, valuesQuery(head, tail, len(cols), to-from), args...); err != nil {
				return err
			}
			continue
		}
		if full == nil {
			var err error
			if full, err = tx.PrepareContext(ctx, valuesQuery(head, tail, len(cols), chunk)); err != nil {
				return err
			}
		}
		if _, err := full.ExecContext(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// insertArrays is insertMany on PostgreSQL.
func (s *Store) insertArrays(ctx context.Context, tx *sql.Tx, head string, cols []column, tail string, n int, row func(i int, args []any) []any) error {
	texts := make([][]string, len(cols))
	ints := make([][]int64, len(cols))
	for j, c := range cols {
		if c.text {
			texts[j] = make([]string, 0, n)
		} else {
			ints[j] = make([]int64, 0, n)
		}
	}
	buf := make([]any, 0, len(cols))
	for i := range n {
		buf = row(i, buf[:0])
		if len(buf) != len(cols) {
			return fmt.Errorf("store: %d values for %d columns", len(buf), len(cols))
		}
		for j, v := range buf {
			var ok bool
			if cols[j].text {
				var t string
				t, ok = v.(string)
				texts[j] = append(texts[j], t)
			} else {
				var x int64
				x, ok = v.(int64)
				ints[j] = append(ints[j], x)
			}
			if !ok {
				return fmt.Errorf("store: column %s given a %T", cols[j].name, v)
			}
		}
	}
	var q strings.Builder
	q.WriteString(head)
	q.WriteString(" SELECT * FROM unnest(")
	args := make([]any, len(cols))
	for j, c := range cols {
		if j > 0 {
			q.WriteString(", ")
		}
		if c.text {
			fmt.Fprintf(&q, "$%d::text[]", j+1)
			args[j] = texts[j]
		} else {
			fmt.Fprintf(&q, "$%d::bigint[]", j+1)
			args[j] = ints[j]
		}
	}
	q.WriteString(")")
	if tail != "" {
		q.WriteString(" ")
		q.WriteString(tail)
	}
	_, err := tx.ExecContext(ctx, q.String(), args...)
	return err
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
