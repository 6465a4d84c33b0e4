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
	// types fills in the column types each database spells its own way:
	// {bytes}, {int} and {serial} (an auto-incremented primary key).
	types() *strings.Replacer
	// rebind turns ? placeholders into the database's own.
	rebind(query string) string
	// lockWriters makes tx wait for, then exclude, every other writing
	// transaction, so that revs are assigned in commit order.
	lockWriters(ctx context.Context, tx *sql.Tx) error
	// isUnique reports whether err is a unique constraint violation.
	isUnique(err error) bool
}

// writersLock is the PostgreSQL advisory lock key the key service's
// writers take ("portkeys" in ASCII). It differs from the control plane's,
// so the two may share a database without waiting for each other.
const writersLock = 0x706f72746b657973

type postgresDialect struct{}

func (postgresDialect) name() string { return "postgres" }

func (postgresDialect) open(dsn string) (*sql.DB, error) { return sql.Open("pgx", dsn) }

func (postgresDialect) types() *strings.Replacer {
	return strings.NewReplacer("{bytes}", "BYTEA", "{int}", "BIGINT", "{serial}", "BIGSERIAL PRIMARY KEY")
}

func (postgresDialect) rebind(q string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] != '?' {
			b.WriteByte(q[i])
			continue
		}
		n++
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
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

type sqliteDialect struct{}

func (sqliteDialect) name() string { return "sqlite" }

// open opens the file with a write-ahead log (readers never wait for the
// writer), a busy timeout (writers wait for each other instead of failing),
// and every writing transaction begun IMMEDIATE, which takes the database's
// one write lock at BEGIN. Read-only transactions begin DEFERRED and read
// one snapshot of the file.
func (sqliteDialect) open(dsn string) (*sql.DB, error) {
	path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
	if path == "" {
		return nil, errors.New("sqlite: the DSN names no file")
	}
	q := "_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	if strings.Contains(path, "?") {
		path += "&" + q
	} else {
		path += "?" + q
	}
	return sql.Open("sqlite", "file:"+path)
}

func (sqliteDialect) types() *strings.Replacer {
	return strings.NewReplacer("{bytes}", "BLOB", "{int}", "INTEGER", "{serial}", "INTEGER PRIMARY KEY AUTOINCREMENT")
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
