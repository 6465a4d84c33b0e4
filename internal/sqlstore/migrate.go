package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// migrate applies the steps of s the database has not had yet, each in
// its own transaction with its record in s.Migrations, under the writers'
// lock: processes that start at once apply each step once, and a step
// that fails leaves no trace.
func (db *DB) migrate(ctx context.Context, s Schema) error {
	if s.Migrations == "" {
		return fmt.Errorf("sqlstore: the schema names no migrations table")
	}
	for n := range s.Go {
		if n < 1 || n > len(s.Steps) {
			return fmt.Errorf("sqlstore: a Go step %d of %d steps", n, len(s.Steps))
		}
	}
	// Under the writers' lock: PostgreSQL's CREATE TABLE IF NOT EXISTS is
	// not safe against another process creating the table at once.
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+s.Migrations+` (
			version    INTEGER PRIMARY KEY,
			applied_at BIGINT NOT NULL
		)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlstore: migrating the %s schema: %w", db.d.name(), err)
	}
	types := db.d.types()
	for i, step := range s.Steps {
		n := i + 1
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			var done int
			if err := tx.QueryRowContext(ctx, db.Rebind("SELECT COUNT(*) FROM "+s.Migrations+" WHERE version = ?"), n).Scan(&done); err != nil {
				return err
			}
			if done > 0 {
				return nil
			}
			if step != "" {
				if _, err := tx.ExecContext(ctx, types.Replace(step)); err != nil {
					return err
				}
			}
			if g := s.Go[n]; g != nil {
				if err := g(ctx, tx, db.Rebind); err != nil {
					return err
				}
			}
			_, err := tx.ExecContext(ctx, db.Rebind("INSERT INTO "+s.Migrations+" (version, applied_at) VALUES (?, ?)"), n, Micros(time.Now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("sqlstore: migrating the %s schema to version %d: %w", db.d.name(), n, err)
		}
	}
	return nil
}

// SchemaVersion returns the number of steps applied of the schema whose
// migrations table is migrations.
func (db *DB) SchemaVersion(ctx context.Context, migrations string) (int, error) {
	var n int
	err := db.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM "+migrations).Scan(&n)
	return n, err
}
