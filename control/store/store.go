// Package store keeps the control plane's state: every accepted config
// version (immutable once written), the blobs they name (each team's
// config and the compiled snapshot, content-addressed by SHA-256), the
// audit log, the admin callers' tokens, stored as hashes only, and the
// newest state of the fast lane's entries (API keys, token deny entries,
// issuers' signing keys; see PublishFastLane).
//
// One Store type runs on two databases: PostgreSQL (through pgx) in
// production, and SQLite (modernc.org/sqlite, no cgo) embedded for
// `portico dev` and single-node installs. Open picks the driver from the
// DSN. The schema is migrated when a Store opens, idempotently and safely
// when several control plane processes start at once. The conformance
// suite in control/store/storetest runs against both.
//
// Versions are numbered 1, 2, 3, ... without gaps. A writer reads the
// newest version, computes the next config from it, and commits naming
// the version it started from; a commit that lost a race fails with
// ErrConflict and the writer starts again from the new newest version, so
// concurrent writers serialize and none of their changes is lost.
package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/portico-gw/portico/internal/sqlstore"
)

// Errors a caller branches on. Others wrap the database's error.
var (
	// ErrNotFound is returned when the version, blob or token asked for
	// does not exist (and by Latest when no version does yet).
	ErrNotFound = errors.New("store: not found")
	// ErrConflict is returned by Commit when the newest version is no
	// longer the one the change was computed from.
	ErrConflict = errors.New("store: the newest version has changed")
	// ErrInvalid is returned, wrapped with the reason, for a write that
	// misses a required field.
	ErrInvalid = errors.New("store: invalid")
	// ErrDuplicate is returned when a token's id or hash is taken.
	ErrDuplicate = errors.New("store: already exists")
)

// Version is one accepted config version.
type Version struct {
	// Number counts versions from 1.
	Number int64
	// ConfigSHA256 names the blob of the version's input: every team's
	// config and the platform's objects (hex SHA-256).
	ConfigSHA256 string
	// SnapshotSHA256 names the blob of the compiled snapshot the nodes
	// run: the version's identity on the wire (hex SHA-256).
	SnapshotSHA256 string
	// CreatedBy is the admin caller (a token id) or a system actor.
	CreatedBy string
	CreatedAt time.Time
	Message   string
	// Diff describes the change against the previous version, for people.
	Diff string
	// RollbackOf is the version this one restores, or 0.
	RollbackOf int64
}

// Commit is a new version to append.
type Commit struct {
	// Config and Snapshot are stored as blobs under their SHA-256; a blob
	// that is already stored (a rollback, an unchanged input) is not
	// stored twice.
	Config, Snapshot []byte
	CreatedBy        string
	Message          string
	Diff             string
	RollbackOf       int64
	// Audit is recorded in the same transaction, with the new version's
	// number: a version never exists without its audit entry.
	Audit AuditEntry
}

// AuditEntry is one action of an admin caller, allowed or refused.
type AuditEntry struct {
	// ID orders the entries; assigned by the store.
	ID int64
	// At is set by the store when zero.
	At time.Time
	// Actor is who acted: a token id, or "system" for the control plane's
	// own actions (an automatic revert).
	Actor string
	// Team is the team the action concerns; "" for platform objects.
	Team string
	// Action names what was done ("routes.put", "rollback", "token.create").
	Action string
	// Object names what it was done to ("route orders.get").
	Object string
	// Outcome is "ok", or why the action was refused ("permission_denied").
	Outcome string
	// Detail says more, for people. Never a credential.
	Detail string
	// Version is the version the action created, or 0.
	Version int64
}

// AuditQuery selects audit entries, newest first.
type AuditQuery struct {
	// Team, when set, keeps the entries of that team only.
	Team string
	// Before, when positive, keeps entries with a smaller ID (paging).
	Before int64
	// Limit caps the entries returned (default and maximum 1000).
	Limit int
}

// Token is an admin caller's credential, as stored: its hash, never the
// token itself.
type Token struct {
	// ID is public: it names the token in the audit log and in lists.
	ID string
	// Hash is the hex SHA-256 of the token.
	Hash string
	// Team is the team the token acts for; "" for a platform token.
	Team string
	// Role is "team-admin" or "platform-admin".
	Role      string
	CreatedBy string
	CreatedAt time.Time
	// RevokedAt is zero while the token is valid.
	RevokedAt time.Time
	Note      string
}

// Store is the control plane's state in a database. It is safe for
// concurrent use; Close it when done.
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

// SHA256 is the hex SHA-256 of b, as the store names blobs.
func SHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

const versionColumns = "number, config_sha, snapshot_sha, created_by, created_at, message, diff, rollback_of"

func scanVersion(row interface{ Scan(...any) error }) (Version, error) {
	var v Version
	var at int64
	err := row.Scan(&v.Number, &v.ConfigSHA256, &v.SnapshotSHA256, &v.CreatedBy, &at, &v.Message, &v.Diff, &v.RollbackOf)
	v.CreatedAt = fromMicros(at)
	return v, err
}

