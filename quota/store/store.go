// Package store keeps the quota service's state: the usage totals per
// (subject, product, billing period), every window part applied (so that
// a duplicate is a no-op), each node spool's sequence, the high-water
// marks published on the fast lane, the reconciler's adjustments, and
// which periods are final.
//
// A window part is applied in one transaction that records it as seen
// and adds its rows to the totals, so that a duplicate changes nothing
// and a crash between the two cannot happen. Every writer takes the
// quota service's writers' lock, so writes are serialized: two consumers
// applying the same part at once count it once.
//
// A period's totals are the sum of its own windows' rows, of late
// windows of earlier, final periods booked into it (adjustments of kind
// "late_window"), and of the reconciler's corrections (kind
// "correction"), each applied only to a total that still has the
// figures it was computed against. Once a period is final nothing
// changes its totals: a window of it that arrives later is booked into
// the first period after it that is not final. The node spools a period
// was closed without are recorded with the close (kind "write_off",
// changing no total).
//
// Each rise of a spool's contiguous mark is a change of the mark outbox
// with the next rev of one sequence: 1, 2, 3, ... without gaps, assigned
// under the writers' lock in the transaction that makes the change, so
// revs are in commit order (as keysvc/store's). Changes, Seq and Advance
// make the Store an internal/lanepub Source.
//
// One Store type runs on two databases: PostgreSQL (through pgx) in
// production, and SQLite (modernc.org/sqlite, no cgo) embedded for
// `portico dev`. Open picks the driver from the DSN. Its tables are named
// quota_*. The conformance suite in quota/store/storetest runs against
// both.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/internal/sqlstore"
)

// Errors a caller branches on, wrapped with what they concern. Others wrap
// the database's error.
var (
	ErrNotFound = errors.New("store: not found")
	// ErrFinal is returned for a change to a final period.
	ErrFinal = errors.New("store: the period is final")
	// ErrInvalid is returned for a window or a write that is malformed
	// (rows that do not add up to the window's part, a part out of range,
	// parts that disagree), and by Open for a DSN of no known database.
	ErrInvalid = errors.New("store: invalid")
)

// Store is the quota service's state in a database. It is safe for
// concurrent use, also by several processes on one database; Close it
// when done.
type Store struct {
	db *sqlstore.DB
}

// Open connects to the database dsn names ("postgres://..." or
// "sqlite:PATH") and migrates its schema.
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

// Subject is what a caller's totals are kept per: "key:<key id>" for an
// API key, "app:<app id>" for tokens, "anonymous" for neither.
func Subject(c *quotav1.Caller) string {
	switch {
	case c.GetKeyId() != "":
		return "key:" + c.GetKeyId()
	case c.GetAppId() != "":
		return "app:" + c.GetAppId()
	}
	return "anonymous"
}

// querier is what reads need of a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// wrap adds what the store was doing to an error of the database. The
// store's own errors say what they concern already and are returned as
// they are.
func wrap(err error, doing string, args ...any) error {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrFinal) || errors.Is(err, ErrInvalid) {
		return err
	}
	return fmt.Errorf("store: %s: %w", fmt.Sprintf(doing, args...), err)
}

// limit returns n, or most when n is not positive or above it.
func limitOf(n, most int) int {
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
