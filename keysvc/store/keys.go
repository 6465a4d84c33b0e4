package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Status is a key's state. The numbers are those of configv1.KeyStatus.
type Status int

const (
	// StatusActive: the key works, until its NotAfter if it has one.
	StatusActive Status = 1
	// StatusRevoked: the key works no more, whatever its NotAfter.
	StatusRevoked Status = 2
)

func (s Status) String() string {
	switch s {
	case StatusActive:
		return "active"
	case StatusRevoked:
		return "revoked"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Key is an API key as stored: the SHA-256 of the key, never the key.
type Key struct {
	ID string
	// Hash is the SHA-256 of the raw key; no two keys share one.
	Hash [32]byte
	// Prefix is the start of the raw key, shown to people to tell keys
	// apart. It is not secret.
	Prefix   string
	AppID    string
	TenantID string
	Plan     string
	Scopes   []string
	// Env is "live" or "test".
	Env string
	// Priority is a configv1.Priority number.
	Priority int32
	Status   Status
	Created  time.Time
	// NotAfter is when the key stops working; zero means never.
	NotAfter time.Time
	// Successor is the key that replaced this one in a rotation, and
	// Predecessor the key this one replaced; "" if none.
	Successor, Predecessor string
	// Revoked is when the key was revoked; zero while it is not.
	Revoked      time.Time
	RevokeReason string
	RevokedBy    string
	// Rev is the rev of the key's latest change, assigned by the store.
	Rev uint64
}

// ListFilter selects keys for ListKeys; the zero value selects the first
// page of all keys.
type ListFilter struct {
	// AppID and TenantID, when set, keep the keys of that app and tenant.
	AppID, TenantID string
	// After, when set, keeps the keys whose id sorts after it (paging).
	After string
	// Limit caps the keys returned (default and maximum 1000).
	Limit int
}

const keyColumns = "id, hash, prefix, app_id, tenant_id, plan, scopes, env, priority, status, created_at, not_after, successor, predecessor, revoked_at, revoke_reason, revoked_by, rev"

// check normalizes a key to be written and reports what makes it invalid.
func (k *Key) check() error {
	switch {
	case k.ID == "":
		return fmt.Errorf("%w: a key needs its id", ErrInvalid)
	case k.Hash == [32]byte{}:
		return fmt.Errorf("%w: key %q needs its hash", ErrInvalid, k.ID)
	case k.Env != "live" && k.Env != "test":
		return fmt.Errorf("%w: key %q: env %q is neither live nor test", ErrInvalid, k.ID, k.Env)
	}
	switch k.Status {
	case 0:
		k.Status = StatusActive
	case StatusActive, StatusRevoked:
	default:
		return fmt.Errorf("%w: key %q: %v", ErrInvalid, k.ID, k.Status)
	}
	if k.Created.IsZero() {
		k.Created = now()
	}
	return nil
}

// CreateKey stores a new key with the next rev and returns it as stored.
// A zero Status is StatusActive, a zero Created now. It returns
// ErrConflict if the key's id or hash is taken.
func (s *Store) CreateKey(ctx context.Context, k Key) (Key, error) {
	if err := k.check(); err != nil {
		return Key{}, err
	}
	var out Key
	err := s.inTx(ctx, func(tx *sql.Tx) (err error) {
		out, err = s.insertKey(ctx, tx, k)
		return err
	})
	if err != nil {
		return Key{}, wrap(err, "creating key %q", k.ID)
	}
	return out, nil
}

// RotateKey replaces key oldID with successor in one transaction. The old
// key must exist (else ErrNotFound), be active, not be past its NotAfter
// at successor.Created (now, when zero) and not have been rotated before
// (else ErrConflict). It then works until the earlier of its NotAfter and
// oldNotAfter (zero: its own NotAfter), the overlap in which callers move
// to the successor, and names the successor, which names it as its
// predecessor. The old key gets the next rev, the successor the one after.
func (s *Store) RotateKey(ctx context.Context, oldID string, successor Key, oldNotAfter time.Time) (next, old Key, err error) {
	if err := successor.check(); err != nil {
		return Key{}, Key{}, err
	}
	if successor.Status != StatusActive {
		return Key{}, Key{}, fmt.Errorf("%w: successor %q must be active", ErrInvalid, successor.ID)
	}
	successor.Predecessor = oldID
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if old, err = s.getKey(ctx, tx, "id", oldID); err != nil {
			return err
		}
		switch {
		case old.Status != StatusActive:
			return fmt.Errorf("%w: key %q is %v", ErrConflict, oldID, old.Status)
		case old.Successor != "":
			return fmt.Errorf("%w: key %q was rotated to %q already", ErrConflict, oldID, old.Successor)
		case !old.NotAfter.IsZero() && !successor.Created.Before(old.NotAfter):
			return fmt.Errorf("%w: key %q expired at %v", ErrConflict, oldID, old.NotAfter)
		}
		notAfter := old.NotAfter
		if !oldNotAfter.IsZero() && (notAfter.IsZero() || oldNotAfter.Before(notAfter)) {
			notAfter = oldNotAfter
		}
		rev, err := s.nextRev(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.db.Rebind("UPDATE keysvc_keys SET not_after = ?, successor = ?, rev = ? WHERE id = ?"),
			micros(notAfter), successor.ID, rev, oldID); err != nil {
			return err
		}
		if next, err = s.insertKey(ctx, tx, successor); err != nil {
			return err
		}
		old, err = s.getKey(ctx, tx, "id", oldID)
		return err
	})
	if err != nil {
		return Key{}, Key{}, wrap(err, "rotating key %q to %q", oldID, successor.ID)
	}
	return next, old, nil
}

