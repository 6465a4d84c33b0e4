// Package lanepub is a producer's side of the control plane's fast lane
// (the key service's today, the quota service's next): it sends the
// control plane every change of the producer's outbox it lacks, in
// order, in batches, and asks it which nodes have a version.
//
// The producer's store is the outbox: an ordered, gap-free sequence of
// changes (Source), each entry's Rev its sequence number. The control
// plane says how far it has the producer's changes (Source), and a
// publish must start right after that (else FailedPrecondition, and the
// publisher asks again). One round runs at a time; Run publishes in the
// background, after a Kick and every 30 s, with backoff while the
// control plane is away.
package lanepub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/internal/backoff"
	"github.com/portico-gw/portico/internal/svcauth"
)

// Source is a producer's outbox. Its methods may be called concurrently.
type Source interface {
	// Changes returns up to limit entries changed after seq after, in
	// order; each entry's Rev is its sequence number.
	Changes(ctx context.Context, after uint64, limit int) ([]*configv1.FastLaneEntry, error)
	// Seq returns the last sequence number assigned.
	Seq(ctx context.Context) (uint64, error)
	// Advance moves the sequence to at least to, so that the next change
	// is numbered above it, and reports whether it moved.
	Advance(ctx context.Context, to uint64) (bool, error)
}

// Options configure a Publisher.
type Options struct {
	// Name is the producer's name on the lane ("keys").
	Name string
	// URL is the control plane's; empty means no fast lane (Enabled is
	// false and nothing is published).
	URL string
	// Token is the publisher token the control plane requires.
	Token string
	// HTTPClient makes the calls; nil means http.DefaultClient.
	HTTPClient connect.HTTPClient
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Batch bounds one published batch; zero means 5,000 entries.
	Batch int
}

// Publisher publishes a Source's changes. It is safe for concurrent use.
type Publisher struct {
	src    Source
	opts   Options
	log    *slog.Logger
	client distributionv1connect.FastLaneServiceClient // nil without a control plane

	// round holds one round at a time and guards the fields below. It is
	// a semaphore, not a mutex, so that a caller waiting for another
	// round (the background one, stuck on a control plane that does not
	// answer) gives up when its ctx ends.
	round chan struct{} // buffered 1
	// known: seq and version are what the control plane last said.
	known   bool
	seq     uint64
	version uint64

	wake chan struct{} // buffered 1
}

