package store

import (
	"context"
	"database/sql"

	"github.com/portico-gw/portico/internal/sqlstore"
)

// writersLock is the PostgreSQL advisory lock key the quota service's
// writers take ("portquot" in ASCII). It differs from the control plane's
// and the key service's, so the three may share a database without
// waiting for each other.
const writersLock = 0x706f727471756f74

// migrations are the schema's steps, in order, with the column types left
// for the dialect to fill in; a step never changes once released.
//
//   - quota_seq is the mark outbox's sequence (one row).
//   - quota_seen holds every window part applied: the duplicate check.
//   - quota_windows is one row per window (whole or not): what every
//     part said of the window, how many parts are in and what their rows
//     add up to so far.
//   - quota_window_rows are the parts' rows summed per (subject, product,
//     status class), with the period they were booked into: the recount.
//   - quota_totals are the live totals, with the caller fields last seen.
//   - quota_spools is each node spool's sequence; quota_marks its newest
//     contiguous mark with its outbox rev.
//   - quota_adjustments are corrections and late windows; quota_periods
//     the periods reconciled or final.
var migrations = []string{
	`CREATE TABLE quota_seq (
		id  INTEGER PRIMARY KEY,
		rev {int} NOT NULL
	);
	INSERT INTO quota_seq (id, rev) VALUES (1, 0);
	CREATE TABLE quota_seen (
		node_id    TEXT NOT NULL,
		spool_id   TEXT NOT NULL,
		seq        {int} NOT NULL,
		part       {int} NOT NULL,
		applied_at {int} NOT NULL,
		PRIMARY KEY (node_id, spool_id, seq, part)
	);
	CREATE TABLE quota_windows (
		id              {serial},
		node_id         TEXT NOT NULL,
		spool_id        TEXT NOT NULL,
		seq             {int} NOT NULL,
		region          TEXT NOT NULL,
		period          TEXT NOT NULL,
		start_at        {int} NOT NULL,
		end_at          {int} NOT NULL,
		parts           {int} NOT NULL,
		parts_seen      {int} NOT NULL,
		counted         {int} NOT NULL,
		billable        {int} NOT NULL,
		period_counted  {int} NOT NULL,
		period_billable {int} NOT NULL,
		rows_counted    {int} NOT NULL,
		rows_billable   {int} NOT NULL,
		recovered       INTEGER NOT NULL,
		UNIQUE (node_id, spool_id, seq)
	);
	CREATE INDEX quota_windows_by_period ON quota_windows (period, node_id, spool_id, seq);
	CREATE TABLE quota_window_rows (
		window_id {int} NOT NULL,
		part      {int} NOT NULL,
		period    TEXT NOT NULL,
		subject   TEXT NOT NULL,
		product   TEXT NOT NULL,
		class     INTEGER NOT NULL,
		counted   {int} NOT NULL,
		billable  {int} NOT NULL
	);
	CREATE INDEX quota_window_rows_by_period ON quota_window_rows (period);
	CREATE TABLE quota_totals (
		period   TEXT NOT NULL,
		subject  TEXT NOT NULL,
		product  TEXT NOT NULL,
		key_id   TEXT NOT NULL,
		app_id   TEXT NOT NULL,
		tenant   TEXT NOT NULL,
		plan     TEXT NOT NULL,
		counted  {int} NOT NULL,
		billable {int} NOT NULL,
		class0   {int} NOT NULL,
		class1   {int} NOT NULL,
		class2   {int} NOT NULL,
		class3   {int} NOT NULL,
		class4   {int} NOT NULL,
		class5   {int} NOT NULL,
		adjusted {int} NOT NULL,
		updated  {int} NOT NULL,
		PRIMARY KEY (period, subject, product)
	);
	CREATE INDEX quota_totals_by_tenant ON quota_totals (tenant, period, subject, product);
	CREATE TABLE quota_spools (
		node_id     TEXT NOT NULL,
		spool_id    TEXT NOT NULL,
		region      TEXT NOT NULL,
		contiguous  {int} NOT NULL,
		highest     {int} NOT NULL,
		last_window {int} NOT NULL,
		PRIMARY KEY (node_id, spool_id)
	);
	CREATE TABLE quota_marks (
		node_id  TEXT NOT NULL,
		spool_id TEXT NOT NULL,
		seq      {int} NOT NULL,
		rev      {int} NOT NULL UNIQUE,
		PRIMARY KEY (node_id, spool_id)
	);
	CREATE TABLE quota_adjustments (
		id       {serial},
		period   TEXT NOT NULL,
		subject  TEXT NOT NULL,
		product  TEXT NOT NULL,
		counted  {int} NOT NULL,
		billable {int} NOT NULL,
		kind     TEXT NOT NULL,
		source   TEXT NOT NULL,
		reason   TEXT NOT NULL,
		recorded {int} NOT NULL
	);
	CREATE INDEX quota_adjustments_by_period ON quota_adjustments (period, id);
	CREATE TABLE quota_periods (
		period          TEXT PRIMARY KEY,
		final           INTEGER NOT NULL,
		finalised       {int} NOT NULL,
		last_reconciled {int} NOT NULL
	);`,
}

// roomForUpdates leaves a third of each page of quota_totals free on
// PostgreSQL, where every window rewrites thousands of totals: an
// updated row then stays on its page and no index changes (a HOT
// update), which makes a busy window's totals about twice as fast to
// apply. SQLite updates rows in place.
func roomForUpdates(ctx context.Context, tx *sql.Tx, rebind func(string) string) error {
	if rebind("?") == "?" {
		return nil // SQLite
	}
	_, err := tx.ExecContext(ctx, "ALTER TABLE quota_totals SET (fillfactor = 70)")
	return err
}

// schema is the quota service's: its migrations are recorded in
// quota_migrations.
func schema() sqlstore.Schema {
	return sqlstore.Schema{Migrations: "quota_migrations", LockKey: writersLock, Steps: migrations,
		Go: map[int]sqlstore.GoStep{1: roomForUpdates}}
}

// SchemaVersion returns the number of schema steps applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	return s.db.SchemaVersion(ctx, "quota_migrations")
}