// WithdrawRotation undoes a rotation whose successor was never shown: in
// one transaction it revokes the successor (with reason and by) and gives
// the old key back its not_after from before the rotation (notAfter, zero
// for never) and no successor, each with the next rev, so that the
// rotation can be tried again and the old key does not stop at the end of
// an overlap nobody asked for. It answers the old key. ErrConflict if the
// old key's successor is not successorID any more.
func (s *Store) WithdrawRotation(ctx context.Context, oldID, successorID string, notAfter time.Time, reason, by string, at time.Time) (Key, error) {
	var old Key
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if old, err = s.getKey(ctx, tx, "id", oldID); err != nil {
			return err
		}
		if old.Successor != successorID {
			return fmt.Errorf("%w: key %q's successor is %q, not %q", ErrConflict, oldID, old.Successor, successorID)
		}
		next, err := s.getKey(ctx, tx, "id", successorID)
		if err != nil {
			return err
		}
		if next.Status != StatusRevoked {
			if _, err := s.revoke(ctx, tx, successorID, reason, by, at); err != nil {
				return err
			}
		}
		rev, err := s.nextRev(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.db.Rebind("UPDATE keysvc_keys SET not_after = ?, successor = '', rev = ? WHERE id = ?"),
			micros(notAfter), rev, oldID); err != nil {
			return err
		}
		old, err = s.getKey(ctx, tx, "id", oldID)
		return err
	})
	if err != nil {
		return Key{}, wrap(err, "withdrawing the rotation of key %q to %q", oldID, successorID)
	}
	return old, nil
}

// RevokeKey revokes key id at at (now, when zero), with the next rev, and
// returns it with changed set. A key that is revoked already is returned
// as it is, with changed false and no new rev: the first revocation's time,
// reason and author stay.
func (s *Store) RevokeKey(ctx context.Context, id, reason, by string, at time.Time) (k Key, changed bool, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if k, err = s.getKey(ctx, tx, "id", id); err != nil || k.Status == StatusRevoked {
			return err
		}
		k, err = s.revoke(ctx, tx, id, reason, by, at)
		changed = err == nil
		return err
	})
	if err != nil {
		return Key{}, false, wrap(err, "revoking key %q", id)
	}
	return k, changed, nil
}

// RevokeApp revokes every active key of app appID, as RevokeKey does, in
// one transaction, and returns the keys it revoked in id order, each with
// its own rev.
func (s *Store) RevokeApp(ctx context.Context, appID, reason, by string, at time.Time) ([]Key, error) {
	if appID == "" {
		return nil, fmt.Errorf("%w: revoking an app needs its id", ErrInvalid)
	}
	var out []Key
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, s.db.Rebind("SELECT id FROM keysvc_keys WHERE app_id = ? AND status = ? ORDER BY id"), appID, StatusActive)
		if err != nil {
			return err
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		// The rows must be done with before the transaction's next
		// statement.
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for _, id := range ids {
			k, err := s.revoke(ctx, tx, id, reason, by, at)
			if err != nil {
				return err
			}
			out = append(out, k)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err, "revoking the keys of app %q", appID)
	}
	return out, nil
}

// GetKey returns key id, or ErrNotFound.
func (s *Store) GetKey(ctx context.Context, id string) (Key, error) {
	k, err := s.getKey(ctx, s.db.SQL(), "id", id)
	return k, wrap(err, "reading key %q", id)
}

// KeyByHash returns the key whose hash is h, revoked or not, or
// ErrNotFound.
func (s *Store) KeyByHash(ctx context.Context, h [32]byte) (Key, error) {
	k, err := s.getKey(ctx, s.db.SQL(), "hash", h[:])
	return k, wrap(err, "reading a key by hash")
}

