// Package control wires the control plane together: the admin API, the
// distribution streams, and the store under both. `portico control` and
// `portico dev` serve its Handler.
package control

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/portico-gw/portico/control/admin"
	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/control/versions"
)

// Options configures a Plane.
type Options struct {
	// Store holds the versions; the caller opens and closes it.
	Store *store.Store
	// BootstrapToken, if set, is made a platform-admin token (see
	// admin.Bootstrap).
	BootstrapToken string
	Logger         *slog.Logger
	// Rollout stages new versions (see distribution.RolloutOptions); the
	// zero value sends each version to every node at once.
	Rollout distribution.RolloutOptions
	// NodeToken, if set, is the credential nodes must present on their
	// streams (kept here as its hash only).
	NodeToken string
	// PublisherToken, if set, is the credential producers (the key
	// service) must present to put changes on the fast lane.
	PublisherToken string
}

// Plane is a running control plane.
type Plane struct {
	Admin        *admin.Service
	Distribution *distribution.Server
	// Handler serves both APIs; it needs HTTP/2 (h2c or TLS) for the
	// distribution streams.
	Handler http.Handler
}

// Close stops the control plane's background work (a rollout in
// progress stays where it is).
func (p *Plane) Close() { p.Distribution.Close() }

// New returns a control plane over opts.Store that distributes every
// version the admin API commits, starting with the newest stored one.
func New(ctx context.Context, opts Options) (*Plane, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.BootstrapToken != "" {
		if err := admin.Bootstrap(ctx, opts.Store, opts.BootstrapToken); err != nil {
			return nil, err
		}
	}
	var nodeTokenHash string
	if opts.NodeToken != "" {
		nodeTokenHash = store.SHA256([]byte(opts.NodeToken))
	}
	var publisherTokenHash string
	if opts.PublisherToken != "" {
		publisherTokenHash = store.SHA256([]byte(opts.PublisherToken))
	}
	// Every version, a team's change, a rollback or a rollout's revert,
	// is written through one Writer, which publishes it. (A failure to
	// publish leaves the fleet on the version before; the next start
	// publishes it.)
	var dist *distribution.Server
	w := versions.New(opts.Store, func(ctx context.Context, v int64) error { return dist.Publish(ctx, v) }, log)
	dist = distribution.New(opts.Store, distribution.Options{Logger: log, Rollout: opts.Rollout, Versions: w,
		NodeTokenHash: nodeTokenHash, PublisherTokenHash: publisherTokenHash})
	p := &Plane{Distribution: dist}
	p.Admin = admin.New(opts.Store, admin.Options{Logger: log, Fleet: dist, Versions: w})
	if err := dist.PublishLatest(ctx); err != nil {
		return nil, fmt.Errorf("control: publishing the newest version: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(p.Admin.Handler())
	mux.Handle(dist.Handler())
	mux.Handle(dist.Publisher().Handler())
	p.Handler = mux
	return p, nil
}
