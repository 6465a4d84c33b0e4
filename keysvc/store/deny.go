package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/denyentry"
	"github.com/portico-gw/portico/gateway/laneentry"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// DenyEntry is a token deny entry as stored.
type DenyEntry struct {
	// ID is the hex SHA-256 of the entry's identity: its issuer, the kind
	// and value of its match, and its issued_before. Putting an entry of the
	// same identity again replaces this one.
	ID    string
	Entry *configv1.DenyEntry
	// KeepUntil is denyentry.KeepUntil of Entry, when the store drops it:
	// never before a token it covers could be dead on every node, whatever
	// expires the entry asks for.
	KeepUntil time.Time
	// Rev is the rev of the entry's latest put, assigned by the store.
	Rev uint64
}

// PutDeny stores deny entry e with the next rev, replacing the entry of
// the same identity (see DenyEntry.ID) if there is one, until its
// KeepUntil. e needs its match and its expires. The store keeps its own
// copy of e.
func (s *Store) PutDeny(ctx context.Context, e *configv1.DenyEntry) (DenyEntry, error) {
	id, err := denyID(e)
	if err != nil {
		return DenyEntry{}, err
	}
	if !e.GetExpires().IsValid() {
		return DenyEntry{}, fmt.Errorf("%w: deny entry %s needs a valid expires", ErrInvalid, id)
	}
	entry, err := proto.MarshalOptions{Deterministic: true}.Marshal(e)
	if err != nil {
		return DenyEntry{}, fmt.Errorf("store: deny entry %s: %w", id, err)
	}
	d := DenyEntry{ID: id, Entry: proto.Clone(e).(*configv1.DenyEntry), KeepUntil: fromMicros(micros(denyentry.KeepUntil(e)))}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		rev, err := s.nextRev(ctx, tx)
		if err != nil {
			return err
		}
		d.Rev = uint64(rev)
		_, err = tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO keysvc_deny (id, entry, expires, rev) VALUES (?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET entry = excluded.entry, expires = excluded.expires, rev = excluded.rev`),
			id, entry, micros(d.KeepUntil), rev)
		return err
	})
	if err != nil {
		return DenyEntry{}, wrap(err, "putting deny entry %s", id)
	}
	return d, nil
}

// DenyEntries returns the entries kept until after now, in id order.
func (s *Store) DenyEntries(ctx context.Context, now time.Time) ([]DenyEntry, error) {
	out, err := s.denyEntries(ctx, s.db.SQL(), now)
	return out, wrap(err, "reading deny entries")
}

// PruneDeny deletes the entries kept until before before and returns how
// many it deleted. Deleting assigns no rev: a reader drops an entry after
// its KeepUntil, whether it hears of the deletion or not.
func (s *Store) PruneDeny(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Rebind("DELETE FROM keysvc_deny WHERE expires < ?"), micros(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, wrap(err, "pruning deny entries")
	}
	return int(n), nil
}

func (s *Store) denyEntries(ctx context.Context, q querier, now time.Time) ([]DenyEntry, error) {
	return s.scanDeny(q.QueryContext(ctx, s.db.Rebind("SELECT id, entry, expires, rev FROM keysvc_deny WHERE expires > ? ORDER BY id"), micros(now)))
}

// scanDeny reads the rows of a query that selects id, entry, expires, rev.
func (s *Store) scanDeny(rows *sql.Rows, err error) ([]DenyEntry, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DenyEntry
	for rows.Next() {
		var d DenyEntry
		var entry []byte
		var keep, rev int64
		if err := rows.Scan(&d.ID, &entry, &keep, &rev); err != nil {
			return nil, err
		}
		d.Entry = new(configv1.DenyEntry)
		if err := proto.Unmarshal(entry, d.Entry); err != nil {
			return nil, fmt.Errorf("deny entry %s: %w", d.ID, err)
		}
		d.KeepUntil, d.Rev = fromMicros(keep), uint64(rev)
		out = append(out, d)
	}
	return out, rows.Err()
}

// denyID returns the hex SHA-256 of e's identity: its issuer, the kind and
// value of its match, and its issued_before (not for a jti, which names
// one token: as on the control plane and the nodes). Each part is written with its
// length first, so that no two identities write the same bytes. The IDs
// are stored: the encoding must never change.
func denyID(e *configv1.DenyEntry) (string, error) {
	k, err := laneentry.DenyKeyOf(e)
	if err != nil {
		return "", fmt.Errorf("%w: a deny entry needs a jti, subject or client_id", ErrInvalid)
	}
	return k.String(), nil
}
