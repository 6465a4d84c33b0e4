// Package store keeps the key service's state: API keys (each stored as
// the SHA-256 of the key, never the key itself, with a display prefix and
// what the key stands for), token deny entries, the signing keys issuers
// published, and the leak reports of secret scanners.
//
// Every change of a key, deny entry or issuer's keys gets a rev from one
// sequence: 1, 2, 3, ... without gaps, assigned under the writers' lock in
// the transaction that makes the change, so revs are in commit order. A
// reader that has seen every row up to rev S therefore misses nothing when
// it next asks for the rows changed after S (Changes), and State reads the
// whole state at one rev. A row keeps only its latest rev: a key revoked
// after it was created appears once, at the rev of its revocation.
//
// One Store type runs on two databases: PostgreSQL (through pgx) in
// production, and SQLite (modernc.org/sqlite, no cgo) embedded for
// `portico dev` and single-node installs. Open picks the driver from the
// DSN. The schema is migrated when a Store opens, idempotently and safely
// when several key services start at once; its tables are named keysvc_*,
// so the key service may share a PostgreSQL database with the control
// plane. The conformance suite in keysvc/store/storetest runs against both.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/portico-gw/portico/internal/sqlstore"
)

// Errors a caller branches on, wrapped with what they concern. Others wrap
// the database's error.
var (
	// ErrNotFound is returned when the key asked for does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict is returned when a write contradicts the stored state: a
	// key id or hash that is taken, or a rotation of a key that is revoked,
	// expired or already rotated.
	ErrConflict = errors.New("store: conflict")
	// ErrInvalid is returned for a write that misses a required field, and
	// by Open for a DSN of no known database.
	ErrInvalid = errors.New("store: invalid")
)

// Store is the key service's state in a database. It is safe for
// concurrent use, also by several processes on one database; Close it when
// done.
type Store struct {
	db *sqlstore.DB
}

// Open connects to the database dsn names and migrates its schema:
// "postgres://..." (or "postgresql://...") for PostgreSQL, and
// "sqlite:PATH" (or "sqlite://PATH") for an SQLite file, created if
// missing.
func Open(ctx context.Context, dsn string) (*Store, error) {
	db, err := sqlstore.Open(ctx, dsn, schema())
	if errors.Is(err, sqlstore.ErrInvalidDSN) {
		return nil, fmt.Errorf("%w: the dsn is neither postgres://... nor sqlite:PATH", ErrInvalid)
	}
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return &Store{db: db}, nil
}

// Close closes the database connections.
func (s *Store) Close() error { return s.db.Close() }

// Driver names the database: "postgres" or "sqlite".
func (s *Store) Driver() string { return s.db.Driver() }

// Seq returns the last rev assigned, 0 if none yet.
func (s *Store) Seq(ctx context.Context) (uint64, error) {
	seq, err := s.seq(ctx, s.db.SQL())
	if err != nil {
		return 0, fmt.Errorf("store: reading the sequence: %w", err)
	}
	return seq, nil
}

// AdvanceSeq moves the sequence forward to at least to, so that the next
// rev is above it, and reports whether it moved. It is how a store
// restored from a backup catches up with the revisions the fast lane
// already holds: without it, its new changes would carry revs the nodes
// have seen and be taken for old ones.
func (s *Store) AdvanceSeq(ctx context.Context, to uint64) (bool, error) {
	if to > math.MaxInt64 {
		return false, fmt.Errorf("%w: sequence %d is beyond the store's range", ErrInvalid, to)
	}
	moved := false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Rebind("UPDATE keysvc_seq SET rev = ? WHERE id = 1 AND rev < ?"), int64(to), int64(to))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		moved = n > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("store: advancing the sequence to %d: %w", to, err)
	}
	return moved, nil
}

// querier is what reads need of a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) seq(ctx context.Context, q querier) (uint64, error) {
	var rev int64
	err := q.QueryRowContext(ctx, "SELECT rev FROM keysvc_seq WHERE id = 1").Scan(&rev)
	return uint64(rev), err
}

// nextRev assigns the next rev. The caller holds the writers' lock (see
// inTx), so no other transaction assigns one until this one ends, and a
// rolled back transaction gives its rev back.
func (s *Store) nextRev(ctx context.Context, tx *sql.Tx) (int64, error) {
	var rev int64
	err := tx.QueryRowContext(ctx, "UPDATE keysvc_seq SET rev = rev + 1 WHERE id = 1 RETURNING rev").Scan(&rev)
	return rev, err
}

// inTx runs fn in a transaction that serializes with every other writer
// of the store, and commits it if fn returns nil.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error { return s.db.InTx(ctx, fn) }

// readTx runs fn in a read-only transaction that sees one snapshot of the
// database throughout: REPEATABLE READ on PostgreSQL, a DEFERRED
// transaction in WAL mode on SQLite. It waits for no writer.
func (s *Store) readTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return s.db.ReadTx(ctx, fn)
}

// wrap adds what the store was doing to an error of the database. The
// store's own errors say what they concern already and are returned as
// they are.
func wrap(err error, doing string, args ...any) error {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrInvalid) {
		return err
	}
	return fmt.Errorf("store: %s: %w", fmt.Sprintf(doing, args...), err)
}

// limit returns n, or most when n is not positive or above it.
func limit(n, most int) int {
	if n <= 0 || n > most {
		return most
	}
	return n
}

// Times are stored as microseconds since the epoch, in UTC, on both
// databases; the zero time is stored as 0.
var (
	micros     = sqlstore.Micros
	fromMicros = sqlstore.FromMicros
	now        = sqlstore.Now
)
