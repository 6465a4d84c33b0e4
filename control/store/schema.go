package store

import (
	"strings"

	"github.com/portico-gw/portico/internal/sqlstore"
)

// writersLock is the PostgreSQL advisory lock key the store's writers
// take ("portico1" in ASCII).
const writersLock = 0x706f727469636f31

// schema is the store's migrations, their column types left for
// sqlstore to fill in: {bytes}, {int}, and {serial} (an auto-incremented
// primary key). {epoch} is a new fast-lane epoch on every call: the step
// that uses it runs once per database, so the epoch it stores is that
// database's for good. The migrations table keeps the name it had before
// the stores shared sqlstore.
func schema() sqlstore.Schema {
	steps := []string{
		`CREATE TABLE blobs (
			sha  TEXT PRIMARY KEY,
			data {bytes} NOT NULL
		);
		CREATE TABLE versions (
			number       {int} PRIMARY KEY,
			config_sha   TEXT NOT NULL REFERENCES blobs (sha),
			snapshot_sha TEXT NOT NULL REFERENCES blobs (sha),
			created_by   TEXT NOT NULL,
			created_at   {int} NOT NULL,
			message      TEXT NOT NULL,
			diff         TEXT NOT NULL,
			rollback_of  {int} NOT NULL DEFAULT 0
		);
		CREATE TABLE audit (
			id      {serial},
			at      {int} NOT NULL,
			actor   TEXT NOT NULL,
			team    TEXT NOT NULL,
			action  TEXT NOT NULL,
			object  TEXT NOT NULL,
			outcome TEXT NOT NULL,
			detail  TEXT NOT NULL,
			version {int} NOT NULL
		);
		CREATE INDEX audit_by_team ON audit (team, id);
		CREATE TABLE tokens (
			id         TEXT PRIMARY KEY,
			hash       TEXT NOT NULL UNIQUE,
			team       TEXT NOT NULL,
			role       TEXT NOT NULL,
			created_by TEXT NOT NULL,
			created_at {int} NOT NULL,
			revoked_at {int} NOT NULL,
			note       TEXT NOT NULL
		);
		CREATE INDEX tokens_by_team ON tokens (team);`,

		// The fast lane: its epoch and current version (one row), the
		// newest state of every entry with the version of its last change
		// (expires_at 0: never), and the last seq stored of each producer.
		`CREATE TABLE fast_lane (
			one     {int} PRIMARY KEY CHECK (one = 1),
			epoch   TEXT NOT NULL,
			version {int} NOT NULL
		);
		INSERT INTO fast_lane (one, epoch, version) VALUES (1, '{epoch}', 0);
		CREATE TABLE fast_lane_entries (
			kind       TEXT NOT NULL,
			id         TEXT NOT NULL,
			rev        {int} NOT NULL,
			data       {bytes} NOT NULL,
			expires_at {int} NOT NULL,
			version    {int} NOT NULL,
			PRIMARY KEY (kind, id)
		);
		CREATE INDEX fast_lane_entries_by_version ON fast_lane_entries (version);
		CREATE TABLE fast_lane_sources (
			source TEXT PRIMARY KEY,
			seq    {int} NOT NULL
		);`,
	}
	epoch := strings.NewReplacer("{epoch}", newEpoch())
	for i, st := range steps {
		steps[i] = epoch.Replace(st)
	}
	return sqlstore.Schema{Migrations: "schema_migrations", LockKey: writersLock, Steps: steps}
}
