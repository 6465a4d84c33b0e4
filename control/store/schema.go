package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/laneentry"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
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

		// Step 3, in Go (rekeyDenyEntries): deny entries take the ids of
		// gateway/laneentry, which the key service and nodes use too.
		"",

		// Each staged rollout's state, by the version it rolls out (see
		// SaveRollout). Step 4's Go part (haltsFromAudit) carries over the
		// halts the audit log held before.
		`CREATE TABLE rollouts (
			version    {int} PRIMARY KEY,
			previous   {int} NOT NULL,
			stage      {int} NOT NULL,
			state      TEXT NOT NULL,
			evidence   TEXT NOT NULL,
			nodes      TEXT NOT NULL,
			updated_at {int} NOT NULL
		);`,
	}
	epoch := strings.NewReplacer("{epoch}", newEpoch())
	for i, st := range steps {
		steps[i] = epoch.Replace(st)
	}
	return sqlstore.Schema{Migrations: "schema_migrations", LockKey: writersLock, Steps: steps,
		Go: map[int]sqlstore.GoStep{3: rekeyDenyEntries, 4: haltsFromAudit}}
}

// rekeyDenyEntries gives every stored deny entry the id laneentry.Of
// gives it. The control plane used to name deny entries its own way (the
// first 16 bytes of another hash); an entry published again after the
// change must replace its stored copy, not stand beside it. Entries are
// stored as the FastLaneEntry the producer sent, which says its identity.
func rekeyDenyEntries(ctx context.Context, tx *sql.Tx, rebind func(string) string) error {
	rows, err := tx.QueryContext(ctx, "SELECT id, data FROM fast_lane_entries WHERE kind = 'deny'")
	if err != nil {
		return err
	}
	type rekey struct{ from, to string }
	var todo []rekey
	for rows.Next() {
		var id string
		var data []byte
		if err := rows.Scan(&id, &data); err != nil {
			_ = rows.Close()
			return err
		}
		var e configv1.FastLaneEntry
		if err := proto.Unmarshal(data, &e); err != nil {
			_ = rows.Close()
			return fmt.Errorf("deny entry %s: %w", id, err)
		}
		to, err := laneentry.Of(&e)
		if err != nil {
			_ = rows.Close()
			return fmt.Errorf("deny entry %s: %w", id, err)
		}
		if to.Key != id {
			todo = append(todo, rekey{id, to.Key})
		}
	}
	if err := rows.Err(); err != nil {
		_ = rows.Close()
		return err
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, r := range todo {
		if _, err := tx.ExecContext(ctx, rebind("UPDATE fast_lane_entries SET id = ? WHERE kind = 'deny' AND id = ?"), r.to, r.from); err != nil {
			return fmt.Errorf("deny entry %s: %w", r.from, err)
		}
	}
	return nil
}

// haltsFromAudit records, as halted rollouts, the halts the control plane
// kept in its audit log before rollouts had a table: "rollout.halt" of
// "version N", with the version the fleet kept.
func haltsFromAudit(ctx context.Context, tx *sql.Tx, rebind func(string) string) error {
	rows, err := tx.QueryContext(ctx, "SELECT object, version, detail, at FROM audit WHERE action = 'rollout.halt' ORDER BY id")
	if err != nil {
		return err
	}
	type halt struct {
		version, kept int64
		detail        string
		at            int64
	}
	var halts []halt
	for rows.Next() {
		var object, detail string
		var kept, at int64
		if err := rows.Scan(&object, &kept, &detail, &at); err != nil {
			_ = rows.Close()
			return err
		}
		var v int64
		if _, err := fmt.Sscanf(object, "version %d", &v); err != nil || kept <= 0 {
			continue
		}
		halts = append(halts, halt{v, kept, detail, at})
	}
	if err := rows.Err(); err != nil {
		_ = rows.Close()
		return err
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, h := range halts {
		_, err := tx.ExecContext(ctx, rebind(`INSERT INTO rollouts (version, previous, stage, state, evidence, nodes, updated_at) VALUES (?, ?, 0, 'halted', ?, '', ?)
			ON CONFLICT (version) DO UPDATE SET previous = excluded.previous, state = excluded.state, evidence = excluded.evidence, updated_at = excluded.updated_at`),
			h.version, h.kept, h.detail, h.at)
		if err != nil {
			return err
		}
	}
	return nil
}
