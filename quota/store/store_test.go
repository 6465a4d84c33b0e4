package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/portico-gw/portico/internal/lanepub"
	"github.com/portico-gw/portico/quota/store"
	"github.com/portico-gw/portico/quota/store/storetest"
	"github.com/portico-gw/portico/testing/pgtest"
)

// The store is the outbox the quota service's fast-lane publisher reads.
var _ lanepub.Source = (*store.Store)(nil)

// TestSQLite runs the conformance suite on SQLite files.
func TestSQLite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		dsn := "sqlite:" + filepath.Join(t.TempDir(), "quota.db")
		return func(ctx context.Context) (*store.Store, error) { return store.Open(ctx, dsn) }
	})
}

// TestPostgres runs the conformance suite on a real PostgreSQL server,
// a new database per test. Without PostgreSQL it skips, or fails when CI
// is set (pgtest.Start).
func TestPostgres(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		dsn := srv.NewDatabase(t)
		return func(ctx context.Context) (*store.Store, error) { return store.Open(ctx, dsn) }
	})
}

// TestOpenRefusesUnknownDSN: a DSN of no known database is ErrInvalid.
func TestOpenRefusesUnknownDSN(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"", "mysql://x", "/var/lib/portico/quota.db"} {
		if s, err := store.Open(context.Background(), dsn); err == nil {
			_ = s.Close()
			t.Errorf("Open(%q) succeeded", dsn)
		}
	}
}

func TestMain(m *testing.M) { os.Exit(pgtest.RunMain(m)) }
