package store

import (
	"cmp"
	"context"
	"database/sql"
	"math"
	"slices"
	"time"
)

// maxChanges caps the rows one call of Changes returns.
const maxChanges = 10000

// Change is one row changed after some rev, at its latest rev: exactly
// one of Key, Deny and IssuerKeys is set.
type Change struct {
	Rev        uint64
	Key        *Key
	Deny       *DenyEntry
	IssuerKeys *IssuerKeys
}

// Changes returns the rows whose rev is after after, in rev order: at most
// n of them (10000 when n is not positive or above it). A row changed
// several times since after appears once, at its latest rev. Deny entries
// appear until they are pruned, expired or not.
//
// Revs are assigned in commit order, so a reader that asks again after the
// last rev it got misses no change, not even one that was being written
// during the first call.
func (s *Store) Changes(ctx context.Context, after uint64, n int) ([]Change, error) {
	n = limit(n, maxChanges)
	from := int64(min(after, math.MaxInt64))
	var out []Change
	// The three tables are read in one snapshot: read one at a time, a
	// change committed between the reads could show its later rev without
	// its earlier one.
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		keys, err := s.keys(ctx, tx, "SELECT "+keyColumns+" FROM keysvc_keys WHERE rev > ? ORDER BY rev LIMIT ?", from, n)
		if err != nil {
			return err
		}
		deny, err := s.scanDeny(tx.QueryContext(ctx, s.db.Rebind("SELECT id, entry, expires, rev FROM keysvc_deny WHERE rev > ? ORDER BY rev LIMIT ?"), from, n))
		if err != nil {
			return err
		}
		issuers, err := s.issuerKeys(ctx, tx, "SELECT issuer, jwks, rev FROM keysvc_issuer_keys WHERE rev > ? ORDER BY rev LIMIT ?", from, n)
		if err != nil {
			return err
		}
		out = make([]Change, 0, len(keys)+len(deny)+len(issuers))
		for i := range keys {
			out = append(out, Change{Rev: keys[i].Rev, Key: &keys[i]})
		}
		for i := range deny {
			out = append(out, Change{Rev: deny[i].Rev, Deny: &deny[i]})
		}
		for i := range issuers {
			out = append(out, Change{Rev: issuers[i].Rev, IssuerKeys: &issuers[i]})
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err, "reading the changes after rev %d", after)
	}
	slices.SortFunc(out, func(a, b Change) int { return cmp.Compare(a.Rev, b.Rev) })
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// State returns the whole state as of one rev, seq, read in one snapshot:
// every key in id order, the deny entries that expire after now in id
// order, and every issuer's keys in issuer order. Every row returned has a
// rev of at most seq, and every change up to seq is in what it returns.
func (s *Store) State(ctx context.Context, now time.Time) (seq uint64, keys []Key, deny []DenyEntry, issuers []IssuerKeys, err error) {
	err = s.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		if seq, err = s.seq(ctx, tx); err != nil {
			return err
		}
		if keys, err = s.keys(ctx, tx, "SELECT "+keyColumns+" FROM keysvc_keys ORDER BY id"); err != nil {
			return err
		}
		if deny, err = s.denyEntries(ctx, tx, now); err != nil {
			return err
		}
		issuers, err = s.issuerKeys(ctx, tx, "SELECT issuer, jwks, rev FROM keysvc_issuer_keys ORDER BY issuer")
		return err
	})
	if err != nil {
		return 0, nil, nil, nil, wrap(err, "reading the state")
	}
	return seq, keys, deny, issuers, nil
}
