package sqlstore

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestSQLiteConcurrentConnect: processes that connect to a new SQLite
// file at once all succeed, though only one of them can switch it to
// WAL. (Connecting, not Open: the race is in the first connection, and
// the migrations that follow it would only slow the rounds down.)
func TestSQLiteConcurrentConnect(t *testing.T) {
	t.Parallel()
	const rounds, openers = 100, 8
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	for r := range rounds {
		dsn := "sqlite:" + filepath.Join(dir, "control.db")
		var wg sync.WaitGroup
		for i := range openers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				db, err := sqliteDialect{}.open(ctx, dsn)
				if err != nil {
					t.Errorf("round %d, process %d: %v", r, i, err)
					return
				}
				_ = db.Close()
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for _, f := range []string{"control.db", "control.db-wal", "control.db-shm"} {
			_ = os.Remove(filepath.Join(dir, f))
		}
	}
}
