package admin

import (
	"context"
	"sync/atomic"

	"github.com/portico-gw/portico/control/store"
)

// CountVersionReads makes s count the pages of versions it reads from its
// store, and returns the count. Call it before s serves.
func CountVersionReads(s *Service) *atomic.Int64 {
	n := new(atomic.Int64)
	list := s.listVersions
	s.listVersions = func(ctx context.Context, before int64, limit int) ([]store.Version, error) {
		n.Add(1)
		return list(ctx, before, limit)
	}
	return n
}
