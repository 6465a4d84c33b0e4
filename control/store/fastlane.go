package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The fast lane is what the control plane sends every node at once,
// unstaged: API key changes, token deny entries, issuers' signing keys.
// Producers publish ordered batches of entries, numbered by their own
// sequence; the store keeps the newest state of every entry with the
// fast-lane version of its last change, so what a node holding version V
// lacks is the entries whose version is above V, and the whole state is
// every entry.
//
// Versions count publishes from 1, without gaps, under the writers' lock.
// The epoch names the database's fast-lane history: a node that holds a
// version of another epoch must start again from the whole state.

// ErrSeqGap is returned, as a *SeqGapError, by PublishFastLane for a
// batch that starts after the last seq stored of its source.
var ErrSeqGap = errors.New("store: the batch starts after the source's stored seq")

// SeqGapError is a batch refused because the store lacks the changes
// before it. The producer resends from Have.
type SeqGapError struct {
	Source string
	// Have is the source's last stored seq (0: none yet).
	Have uint64
}

func (e *SeqGapError) Error() string {
	return fmt.Sprintf("store: fast-lane source %q has seq %d: a batch after it leaves a gap", e.Source, e.Have)
}

// Unwrap makes errors.Is(err, ErrSeqGap) true.
func (e *SeqGapError) Unwrap() error { return ErrSeqGap }

// FastLaneEntry is one entry of the fast lane's state.
type FastLaneEntry struct {
	// Kind and ID identify the entry: a publish replaces the stored entry
	// of the same kind and id. Both are opaque to the store ("key",
	// "deny", "issuer_keys").
	Kind string
	ID   string
	// Rev is the producer's revision: a publish replaces the stored entry
	// only if its Rev is higher.
	Rev uint64
	// Data is the marshalled entry, opaque to the store.
	Data []byte
	// Expires is when PruneFastLane may drop the entry; zero: never.
	Expires time.Time
	// Version is the fast-lane version of the entry's last change. The
	// store sets it: PublishFastLane sets it on each entry of its batch
	// that it stored (0 on those it skipped), whatever it was.
	Version uint64
}

// PublishFastLane stores a batch of source's changes, those after seq
// fromSeq up to and including toSeq, as the next fast-lane version, and
// returns that version and the source's seq, now toSeq. Each entry is
// added, or replaces the stored entry of its kind and id if its Rev is
// higher; an entry no newer than the stored one is skipped. The version
// is taken even if every entry is skipped.
//
// A batch the store already has (toSeq at most the stored seq: a retry)
// changes nothing and returns the current version and the stored seq. A
// batch that starts after the stored seq returns a *SeqGapError. A batch
// that overlaps what is stored is applied whole: its older entries are
// skipped by the Rev rule.
//
// Publishes of any sources, from any number of Stores on the database,
// serialize with each other and with Commit.
func (s *Store) PublishFastLane(ctx context.Context, source string, fromSeq, toSeq uint64, entries []FastLaneEntry) (version, seq uint64, err error) {
	if err := checkBatch(source, fromSeq, toSeq, entries); err != nil {
		return 0, 0, err
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var current, have int64
		err := tx.QueryRowContext(ctx, s.db.Rebind("SELECT f.version, COALESCE(s.seq, 0) FROM fast_lane f LEFT JOIN fast_lane_sources s ON s.source = ?"), source).
			Scan(&current, &have)
		if err != nil {
			return err
		}
		switch {
		case toSeq <= uint64(have):
			version, seq = uint64(current), uint64(have)
			return nil
		case fromSeq > uint64(have):
			return &SeqGapError{Source: source, Have: uint64(have)}
		}
		version, seq = uint64(current)+1, toSeq
		if len(entries) > 0 {
			// The entry's columns but version change only if the stored
			// entry is older; a row the WHERE refuses is left as it is.
			stmt, err := tx.PrepareContext(ctx, s.db.Rebind(`INSERT INTO fast_lane_entries (kind, id, rev, data, expires_at, version) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (kind, id) DO UPDATE SET rev = excluded.rev, data = excluded.data, expires_at = excluded.expires_at, version = excluded.version
				WHERE fast_lane_entries.rev < excluded.rev`))
			if err != nil {
				return err
			}
			defer stmt.Close()
			for i, e := range entries {
				data := e.Data
				if data == nil {
					data = []byte{} // NOT NULL: the empty entry
				}
				res, err := stmt.ExecContext(ctx, e.Kind, e.ID, int64(e.Rev), data, expiresMicros(e.Expires), int64(version))
				if err != nil {
					return fmt.Errorf("entry %s %q: %w", e.Kind, e.ID, err)
				}
				// The upsert touches no row when the WHERE refuses it.
				n, err := res.RowsAffected()
				if err != nil {
					return err
				}
				entries[i].Version = 0
				if n > 0 {
					entries[i].Version = version
				}
			}
		}
		if _, err := tx.ExecContext(ctx, s.db.Rebind("UPDATE fast_lane SET version = ?"), int64(version)); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.db.Rebind("INSERT INTO fast_lane_sources (source, seq) VALUES (?, ?) ON CONFLICT (source) DO UPDATE SET seq = excluded.seq"),
			source, int64(toSeq))
		return err
	})
	var gap *SeqGapError
	switch {
	case errors.As(err, &gap):
		return 0, 0, err
	case err != nil:
		return 0, 0, fmt.Errorf("store: publishing %s's fast-lane batch (%d, %d]: %w", source, fromSeq, toSeq, err)
	}
	return version, seq, nil
}

