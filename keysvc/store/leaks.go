package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The outcomes of a leak report.
const (
	// OutcomeRevoked: the leaked key was active and is now revoked.
	OutcomeRevoked = "revoked"
	// OutcomeAlreadyRevoked: the leaked key was revoked before the report.
	OutcomeAlreadyRevoked = "already_revoked"
	// OutcomeUnknown: no key has the reported hash.
	OutcomeUnknown = "unknown"
)

// LeakReport records one key a secret scanner reported as leaked, and what
// the report did.
type LeakReport struct {
	// ID orders the reports; assigned by the store.
	ID int64
	// At is when the report arrived.
	At time.Time
	// Reporter names the scanner ("github"); Source says where it found the
	// key ("public_repository"), URL where exactly, and Reason why it
	// reported it.
	Reporter, URL, Source, Reason string
	// KeyHash is the SHA-256 of the reported key.
	KeyHash [32]byte
	// KeyID is the key that has KeyHash, or "" if none has.
	KeyID string
	// Outcome is OutcomeRevoked, OutcomeAlreadyRevoked or OutcomeUnknown.
	Outcome string
}

// ReportLeaked handles a scanner's report of leaked keys, given by their
// hashes, in one transaction: it revokes the active key of each hash (by
// "scanner:"+r.Reporter, for r.Reason, at r.At or now) and records a
// LeakReport with r's Reporter, URL, Source, Reason and At and the hash's
// outcome. It returns the recorded reports in the order of hashes. r's
// ID, KeyHash, KeyID and Outcome are ignored.
func (s *Store) ReportLeaked(ctx context.Context, hashes [][32]byte, r LeakReport) ([]LeakReport, error) {
	if r.Reporter == "" {
		return nil, fmt.Errorf("%w: a leak report needs its reporter", ErrInvalid)
	}
	if len(hashes) == 0 {
		return nil, nil
	}
	if r.At.IsZero() {
		r.At = now()
	}
	r.At = r.At.UTC().Truncate(time.Microsecond) // as stored
	var out []LeakReport
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for _, h := range hashes {
			rep := r
			rep.KeyHash, rep.KeyID, rep.Outcome = h, "", OutcomeUnknown
			k, err := s.getKey(ctx, tx, "hash", h[:])
			switch {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				return err
			case k.Status == StatusRevoked:
				rep.KeyID, rep.Outcome = k.ID, OutcomeAlreadyRevoked
			default:
				if _, err := s.revoke(ctx, tx, k.ID, r.Reason, "scanner:"+r.Reporter, r.At); err != nil {
					return err
				}
				rep.KeyID, rep.Outcome = k.ID, OutcomeRevoked
			}
			if err := tx.QueryRowContext(ctx, s.db.Rebind("INSERT INTO keysvc_leaks (at, reporter, url, source, reason, key_hash, key_id, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"),
				micros(rep.At), rep.Reporter, rep.URL, rep.Source, rep.Reason, h[:], rep.KeyID, rep.Outcome).Scan(&rep.ID); err != nil {
				return err
			}
			out = append(out, rep)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err, "recording %s's leak report", r.Reporter)
	}
	return out, nil
}

// LeakReports returns the n newest leak reports, newest first; n is 1000
// when not positive or above 1000.
func (s *Store) LeakReports(ctx context.Context, n int) ([]LeakReport, error) {
	rows, err := s.db.SQL().QueryContext(ctx, s.db.Rebind("SELECT id, at, reporter, url, source, reason, key_hash, key_id, outcome FROM keysvc_leaks ORDER BY id DESC LIMIT ?"), limit(n, 1000))
	if err != nil {
		return nil, wrap(err, "reading leak reports")
	}
	defer rows.Close()
	var out []LeakReport
	for rows.Next() {
		var r LeakReport
		var at int64
		var hash []byte
		if err := rows.Scan(&r.ID, &at, &r.Reporter, &r.URL, &r.Source, &r.Reason, &hash, &r.KeyID, &r.Outcome); err != nil {
			return nil, wrap(err, "reading leak reports")
		}
		if len(hash) != len(r.KeyHash) {
			return nil, fmt.Errorf("store: leak report %d: the stored hash has %d bytes", r.ID, len(hash))
		}
		copy(r.KeyHash[:], hash)
		r.At = fromMicros(at)
		out = append(out, r)
	}
	return out, wrap(rows.Err(), "reading leak reports")
}
