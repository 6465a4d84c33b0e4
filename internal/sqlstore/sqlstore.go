// Package sqlstore is the SQL plumbing the services' stores share (the
// control plane's, the key service's, and the quota service's next): one
// database/sql handle on PostgreSQL (pgx) or SQLite (modernc.org/sqlite,
// no cgo), picked by the DSN; queries written once with ? placeholders and
// rebound; a migrator that applies a service's schema steps once each,
// under its writers' lock, when several processes start at once; writing
// transactions that serialize with every other writer of the service;
// read-only transactions that see one snapshot; the time codec; and the
// unique-violation check.
//
// A service's tables carry its prefix, and its writers take a lock of
// their own (an advisory lock key on PostgreSQL), so services may share
// one database without waiting for each other.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrInvalidDSN is Open's error for a DSN of no known database.
var ErrInvalidDSN = errors.New("sqlstore: the dsn is neither postgres://... nor sqlite:PATH")

// Schema is what a service's store is: its migrations' table, the lock its
// writers take, and its schema's steps.
type Schema struct {
	// Migrations names the table that records the steps applied, such as
	// "keysvc_migrations".
	Migrations string
	// LockKey is the PostgreSQL advisory lock the service's writers take;
	// it must differ between services that share a database. (SQLite has
	// one write lock per file, which writing transactions take at BEGIN.)
	LockKey int64
	// Steps are the schema's steps, in order: a step never changes once
	// released. Each is run as one statement list, with {bytes}, {int}
	// and {serial} (an auto-incremented primary key) replaced by the
	// database's own column types.
	Steps []string
	// Go, if set, holds the steps that need Go as well as SQL (data
	// rewritten with code the database lacks): Go[n] runs after the SQL
	// of step n (counted from 1; it may be empty), in the same
	// transaction, once.
	Go map[int]GoStep
}

// GoStep is the Go part of a migration step. rebind is DB.Rebind.
type GoStep func(ctx context.Context, tx *sql.Tx, rebind func(string) string) error

// DB is a service's database. It is safe for concurrent use, also by
// several processes on one database; Close it when done.
type DB struct {
	db      *sql.DB
	d       dialect
	lockKey int64
}

// Open connects to the database dsn names and migrates s onto it:
// "postgres://..." (or "postgresql://...") for PostgreSQL, and
// "sqlite:PATH" (or "sqlite://PATH") for an SQLite file, created if
// missing, with a write-ahead log, a busy timeout, foreign keys on and
// writing transactions begun IMMEDIATE.
func Open(ctx context.Context, dsn string, s Schema) (*DB, error) {
	var d dialect
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		d = postgresDialect{}
	case strings.HasPrefix(dsn, "sqlite:"):
		d = sqliteDialect{}
	default:
		return nil, ErrInvalidDSN
	}
	db, err := d.open(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: opening %s: %w", d.name(), err)
	}
	out := &DB{db: db, d: d, lockKey: s.LockKey}
	if err := out.migrate(ctx, s); err != nil {
		_ = db.Close()
		return nil, err
	}
	return out, nil
}

// Close closes the database's connections.
func (db *DB) Close() error { return db.db.Close() }

// Driver names the database: "postgres" or "sqlite".
func (db *DB) Driver() string { return db.d.name() }

// SQL is the database/sql handle, for reads outside a transaction.
func (db *DB) SQL() *sql.DB { return db.db }

// Rebind turns a query's ? placeholders into the database's own.
func (db *DB) Rebind(query string) string { return db.d.rebind(query) }

// IsUnique reports whether err is a unique (or primary key) constraint
// violation.
func (db *DB) IsUnique(err error) bool { return db.d.isUnique(err) }

// IsData reports whether err is the database refusing a value written (a
// NUL byte in text, a number out of range for its column): the same write
// fails again however often it is retried.
func (db *DB) IsData(err error) bool { return db.d.isData(err) }

// InTx runs fn in a transaction that serializes with every other writer
// of the service, in this process and others, and commits it if fn
// returns nil.
func (db *DB) InTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := db.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := db.d.lockWriters(ctx, tx, db.lockKey); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// ReadTx runs fn in a read-only transaction that sees one snapshot of the
// database.
func (db *DB) ReadTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := db.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	return fn(tx)
}

// Micros is t as stored: microseconds since the Unix epoch, and 0 for the
// zero time.
func Micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// FromMicros is the time Micros stored, in UTC: 0 is the zero time.
func FromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// Now is the current time as a store keeps it: in UTC, to the
// microsecond.
func Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }
