package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// migrate applies the schema steps the database has not had yet, each in
// its own transaction with its record in schema_migrations, under the
// writers' lock: control planes that start at once apply each step once,
// and a step that fails leaves no trace.
func (s *Store) migrate(ctx context.Context) error {
	// Under the writers' lock: PostgreSQL's CREATE TABLE IF NOT EXISTS is
	// not safe against another process creating the table at once.
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    INTEGER PRIMARY KEY,
			applied_at BIGINT NOT NULL
		)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: migrating the %s schema: %w", s.d.name(), err)
	}
	steps := s.d.migrations()
	for i, step := range steps {
		n := i + 1
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			var done int
			if err := tx.QueryRowContext(ctx, s.d.rebind("SELECT COUNT(*) FROM schema_migrations WHERE version = ?"), n).Scan(&done); err != nil {
				return err
			}
			if done > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, step); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, s.d.rebind("INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)"), n, toMicros(time.Now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("store: migrating the %s schema to version %d: %w", s.d.name(), n, err)
		}
	}
	return nil
}

// SchemaVersion returns the number of schema steps applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&n)
	return n, err
}
