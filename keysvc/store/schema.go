package store

import (
	"context"

	"github.com/portico-gw/portico/internal/sqlstore"
)

// writersLock is the PostgreSQL advisory lock key the key service's
// writers take ("portkeys" in ASCII). It differs from the control plane's,
// so the two may share a database without waiting for each other.
const writersLock = 0x706f72746b657973

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

// schema is the key service's: its migrations are recorded in
// keysvc_migrations.
func schema() sqlstore.Schema {
	return sqlstore.Schema{Migrations: "keysvc_migrations", LockKey: writersLock, Steps: migrations}
}

// SchemaVersion returns the number of schema steps applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	return s.db.SchemaVersion(ctx, "keysvc_migrations")
}