// Latest returns the newest version, or ErrNotFound if there is none.
func (s *Store) Latest(ctx context.Context) (Version, error) {
	v, err := scanVersion(s.db.SQL().QueryRowContext(ctx, s.db.Rebind("SELECT "+versionColumns+" FROM versions ORDER BY number DESC LIMIT 1")))
	return v, notFound(err, "no version yet")
}

// Get returns version n.
func (s *Store) Get(ctx context.Context, n int64) (Version, error) {
	v, err := scanVersion(s.db.SQL().QueryRowContext(ctx, s.db.Rebind("SELECT "+versionColumns+" FROM versions WHERE number = ?"), n))
	return v, notFound(err, fmt.Sprintf("version %d", n))
}

// List returns up to limit versions older than before (all, if before is
// not positive), newest first. limit defaults to, and is capped at, 1000.
func (s *Store) List(ctx context.Context, before int64, limit int) ([]Version, error) {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := s.db.SQL().QueryContext(ctx, s.db.Rebind("SELECT "+versionColumns+" FROM versions WHERE number < ? ORDER BY number DESC LIMIT ?"), before, limit)
	if err != nil {
		return nil, fmt.Errorf("store: listing versions: %w", err)
	}
	defer rows.Close()
	var out []Version
	for rows.Next() {
		v, err := scanVersion(rows)
		if err != nil {
			return nil, fmt.Errorf("store: listing versions: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Blob returns the blob named by its hex SHA-256.
func (s *Store) Blob(ctx context.Context, sha string) ([]byte, error) {
	var b []byte
	err := s.db.SQL().QueryRowContext(ctx, s.db.Rebind("SELECT data FROM blobs WHERE sha = ?"), sha).Scan(&b)
	return b, notFound(err, "blob "+sha)
}

// Commit appends version prev+1 if prev is still the newest version (0:
// there is none yet), with its blobs and its audit entry, in one
// transaction. It returns ErrConflict, writing nothing, if another commit
// came first.
func (s *Store) Commit(ctx context.Context, prev int64, c Commit) (Version, error) {
	// (An empty config is one: no teams, no platform objects yet.)
	switch {
	case len(c.Snapshot) == 0:
		return Version{}, fmt.Errorf("%w: a version needs its snapshot", ErrInvalid)
	case c.CreatedBy == "":
		return Version{}, fmt.Errorf("%w: a version needs its author", ErrInvalid)
	case prev < 0:
		return Version{}, fmt.Errorf("%w: previous version %d", ErrInvalid, prev)
	}
	v := Version{
		Number: prev + 1, ConfigSHA256: SHA256(c.Config), SnapshotSHA256: SHA256(c.Snapshot),
		CreatedBy: c.CreatedBy, CreatedAt: time.Now().UTC().Truncate(time.Microsecond),
		Message: c.Message, Diff: c.Diff, RollbackOf: c.RollbackOf,
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var newest int64
		if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(number), 0) FROM versions").Scan(&newest); err != nil {
			return err
		}
		if newest != prev {
			return ErrConflict
		}
		for _, blob := range []struct {
			sha  string
			data []byte
		}{{v.ConfigSHA256, c.Config}, {v.SnapshotSHA256, c.Snapshot}} {
			b := blob.data
			if b == nil {
				b = []byte{} // NOT NULL: the empty blob (whose hash nil has too)
			}
			if _, err := tx.ExecContext(ctx, s.db.Rebind("INSERT INTO blobs (sha, data) VALUES (?, ?) ON CONFLICT (sha) DO NOTHING"), blob.sha, b); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, s.db.Rebind("INSERT INTO versions ("+versionColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
			v.Number, v.ConfigSHA256, v.SnapshotSHA256, v.CreatedBy, toMicros(v.CreatedAt), v.Message, v.Diff, v.RollbackOf); err != nil {
			if s.db.IsUnique(err) {
				return ErrConflict
			}
			return err
		}
		a := c.Audit
		a.Version = v.Number
		if a.At.IsZero() {
			a.At = v.CreatedAt
		}
		return s.insertAudit(ctx, tx, &a)
	})
	if err != nil {
		if errors.Is(err, ErrConflict) {
			return Version{}, err
		}
		return Version{}, fmt.Errorf("store: committing version %d: %w", v.Number, err)
	}
	return v, nil
}

// AppendAudit records an action that creates no version: a refused
// write, a token issued. It sets e.ID (and e.At when zero).
func (s *Store) AppendAudit(ctx context.Context, e *AuditEntry) error {
	if e.Action == "" || e.Actor == "" {
		return fmt.Errorf("%w: an audit entry needs its actor and action", ErrInvalid)
	}
	if e.At.IsZero() {
		e.At = time.Now().UTC().Truncate(time.Microsecond)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error { return s.insertAudit(ctx, tx, e) })
}

func (s *Store) insertAudit(ctx context.Context, tx *sql.Tx, e *AuditEntry) error {
	if e.Outcome == "" {
		e.Outcome = "ok"
	}
	return tx.QueryRowContext(ctx, s.db.Rebind("INSERT INTO audit (at, actor, team, action, object, outcome, detail, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"),
		toMicros(e.At), e.Actor, e.Team, e.Action, e.Object, e.Outcome, e.Detail, e.Version).Scan(&e.ID)
}

// Audit returns the entries q selects, newest first.
func (s *Store) Audit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	if q.Limit <= 0 || q.Limit > 1000 {
		q.Limit = 1000
	}
	if q.Before <= 0 {
		q.Before = 1<<63 - 1
	}
	query := "SELECT id, at, actor, team, action, object, outcome, detail, version FROM audit WHERE id < ?"
	args := []any{q.Before}
	if q.Team != "" {
		query += " AND team = ?"
		args = append(args, q.Team)
	}
	query += " ORDER BY id DESC LIMIT ?"
	args = append(args, q.Limit)
	rows, err := s.db.SQL().QueryContext(ctx, s.db.Rebind(query), args...)
	if err != nil {
		return nil, fmt.Errorf("store: reading the audit log: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Team, &e.Action, &e.Object, &e.Outcome, &e.Detail, &e.Version); err != nil {
			return nil, fmt.Errorf("store: reading the audit log: %w", err)
		}
		e.At = fromMicros(at)
		out = append(out, e)
	}
	return out, rows.Err()
}

// PutToken stores a new token. It returns ErrDuplicate if its id or hash
// is taken.
func (s *Store) PutToken(ctx context.Context, t Token) error {
	switch {
	case t.ID == "" || t.Hash == "":
		return fmt.Errorf("%w: a token needs its id and hash", ErrInvalid)
	case len(t.Hash) != 64 || strings.Trim(t.Hash, "0123456789abcdef") != "":
		return fmt.Errorf("%w: a token's hash is a hex SHA-256", ErrInvalid)
	case t.Role != "team-admin" && t.Role != "platform-admin":
		return fmt.Errorf("%w: role %q", ErrInvalid, t.Role)
	case t.Role == "team-admin" && t.Team == "":
		return fmt.Errorf("%w: a team-admin token needs its team", ErrInvalid)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now().UTC()
	}
	_, err := s.db.SQL().ExecContext(ctx, s.db.Rebind("INSERT INTO tokens (id, hash, team, role, created_by, created_at, revoked_at, note) VALUES (?, ?, ?, ?, ?, ?, 0, ?)"),
		t.ID, t.Hash, t.Team, t.Role, t.CreatedBy, toMicros(t.CreatedAt), t.Note)
	if s.db.IsUnique(err) {
		return fmt.Errorf("%w: token %q", ErrDuplicate, t.ID)
	}
	if err != nil {
		return fmt.Errorf("store: storing token %q: %w", t.ID, err)
	}
	return nil
}

const tokenColumns = "id, hash, team, role, created_by, created_at, revoked_at, note"

func scanToken(row interface{ Scan(...any) error }) (Token, error) {
	var t Token
	var created, revoked int64
	err := row.Scan(&t.ID, &t.Hash, &t.Team, &t.Role, &t.CreatedBy, &created, &revoked, &t.Note)
	t.CreatedAt = fromMicros(created)
	if revoked != 0 {
		t.RevokedAt = fromMicros(revoked)
	}
	return t, err
}

// TokenByHash returns the token whose hash is hash, revoked or not.
func (s *Store) TokenByHash(ctx context.Context, hash string) (Token, error) {
	t, err := scanToken(s.db.SQL().QueryRowContext(ctx, s.db.Rebind("SELECT "+tokenColumns+" FROM tokens WHERE hash = ?"), hash))
	return t, notFound(err, "token")
}

// Tokens returns the tokens of team ("" for platform tokens), oldest
// first.
func (s *Store) Tokens(ctx context.Context, team string) ([]Token, error) {
	rows, err := s.db.SQL().QueryContext(ctx, s.db.Rebind("SELECT "+tokenColumns+" FROM tokens WHERE team = ? ORDER BY created_at, id"), team)
	if err != nil {
		return nil, fmt.Errorf("store: listing tokens: %w", err)
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("store: listing tokens: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// RevokeToken marks token id revoked at at. Revoking a revoked token
// keeps the first time.
func (s *Store) RevokeToken(ctx context.Context, id string, at time.Time) error {
	res, err := s.db.SQL().ExecContext(ctx, s.db.Rebind("UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at = 0"), toMicros(at), id)
	if err != nil {
		return fmt.Errorf("store: revoking token %q: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var one int
		if err := s.db.SQL().QueryRowContext(ctx, s.db.Rebind("SELECT 1 FROM tokens WHERE id = ?"), id).Scan(&one); err != nil {
			return notFound(err, "token "+id)
		}
	}
	return nil
}

// inTx runs fn in a transaction that serializes with every other writer
// of the store, and commits it if fn returns nil.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error { return s.db.InTx(ctx, fn) }

func notFound(err error, what string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	if err != nil {
		return fmt.Errorf("store: reading %s: %w", what, err)
	}
	return nil
}

// Times are stored as microseconds since the epoch on both databases, the
// zero time as 0.
var (
	toMicros   = sqlstore.Micros
	fromMicros = sqlstore.FromMicros
)
