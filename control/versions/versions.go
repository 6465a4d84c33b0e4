// Package versions is the one path by which the control plane writes a
// config version: a team's or the platform's change, a rollback, or a
// rollout's revert or abort. Each is planned from the newest version,
// committed with its audit entry in one transaction, planned again from
// the new newest version when another writer came first, and then
// published to the fleet.
package versions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/portico-gw/portico/control/store"
)

// ErrSkip, from a Plan, commits nothing: the change changes nothing, a
// dry run, or a newer version made it moot. Commit returns it as is.
var ErrSkip = errors.New("versions: nothing to commit")

// ErrBusy is Commit's error when other writers kept committing first.
var ErrBusy = errors.New("versions: other changes kept landing first")

// attempts bounds how often a Plan is made again after losing a race.
const attempts = 8

// Plan makes the commit of a change from latest, the newest version (the
// zero Version, Number 0, when there is none yet). It may be called again,
// with a newer latest, when another writer committed first; an error
// other than ErrSkip refuses the change, and Commit returns it as is.
type Plan func(ctx context.Context, latest store.Version) (store.Commit, error)

// Writer commits and publishes versions. It is safe for concurrent use.
type Writer struct {
	store   *store.Store
	publish func(ctx context.Context, version int64) error
	log     *slog.Logger
}

// New returns a Writer on st that hands every new version to publish
// (nil: none).
func New(st *store.Store, publish func(ctx context.Context, version int64) error, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.Default()
	}
	return &Writer{store: st, publish: publish, log: log}
}

// Commit commits what plan makes of the newest version and publishes the
// new version. A publish that fails is logged, not returned: the version
// is committed, and the next publish (or a restart) sends it.
func (w *Writer) Commit(ctx context.Context, plan Plan) (store.Version, error) {
	for range attempts {
		latest, err := w.store.Latest(ctx)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return store.Version{}, fmt.Errorf("versions: reading the newest version: %w", err)
		}
		c, err := plan(ctx, latest)
		if err != nil {
			return store.Version{}, err
		}
		v, err := w.store.Commit(ctx, latest.Number, c)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return store.Version{}, err
		}
		if w.publish != nil {
			if err := w.publish(context.WithoutCancel(ctx), v.Number); err != nil {
				w.log.Error("publishing a version failed", "version", v.Number, "err", err)
			}
		}
		return v, nil
	}
	return store.Version{}, ErrBusy
}