// checkBatch refuses what PublishFastLane cannot store: the columns are
// signed 64-bit integers on both databases.
func checkBatch(source string, fromSeq, toSeq uint64, entries []FastLaneEntry) error {
	switch {
	case source == "":
		return fmt.Errorf("%w: a fast-lane batch needs its source", ErrInvalid)
	case fromSeq >= toSeq:
		return fmt.Errorf("%w: a fast-lane batch covers (from, to] with from < to, not (%d, %d]", ErrInvalid, fromSeq, toSeq)
	case toSeq > math.MaxInt64:
		return fmt.Errorf("%w: fast-lane seq %d is above 2^63-1", ErrInvalid, toSeq)
	}
	for i, e := range entries {
		switch {
		case e.Kind == "" || e.ID == "":
			return fmt.Errorf("%w: fast-lane entry %d needs its kind and id", ErrInvalid, i)
		case e.Rev > math.MaxInt64:
			return fmt.Errorf("%w: fast-lane entry %s %q: rev %d is above 2^63-1", ErrInvalid, e.Kind, e.ID, e.Rev)
		}
	}
	return nil
}

// FastLaneSince returns the entries whose version is above after, ordered
// by version, then kind and id, and the current version, read at one
// moment: the entries are exactly what changed between after and version.
// after = 0 gives the whole state.
func (s *Store) FastLaneSince(ctx context.Context, after uint64) (entries []FastLaneEntry, version uint64, err error) {
	// One statement, so one snapshot on both databases: the version read
	// is the one the entries are at. The fast_lane row always exists, so
	// the outer join returns one row (of NULL entry columns) when no entry
	// is newer.
	rows, err := s.db.SQL().QueryContext(ctx, s.db.Rebind(`SELECT f.version, e.kind, e.id, e.rev, e.data, e.expires_at, e.version
		FROM fast_lane f LEFT JOIN fast_lane_entries e ON e.version > ?`), int64(min(after, math.MaxInt64)))
	if err != nil {
		return nil, 0, fmt.Errorf("store: reading the fast lane: %w", err)
	}
	defer rows.Close()
	var current int64
	for rows.Next() {
		var kind, id sql.Null[string]
		var rev, expires, v sql.Null[int64]
		var data []byte
		if err := rows.Scan(&current, &kind, &id, &rev, &data, &expires, &v); err != nil {
			return nil, 0, fmt.Errorf("store: reading the fast lane: %w", err)
		}
		if !kind.Valid {
			continue
		}
		if data == nil {
			data = []byte{}
		}
		entries = append(entries, FastLaneEntry{
			Kind: kind.V, ID: id.V, Rev: uint64(rev.V), Data: data,
			Expires: expiresTime(expires.V), Version: uint64(v.V),
		})
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("store: reading the fast lane: %w", err)
	}
	// Sorted here rather than by the database: PostgreSQL orders text by
	// the database's collation, SQLite by bytes.
	slices.SortFunc(entries, func(a, b FastLaneEntry) int {
		return cmp.Or(cmp.Compare(a.Version, b.Version), strings.Compare(a.Kind, b.Kind), strings.Compare(a.ID, b.ID))
	})
	return entries, uint64(current), nil
}

// FastLaneInfo returns the fast lane's epoch, 32 hex digits chosen at
// random when the database was created and never changed, and its current
// version (0 before the first publish).
func (s *Store) FastLaneInfo(ctx context.Context) (epoch string, version uint64, err error) {
	var v int64
	if err := s.db.SQL().QueryRowContext(ctx, "SELECT epoch, version FROM fast_lane").Scan(&epoch, &v); err != nil {
		return "", 0, fmt.Errorf("store: reading the fast lane: %w", err)
	}
	return epoch, uint64(v), nil
}

// FastLaneSource returns the last seq stored of source: a producer
// resends its changes after it. It is 0 for a source that never published.
func (s *Store) FastLaneSource(ctx context.Context, source string) (seq uint64, err error) {
	var v int64
	err = s.db.SQL().QueryRowContext(ctx, s.db.Rebind("SELECT seq FROM fast_lane_sources WHERE source = ?"), source).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("store: reading fast-lane source %q: %w", source, err)
	}
	return uint64(v), nil
}

// PruneFastLane deletes the entries that expire before before (an entry
// whose Expires is zero never does) and returns how many it deleted. The
// version does not change: nodes drop expired entries by themselves.
func (s *Store) PruneFastLane(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Rebind("DELETE FROM fast_lane_entries WHERE expires_at <> 0 AND expires_at < ?"), toMicros(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: pruning the fast lane: %w", err)
	}
	return int(n), nil
}

// newEpoch returns a new fast-lane epoch: 16 random bytes in hex.
func newEpoch() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// An entry's expiry is stored as microseconds since the Unix epoch, 0 for
// none.
func expiresMicros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return toMicros(t)
}

func expiresTime(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return fromMicros(us)
}