// New returns a Publisher of src's changes.
func New(src Source, opts Options) *Publisher {
	if opts.HTTPClient == nil {
		opts.HTTPClient = http.DefaultClient
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Batch <= 0 {
		opts.Batch = 5000
	}
	p := &Publisher{src: src, opts: opts, log: opts.Logger, wake: make(chan struct{}, 1), round: make(chan struct{}, 1)}
	if opts.URL != "" {
		p.client = distributionv1connect.NewFastLaneServiceClient(opts.HTTPClient, opts.URL,
			connect.WithInterceptors(svcauth.Interceptor(opts.Token)))
	}
	return p
}

// Enabled reports whether there is a control plane to publish to.
func (p *Publisher) Enabled() bool { return p.client != nil }

// Kick asks the background loop (Run) for a round.
func (p *Publisher) Kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Sync publishes every change the control plane lacks and returns the
// fast-lane version that holds them all.
func (p *Publisher) Sync(ctx context.Context) (uint64, error) {
	if p.client == nil {
		return 0, errors.New("lanepub: no control plane")
	}
	if err := p.lock(ctx); err != nil {
		return 0, fmt.Errorf("waiting for the publisher's round in progress: %w", err)
	}
	defer p.unlock()
	for attempt := 0; ; attempt++ {
		if !p.known {
			resp, err := p.client.Source(ctx, connect.NewRequest(&distributionv1.SourceRequest{Source: p.opts.Name}))
			if err != nil {
				return 0, fmt.Errorf("asking the control plane where the %s changes stand: %w", p.opts.Name, err)
			}
			p.seq, p.version, p.known = resp.Msg.GetSeq(), resp.Msg.GetVersion(), true
			if err := p.catchUp(ctx); err != nil {
				return 0, err
			}
		}
		entries, err := p.src.Changes(ctx, p.seq, p.opts.Batch)
		if err != nil {
			return 0, fmt.Errorf("reading changes: %w", err)
		}
		if len(entries) == 0 {
			return p.version, nil
		}
		req := &distributionv1.PublishRequest{Source: p.opts.Name, FromSeq: p.seq, ToSeq: entries[len(entries)-1].GetRev(), Entries: entries}
		resp, err := p.client.Publish(ctx, connect.NewRequest(req))
		if connect.CodeOf(err) == connect.CodeFailedPrecondition && attempt < 3 {
			// The control plane has another idea of where we are (its
			// database was replaced, another producer of the name
			// published): ask.
			p.known = false
			continue
		}
		if err != nil {
			p.known = false
			return 0, fmt.Errorf("publishing changes %d to %d: %w", req.FromSeq+1, req.ToSeq, err)
		}
		p.seq, p.version = resp.Msg.GetSeq(), resp.Msg.GetVersion()
	}
}

// lock starts a round, or returns ctx's error if ctx ends first.
func (p *Publisher) lock(ctx context.Context) error {
	select {
	case p.round <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Publisher) unlock() { <-p.round }

// catchUp handles a control plane that has more of the producer's changes
// than its store: the store was restored from a backup. Its sequence
// moves past the control plane's, so that new changes carry revs above
// every rev the nodes hold and are not taken for old ones; the changes
// made between the backup and the restore are lost, and said so.
func (p *Publisher) catchUp(ctx context.Context) error {
	have, err := p.src.Seq(ctx)
	if err != nil {
		return fmt.Errorf("reading the store's sequence: %w", err)
	}
	if p.seq <= have {
		return nil
	}
	if _, err := p.src.Advance(ctx, p.seq); err != nil {
		return err
	}
	p.log.Error("the control plane holds changes the producer's store does not (a store restored from a backup?): "+
		"the store's sequence moved past them so that new changes reach the nodes; the changes in between are lost from the store, undo or redo what they did",
		"source", p.opts.Name, "store_seq", have, "control_plane_seq", p.seq)
	return nil
}

// Wait waits up to timeout until every connected node has version, and
// returns the control plane's answer: whether they all do, and which do
// not.
func (p *Publisher) Wait(ctx context.Context, version uint64, timeout time.Duration) (*distributionv1.WaitResponse, error) {
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	if p.client == nil {
		return nil, errors.New("lanepub: no control plane")
	}
	resp, err := p.client.Wait(ctx, connect.NewRequest(&distributionv1.WaitRequest{Version: version, Timeout: durationpb.New(timeout)}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// Run publishes in the background until ctx ends: after a kick, and every 30 s (asking
// the control plane afresh, so that one whose database was replaced gets
// everything again), with backoff while the control plane is away.
func (p *Publisher) Run(ctx context.Context) {
	if p.client == nil {
		return
	}
	const period = 30 * time.Second
	retry := backoff.Backoff{Min: 500 * time.Millisecond, Max: 15 * time.Second}
	failing := false
	// The first round at once: changes committed while no key service
	// could publish (stopped, or the control plane away) must not wait
	// for the first period.
	p.Kick()
	for {
		wait := period
		if failing {
			wait = retry.Next()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.wake:
			t.Stop()
		case <-t.C:
			if p.lock(ctx) != nil {
				return
			}
			p.known = false
			p.unlock()
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := p.Sync(rctx)
		cancel()
		switch {
		case err == nil:
			failing = false
			retry.Reset()
		case ctx.Err() != nil:
			return
		default:
			failing = true
			if !errors.Is(err, context.Canceled) {
				p.log.Warn("the fast lane is behind the producer's store; retrying", "source", p.opts.Name, "err", err, "within", retry.Bound())
			}
		}
	}
}
