package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// dialect is what differs between the two databases; every query is
// written once, with ? placeholders, and rebound.
type dialect interface {
	name() string
	open(ctx context.Context, dsn string) (*sql.DB, error)
	// migrations are the schema's steps, in order; a step never changes
	// once released.
	migrations() []string
	// rebind turns ? placeholders into the database's own.
	rebind(query string) string
	// lockWriters makes tx wait for, then exclude, every other writing
	// transaction, so that version numbers and migrations serialize.
	lockWriters(ctx context.Context, tx *sql.Tx) error
	// isUnique reports whether err is a unique constraint violation.
	isUnique(err error) bool
}

// writersLock is the PostgreSQL advisory lock key the store's writers
// take ("portico1" in ASCII).
const writersLock = 0x706f727469636f31

type postgresDialect struct{}

func (postgresDialect) name() string { return "postgres" }

func (postgresDialect) open(_ context.Context, dsn string) (*sql.DB, error) {
	return sql.Open("pgx", dsn)
}

func (postgresDialect) rebind(q string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

func (postgresDialect) lockWriters(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", int64(writersLock))
	return err
}

func (postgresDialect) isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

func (postgresDialect) migrations() []string {
	return schema(strings.NewReplacer("{bytes}", "BYTEA", "{int}", "BIGINT", "{serial}", "BIGSERIAL PRIMARY KEY"))
}

type sqliteDialect struct{}

func (sqliteDialect) name() string { return "sqlite" }

// open opens the file with a write-ahead log (readers never wait for the
// writer), a busy timeout (writers wait for each other instead of failing),
// foreign keys on, and every transaction begun IMMEDIATE, which takes the
// database's one write lock at BEGIN: a read-then-write transaction can
// then never fail to upgrade its lock halfway.
func (sqliteDialect) open(ctx context.Context, dsn string) (*sql.DB, error) {
	path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
	if path == "" {
		return nil, errors.New("sqlite: the DSN names no file")
	}
	q := "_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	if strings.Contains(path, "?") {
		path += "&" + q
	} else {
		path += "?" + q
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		return nil, err
	}
	// The first connection to a new file switches it to WAL, and SQLite
	// does not wait for the lock that takes (the pragma holds a read lock
	// already, and waiting could deadlock): of several processes opening a
	// new file at once, all but one may fail with SQLITE_BUSY. The switch
	// is made once for good, after which the pragma takes no lock, so
	// connecting is tried again.
	deadline := time.Now().Add(10 * time.Second) // the busy timeout
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := db.PingContext(ctx)
		if err == nil {
			return db, nil
		}
		var se *msqlite.Error
		if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			_ = db.Close()
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = db.Close()
			return nil, err
		case <-t.C:
		}
	}
}

func (sqliteDialect) rebind(q string) string { return q }

// lockWriters has nothing to do: IMMEDIATE transactions hold the write
// lock from BEGIN.
func (sqliteDialect) lockWriters(context.Context, *sql.Tx) error { return nil }

func (sqliteDialect) isUnique(err error) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

func (sqliteDialect) migrations() []string {
	return schema(strings.NewReplacer("{bytes}", "BLOB", "{int}", "INTEGER", "{serial}", "INTEGER PRIMARY KEY AUTOINCREMENT"))
}

// schema is the store's migrations, with the column types each database
// spells its own way filled in by types: {bytes}, {int}, and {serial} (an
// auto-incremented primary key). {epoch} is a new fast-lane epoch on every
// call: the step that uses it runs once per database, so the epoch it
// stores is that database's for good.
func schema(types *strings.Replacer) []string {
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
		steps[i] = epoch.Replace(types.Replace(st))
	}
	return steps
}
