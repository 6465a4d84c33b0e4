package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Rollout is the state of one staged rollout, kept so that a control
// plane that restarts knows where it stood: the version it rolls out and
// the one before, the stage it reached, its state ("running", "paused",
// "done", "reverted", "halted", "aborted", "replaced"), the evidence of a
// revert or halt, and the nodes it gave the version.
type Rollout struct {
	Version, Previous int64
	Stage             int
	State, Evidence   string
	// Nodes are the ids of the nodes assigned the version, sorted.
	Nodes []string
	// UpdatedAt is set by SaveRollout.
	UpdatedAt time.Time
}

// SaveRollout records r, replacing what was recorded of r.Version.
func (s *Store) SaveRollout(ctx context.Context, r Rollout) error {
	if r.Version <= 0 || r.State == "" {
		return fmt.Errorf("%w: a rollout needs its version and state", ErrInvalid)
	}
	r.UpdatedAt = time.Now()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO rollouts (version, previous, stage, state, evidence, nodes, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (version) DO UPDATE SET previous = excluded.previous, stage = excluded.stage, state = excluded.state,
				evidence = excluded.evidence, nodes = excluded.nodes, updated_at = excluded.updated_at`),
			r.Version, r.Previous, r.Stage, r.State, r.Evidence, strings.Join(r.Nodes, "\n"), toMicros(r.UpdatedAt))
		return err
	})
}

// GetRollout returns what was recorded of the rollout of version, or
// ErrNotFound.
func (s *Store) GetRollout(ctx context.Context, version int64) (Rollout, error) {
	r := Rollout{Version: version}
	var at int64
	var nodes string
	err := s.db.SQL().QueryRowContext(ctx, s.db.Rebind("SELECT previous, stage, state, evidence, nodes, updated_at FROM rollouts WHERE version = ?"), version).
		Scan(&r.Previous, &r.Stage, &r.State, &r.Evidence, &nodes, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Rollout{}, fmt.Errorf("%w: no rollout of version %d", ErrNotFound, version)
	}
	if err != nil {
		return Rollout{}, fmt.Errorf("store: reading the rollout of version %d: %w", version, err)
	}
	r.UpdatedAt = fromMicros(at)
	if nodes != "" {
		r.Nodes = strings.Split(nodes, "\n")
	}
	return r, nil
}
