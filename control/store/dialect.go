package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// dialect is what differs between the two databases; every query is
// written once, with ? placeholders, and rebound.
type dialect interface {
	name() string
	open(dsn string) (*sql.DB, error)
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

func (postgresDialect) open(dsn string) (*sql.DB, error) { return sql.Open("pgx", dsn) }

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
func (sqliteDialect) open(dsn string) (*sql.DB, error) {
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
	return sql.Open("sqlite", "file:"+path)
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
// auto-incremented primary key).
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
	}
	for i, st := range steps {
		steps[i] = types.Replace(st)
	}
	return steps
}
