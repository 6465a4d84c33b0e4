package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// IssuerKeys are the signing keys an issuer published, as stored.
type IssuerKeys struct {
	// Issuer names an issuer of the config.
	Issuer string
	// JWKS is the JSON Web Key Set the issuer published.
	JWKS string
	// Rev is the rev of the latest change of the issuer's keys, assigned by
	// the store.
	Rev uint64
}

// PutIssuerKeys stores the keys issuer published, replacing those stored
// before, with the next rev. Keys equal to those stored are left as they
// are, with their rev: a poller that fetches an unchanged key set makes no
// change to send.
func (s *Store) PutIssuerKeys(ctx context.Context, issuer, jwks string) (IssuerKeys, error) {
	if issuer == "" || jwks == "" {
		return IssuerKeys{}, fmt.Errorf("%w: issuer keys need the issuer and its JWKS", ErrInvalid)
	}
	ik := IssuerKeys{Issuer: issuer, JWKS: jwks}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var stored string
		var rev int64
		err := tx.QueryRowContext(ctx, s.db.Rebind("SELECT jwks, rev FROM keysvc_issuer_keys WHERE issuer = ?"), issuer).Scan(&stored, &rev)
		switch {
		case err == nil && stored == jwks:
			ik.Rev = uint64(rev)
			return nil
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if rev, err = s.nextRev(ctx, tx); err != nil {
			return err
		}
		ik.Rev = uint64(rev)
		_, err = tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO keysvc_issuer_keys (issuer, jwks, rev) VALUES (?, ?, ?)
			ON CONFLICT (issuer) DO UPDATE SET jwks = excluded.jwks, rev = excluded.rev`), issuer, jwks, rev)
		return err
	})
	if err != nil {
		return IssuerKeys{}, wrap(err, "putting the keys of issuer %q", issuer)
	}
	return ik, nil
}

func (s *Store) issuerKeys(ctx context.Context, q querier, query string, args ...any) ([]IssuerKeys, error) {
	rows, err := q.QueryContext(ctx, s.db.Rebind(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []IssuerKeys
	for rows.Next() {
		var ik IssuerKeys
		var rev int64
		if err := rows.Scan(&ik.Issuer, &ik.JWKS, &rev); err != nil {
			return nil, err
		}
		ik.Rev = uint64(rev)
		out = append(out, ik)
	}
	return out, rows.Err()
}
