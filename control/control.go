// Package control wires the control plane together: the admin API, the
// distribution streams, and the store under both. Run is the whole
// `portico control` role (open the store, build the Plane, serve it until
// the context ends); New builds a Plane over a store the caller holds,
// for tests and for embedding.
package control

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/portico-gw/portico/control/admin"
	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/control/versions"
)

// Options configures a Plane (New) or the whole role (Run). For Run,
// the zero value with a loopback Listen (or with a PublisherToken) works:
// SQLite in the working directory, unstaged rollouts.
type Options struct {
	// Store holds the versions; the caller opens and closes it. Run opens
	// StoreDSN instead when Store is nil.
	Store *store.Store
	// StoreDSN is the store Run opens: postgres://user@host/db or
	// sqlite:PATH; empty means DefaultStoreDSN.
	StoreDSN string
	// BootstrapToken, if set, is made a platform-admin token (see
	// admin.Bootstrap).
	BootstrapToken string
	Logger         *slog.Logger
	// Now is the control plane's clock: what its answers to the nodes'
	// reports tell them the time is (the offset their usage windows are
	// corrected by), and the admin API's; nil means time.Now.
	Now func() time.Time
	// Rollout stages new versions (see distribution.RolloutOptions); the
	// zero value sends each version to every node at once.
	Rollout distribution.RolloutOptions
	// NodeToken, if set, is the credential nodes must present on their
	// streams (kept here as its hash only).
	NodeToken string
	// PublisherToken, if set, is the credential producers (the key
	// service) must present to put changes on the fast lane. Run refuses
	// to serve beyond loopback without it: an open publisher could put
	// any key on every node.
	PublisherToken string
	// UsageToken, if set, is the credential the quota service presents
	// to publish usage marks and to reach the usage relay; the publisher
	// token then can do neither, and the usage token nothing else. Empty:
	// the publisher token does both.
	UsageToken string

	// Listen is the address Run serves on; empty means DefaultListen.
	Listen string
	// Listener, if set, is served instead of binding Listen; Run owns it.
	Listener net.Listener
	// TLSCertFile and TLSKeyFile, if set, serve TLS; else cleartext
	// HTTP/1.1 and h2c (the nodes' streams need HTTP/2).
	TLSCertFile, TLSKeyFile string
	// Handlers are more paths Run serves on the same listener, by
	// http.ServeMux pattern (`portico dev` serves the key service beside
	// the control plane).
	Handlers map[string]http.Handler
	// OnServe, if set, is called with the Plane once Run serves it, before
	// any request is answered; it must not block.
	OnServe func(*Plane)
}

// The defaults of Options for Run, which `portico control`'s flags show.
const (
	DefaultListen   = ":7000"
	DefaultStoreDSN = "sqlite:portico-control.db"
)

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
	var usageTokenHash string
	if opts.UsageToken != "" {
		usageTokenHash = store.SHA256([]byte(opts.UsageToken))
	}
	// Every version, a team's change, a rollback or a rollout's revert,
	// is written through one Writer, which publishes it. (A failure to
	// publish leaves the fleet on the version before; the next start
	// publishes it.)
	var dist *distribution.Server
	w := versions.New(opts.Store, func(ctx context.Context, v int64) error { return dist.Publish(ctx, v) }, log)
	dist = distribution.New(opts.Store, distribution.Options{Logger: log, Now: opts.Now, Rollout: opts.Rollout, Versions: w,
		NodeTokenHash: nodeTokenHash, PublisherTokenHash: publisherTokenHash, UsageTokenHash: usageTokenHash})
	p := &Plane{Distribution: dist}
	p.Admin = admin.New(opts.Store, admin.Options{Logger: log, Now: opts.Now, Fleet: dist, Versions: w})
	if err := dist.PublishLatest(ctx); err != nil {
		return nil, fmt.Errorf("control: publishing the newest version: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(p.Admin.Handler())
	mux.Handle(dist.Handler())
	mux.Handle(dist.Publisher().Handler())
	mux.Handle(dist.UsageRelay().Handler())
	p.Handler = mux
	return p, nil
}
