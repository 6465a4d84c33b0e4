package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// migrations are the schema's steps, in order, with the column types left
// for the dialect to fill in; a step never changes once released. Every
// table is named for the key service, so that it may share a database with
// the control plane.
var migrations = []string{
	`CREATE TABLE keysvc_seq (
		id  INTEGER PRIMARY KEY,
		rev {int} NOT NULL
	);
	INSERT INTO keysvc_seq (id, rev) VALUES (1, 0);
	CREATE TABLE keysvc_keys (
		id            TEXT PRIMARY KEY,
		hash          {bytes} NOT NULL UNIQUE,
		prefix        TEXT NOT NULL,
		app_id        TEXT NOT NULL,
		tenant_id     TEXT NOT NULL,
		plan          TEXT NOT NULL,
		scopes        TEXT NOT NULL,
		env           TEXT NOT NULL,
		priority      INTEGER NOT NULL,
		status        INTEGER NOT NULL,
		created_at    {int} NOT NULL,
		not_after     {int} NOT NULL,
		successor     TEXT NOT NULL,
		predecessor   TEXT NOT NULL,
		revoked_at    {int} NOT NULL,
		revoke_reason TEXT NOT NULL,
		revoked_by    TEXT NOT NULL,
		rev           {int} NOT NULL UNIQUE
	);
	CREATE INDEX keysvc_keys_by_app ON keysvc_keys (app_id, id);
	CREATE INDEX keysvc_keys_by_tenant ON keysvc_keys (tenant_id, id);
	CREATE TABLE keysvc_deny (
		id      TEXT PRIMARY KEY,
		entry   {bytes} NOT NULL,
		expires {int} NOT NULL,
		rev     {int} NOT NULL UNIQUE
	);
	CREATE INDEX keysvc_deny_by_expires ON keysvc_deny (expires);
	CREATE TABLE keysvc_issuer_keys (
		issuer TEXT PRIMARY KEY,
		jwks   TEXT NOT NULL,
		rev    {int} NOT NULL UNIQUE
	);
	CREATE TABLE keysvc_leaks (
		id       {serial},
		at       {int} NOT NULL,
		reporter TEXT NOT NULL,
		url      TEXT NOT NULL,
		source   TEXT NOT NULL,
		reason   TEXT NOT NULL,
		key_hash {bytes} NOT NULL,
		key_id   TEXT NOT NULL,
		outcome  TEXT NOT NULL
	);`,
}

// migrate applies the schema steps the database has not had yet, each in
// its own transaction with its record in keysvc_migrations, under the
// writers' lock: key services that start at once apply each step once, and
// a step that fails leaves no trace.
func (s *Store) migrate(ctx context.Context) error {
	// Under the writers' lock: PostgreSQL's CREATE TABLE IF NOT EXISTS is
	// not safe against another process creating the table at once.
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS keysvc_migrations (
			version    INTEGER PRIMARY KEY,
			applied_at BIGINT NOT NULL
		)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: migrating the %s schema: %w", s.d.name(), err)
	}
	types := s.d.types()
	for i, step := range migrations {
		n := i + 1
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			var done int
			if err := tx.QueryRowContext(ctx, s.d.rebind("SELECT COUNT(*) FROM keysvc_migrations WHERE version = ?"), n).Scan(&done); err != nil {
				return err
			}
			if done > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, types.Replace(step)); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, s.d.rebind("INSERT INTO keysvc_migrations (version, applied_at) VALUES (?, ?)"), n, micros(time.Now()))
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
	err := s.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM keysvc_migrations").Scan(&n)
	return n, err
}
