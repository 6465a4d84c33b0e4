package quota

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/quota/reconcile"
	"github.com/portico-gw/portico/quota/store"
)

// errorOf is the one place the store's and the reconciler's errors
// become Connect errors. what says what failed, in the client's terms
// ("reading the usage of key:k1"); the client is told what and the
// category, never the underlying text, which goes to the log when it is
// the service's own fault.
func (s *Service) errorOf(ctx context.Context, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("%s: not found", what))
	case errors.Is(err, store.ErrFinal):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s: the period is final", what))
	case errors.Is(err, reconcile.ErrNotFinal):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s: the period is not final yet (reconcile it with finalise)", what))
	case errors.Is(err, store.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: invalid", what))
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return connect.NewError(connect.CodeCanceled, fmt.Errorf("%s: canceled", what))
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("%s: deadline exceeded", what))
	}
	s.log.ErrorContext(ctx, "quota: "+what, "err", err)
	return connect.NewError(connect.CodeInternal, errors.New(what))
}