// ListKeys returns the keys f selects, in id order.
func (s *Store) ListKeys(ctx context.Context, f ListFilter) ([]Key, error) {
	query := "SELECT " + keyColumns + " FROM keysvc_keys WHERE id > ?"
	args := []any{f.After}
	if f.AppID != "" {
		query += " AND app_id = ?"
		args = append(args, f.AppID)
	}
	if f.TenantID != "" {
		query += " AND tenant_id = ?"
		args = append(args, f.TenantID)
	}
	query += " ORDER BY id LIMIT ?"
	args = append(args, limit(f.Limit, 1000))
	keys, err := s.keys(ctx, s.db.SQL(), query, args...)
	return keys, wrap(err, "listing keys")
}

// insertKey stores k, normalized by check, with the next rev and returns
// it as stored.
func (s *Store) insertKey(ctx context.Context, tx *sql.Tx, k Key) (Key, error) {
	rev, err := s.nextRev(ctx, tx)
	if err != nil {
		return Key{}, err
	}
	scopes, err := json.Marshal(k.Scopes)
	if err != nil {
		return Key{}, err
	}
	if len(k.Scopes) == 0 {
		scopes = []byte("[]")
	}
	_, err = tx.ExecContext(ctx, s.db.Rebind("INSERT INTO keysvc_keys ("+keyColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
		k.ID, k.Hash[:], k.Prefix, k.AppID, k.TenantID, k.Plan, string(scopes), k.Env, k.Priority, int(k.Status),
		micros(k.Created), micros(k.NotAfter), k.Successor, k.Predecessor, micros(k.Revoked), k.RevokeReason, k.RevokedBy, rev)
	if s.db.IsUnique(err) {
		return Key{}, fmt.Errorf("%w: key %q: its id or hash is taken", ErrConflict, k.ID)
	}
	if err != nil {
		return Key{}, err
	}
	return s.getKey(ctx, tx, "id", k.ID)
}

// revoke revokes key id, which is active, with the next rev.
func (s *Store) revoke(ctx context.Context, tx *sql.Tx, id, reason, by string, at time.Time) (Key, error) {
	if at.IsZero() {
		at = now()
	}
	rev, err := s.nextRev(ctx, tx)
	if err != nil {
		return Key{}, err
	}
	if _, err := tx.ExecContext(ctx, s.db.Rebind("UPDATE keysvc_keys SET status = ?, revoked_at = ?, revoke_reason = ?, revoked_by = ?, rev = ? WHERE id = ?"),
		int(StatusRevoked), micros(at), reason, by, rev, id); err != nil {
		return Key{}, err
	}
	return s.getKey(ctx, tx, "id", id)
}

// getKey returns the key whose column (id or hash) is v.
func (s *Store) getKey(ctx context.Context, q querier, column string, v any) (Key, error) {
	keys, err := s.keys(ctx, q, "SELECT "+keyColumns+" FROM keysvc_keys WHERE "+column+" = ?", v)
	if err != nil {
		return Key{}, err
	}
	if len(keys) == 0 {
		if column == "id" {
			return Key{}, fmt.Errorf("%w: key %q", ErrNotFound, v)
		}
		return Key{}, fmt.Errorf("%w: no key has that %s", ErrNotFound, column)
	}
	return keys[0], nil
}

// keys runs query, which selects keyColumns.
func (s *Store) keys(ctx context.Context, q querier, query string, args ...any) ([]Key, error) {
	rows, err := q.QueryContext(ctx, s.db.Rebind(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		var (
			k                          Key
			hash                       []byte
			scopes                     string
			status                     int
			created, notAfter, revoked int64
			rev                        int64
		)
		if err := rows.Scan(&k.ID, &hash, &k.Prefix, &k.AppID, &k.TenantID, &k.Plan, &scopes, &k.Env, &k.Priority, &status,
			&created, &notAfter, &k.Successor, &k.Predecessor, &revoked, &k.RevokeReason, &k.RevokedBy, &rev); err != nil {
			return nil, err
		}
		if len(hash) != len(k.Hash) {
			return nil, fmt.Errorf("key %q: the stored hash has %d bytes", k.ID, len(hash))
		}
		copy(k.Hash[:], hash)
		if err := json.Unmarshal([]byte(scopes), &k.Scopes); err != nil {
			return nil, fmt.Errorf("key %q: scopes: %w", k.ID, err)
		}
		if len(k.Scopes) == 0 {
			k.Scopes = nil
		}
		k.Status = Status(status)
		k.Created, k.NotAfter, k.Revoked = fromMicros(created), fromMicros(notAfter), fromMicros(revoked)
		k.Rev = uint64(rev)
		out = append(out, k)
	}
	return out, rows.Err()
}
