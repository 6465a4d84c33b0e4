package sqlstore

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

// dialect is what differs between the two databases.
type dialect interface {
	name() string
	open(ctx context.Context, dsn string) (*sql.DB, error)
	// types fills in the column types each database spells its own way.
	types() *strings.Replacer
	rebind(query string) string
	// lockWriters makes tx wait for, then exclude, every other writing
	// transaction that takes key.
	lockWriters(ctx context.Context, tx *sql.Tx, key int64) error
	isUnique(err error) bool
	// isData reports an error in the data written (a value the column
	// cannot hold), which no retry can get past.
	isData(err error) bool
}

type postgresDialect struct{}

func (postgresDialect) name() string { return "postgres" }

func (postgresDialect) open(_ context.Context, dsn string) (*sql.DB, error) {
	return sql.Open("pgx", dsn)
}

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

func (postgresDialect) lockWriters(ctx context.Context, tx *sql.Tx, key int64) error {
	_, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", key)
	return err
}

func (postgresDialect) isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// isData is SQLSTATE class 22, data exception: a NUL in text, a number
// out of range.
func (postgresDialect) isData(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22")
}

type sqliteDialect struct{}

func (sqliteDialect) name() string { return "sqlite" }

// open opens the file with a write-ahead log (readers never wait for the
// writer), a busy timeout (writers wait for each other instead of failing),
// foreign keys on, and every writing transaction begun IMMEDIATE, which
// takes the database's one write lock at BEGIN: a read-then-write
// transaction can then never fail to upgrade its lock halfway. Read-only
// transactions begin DEFERRED and read one snapshot of the file.
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

func (sqliteDialect) types() *strings.Replacer {
	return strings.NewReplacer("{bytes}", "BLOB", "{int}", "INTEGER", "{serial}", "INTEGER PRIMARY KEY AUTOINCREMENT")
}

func (sqliteDialect) rebind(q string) string { return q }

// lockWriters has nothing to do: IMMEDIATE transactions hold the file's
// write lock from BEGIN.
func (sqliteDialect) lockWriters(context.Context, *sql.Tx, int64) error { return nil }

func (sqliteDialect) isData(err error) bool {
	var se *msqlite.Error
	return errors.As(err, &se) && (se.Code()&0xff == sqlite3.SQLITE_TOOBIG || se.Code()&0xff == sqlite3.SQLITE_MISMATCH)
}

func (sqliteDialect) isUnique(err error) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}
