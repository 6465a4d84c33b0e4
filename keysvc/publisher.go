package keysvc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/internal/backoff"
	"github.com/portico-gw/portico/internal/svcauth"
)

// source is the key service's name on the fast lane.
const source = "keys"

// batchChanges bounds one published batch.
const batchChanges = 5000

// publisher sends the control plane every change it lacks, in revision
// order: the store is the outbox. One round runs at a time.
type publisher struct {
	s      *Service
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

func newPublisher(s *Service) *publisher {
	p := &publisher{s: s, wake: make(chan struct{}, 1), round: make(chan struct{}, 1)}
	if s.opts.ControlURL != "" {
		p.client = distributionv1connect.NewFastLaneServiceClient(s.opts.HTTPClient, s.opts.ControlURL,
			connect.WithInterceptors(svcauth.Interceptor(s.opts.ControlToken)))
	}
	return p
}

// kick asks the background loop for a round.
func (p *publisher) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// sync publishes every change the control plane lacks and returns the
// fast-lane version that holds them all.
func (p *publisher) sync(ctx context.Context) (uint64, error) {
	if err := p.lock(ctx); err != nil {
		return 0, fmt.Errorf("waiting for the publisher's round in progress: %w", err)
	}
	defer p.unlock()
	for attempt := 0; ; attempt++ {
		if !p.known {
			resp, err := p.client.Source(ctx, connect.NewRequest(&distributionv1.SourceRequest{Source: source}))
			if err != nil {
				return 0, fmt.Errorf("asking the control plane where the key service's changes stand: %w", err)
			}
			p.seq, p.version, p.known = resp.Msg.GetSeq(), resp.Msg.GetVersion(), true
			if err := p.catchUp(ctx); err != nil {
				return 0, err
			}
		}
		changes, err := p.s.store.Changes(ctx, p.seq, batchChanges)
		if err != nil {
			return 0, fmt.Errorf("reading changes: %w", err)
		}
		if len(changes) == 0 {
			return p.version, nil
		}
		req := &distributionv1.PublishRequest{Source: source, FromSeq: p.seq, ToSeq: changes[len(changes)-1].Rev,
			Entries: make([]*configv1.FastLaneEntry, len(changes))}
		for i, c := range changes {
			req.Entries[i] = toEntry(c)
		}
		resp, err := p.client.Publish(ctx, connect.NewRequest(req))
		if connect.CodeOf(err) == connect.CodeFailedPrecondition && attempt < 3 {
			// The control plane has another idea of where we are (its
			// database was replaced, another key service published): ask.
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
func (p *publisher) lock(ctx context.Context) error {
	select {
	case p.round <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *publisher) unlock() { <-p.round }

// catchUp handles a control plane that has more of the key service's
// changes than the store: the store was restored from a backup. Its
// sequence moves past the control plane's, so that new changes carry revs
// above every rev the nodes hold and are not taken for old ones; the
// changes made between the backup and the restore are lost, and said so.
func (p *publisher) catchUp(ctx context.Context) error {
	have, err := p.s.store.Seq(ctx)
	if err != nil {
		return fmt.Errorf("reading the store's sequence: %w", err)
	}
	if p.seq <= have {
		return nil
	}
	if _, err := p.s.store.AdvanceSeq(ctx, p.seq); err != nil {
		return err
	}
	p.s.log.Error("the control plane holds key changes the key store does not (a store restored from a backup?): "+
		"the store's sequence moved past them so that new changes reach the nodes; the changes in between are lost from the store, revoke or recreate what they did",
		"store_seq", have, "control_plane_seq", p.seq)
	return nil
}

// wait waits until every connected node has version.
func (p *publisher) wait(ctx context.Context, version uint64, timeout time.Duration) (*distributionv1.WaitResponse, error) {
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	resp, err := p.client.Wait(ctx, connect.NewRequest(&distributionv1.WaitRequest{Version: version, Timeout: durationpb.New(timeout)}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// run publishes in the background: after a kick, and every 30 s (asking
// the control plane afresh, so that one whose database was replaced gets
// everything again), with backoff while the control plane is away.
func (p *publisher) run(ctx context.Context) {
	if p.client == nil {
		return
	}
	const period = 30 * time.Second
	retry := backoff.Backoff{Min: 500 * time.Millisecond, Max: 15 * time.Second}
	failing := false
	// The first round at once: changes committed while no key service
	// could publish (stopped, or the control plane away) must not wait
	// for the first period.
	p.kick()
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
		_, err := p.sync(rctx)
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
				p.s.log.Warn("the fast lane is behind the key store; retrying", "err", err, "within", retry.Bound())
			}
		}
	}
}
