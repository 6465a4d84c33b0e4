package keysvc

import (
	"context"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/internal/lanepub"
	"github.com/portico-gw/portico/keysvc/store"
)

// source is the key service's name on the fast lane.
const source = "keys"

// outbox is the key store as the fast-lane publisher reads it: every row
// changed after a rev, in rev order (the store's one gap-free sequence).
type outbox struct{ st *store.Store }

func (o outbox) Changes(ctx context.Context, after uint64, limit int) ([]*configv1.FastLaneEntry, error) {
	changes, err := o.st.Changes(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	entries := make([]*configv1.FastLaneEntry, len(changes))
	for i, c := range changes {
		entries[i] = toEntry(c)
	}
	return entries, nil
}

func (o outbox) Seq(ctx context.Context) (uint64, error) { return o.st.Seq(ctx) }

func (o outbox) Advance(ctx context.Context, to uint64) (bool, error) {
	return o.st.AdvanceSeq(ctx, to)
}

func newPublisher(s *Service) *lanepub.Publisher {
	return lanepub.New(outbox{s.store}, lanepub.Options{
		Name: source, URL: s.opts.ControlURL, Token: s.opts.ControlToken, HTTPClient: s.opts.HTTPClient, Logger: s.log,
	})
}
