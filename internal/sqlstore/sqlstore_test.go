package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-gw/portico/internal/sqlstore"
	"github.com/portico-gw/portico/testing/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.RunMain(m)) }

// schema is a small service: a counter row, and a table with a foreign
// key and a unique column.
var schema = sqlstore.Schema{
	Migrations: "svc_migrations",
	LockKey:    0x7465737473766331,
	Steps: []string{
		`CREATE TABLE svc_counter (id INTEGER PRIMARY KEY, n {int} NOT NULL);
		INSERT INTO svc_counter (id, n) VALUES (1, 0);`,
		`CREATE TABLE svc_items (
			id    {serial},
			name  TEXT NOT NULL UNIQUE,
			data  {bytes} NOT NULL,
			owner INTEGER NOT NULL REFERENCES svc_counter (id)
		);`,
	},
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	run(t, func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "svc.db") })
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	run(t, func(t *testing.T) string { return srv.NewDatabase(t) })
	t.Run("LocksPerService", func(t *testing.T) {
		t.Parallel()
		testLocksPerService(t, srv.NewDatabase(t))
	})
}

// run is the conformance suite: the same tests on every database; newDSN
// names a new, empty database for each.
func run(t *testing.T, newDSN func(t *testing.T) string) {
	for name, fn := range map[string]func(*testing.T, string){
		"Migrate":           testMigrate,
		"ConcurrentOpen":    testConcurrentOpen,
		"WritersSerialize":  testWritersSerialize,
		"FailedStep":        testFailedStep,
		"Constraints":       testConstraints,
		"DataErrors":        testDataErrors,
		"ReadTx":            testReadTx,
		"ContextCanceled":   testCanceled,
		"SchemaWithoutName": testSchemaWithoutName,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, newDSN(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func open(t *testing.T, dsn string, s sqlstore.Schema) *sqlstore.DB {
	t.Helper()
	db, err := sqlstore.Open(ctx(t), dsn, s)
	if err != nil {
		t.Fatalf("Open(%s): %v", dsn, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func counter(t *testing.T, db *sqlstore.DB) (rows, n int64) {
	t.Helper()
	if err := db.SQL().QueryRowContext(ctx(t), "SELECT COUNT(*), COALESCE(MAX(n), -1) FROM svc_counter").Scan(&rows, &n); err != nil {
		t.Fatal(err)
	}
	return rows, n
}

// testMigrate: Open applies every step once; opening again applies none.
func testMigrate(t *testing.T, dsn string) {
	db := open(t, dsn, schema)
	if v, err := db.SchemaVersion(ctx(t), schema.Migrations); err != nil || v != 2 {
		t.Fatalf("SchemaVersion = %d, %v; want 2", v, err)
	}
	again := open(t, dsn, schema)
	if rows, _ := counter(t, again); rows != 1 {
		t.Errorf("after a second Open the first step's row is there %d times, want once", rows)
	}
	// A later release adds a step: only it runs.
	more := schema
	more.Steps = append(append([]string(nil), schema.Steps...), `UPDATE svc_counter SET n = n + 10 WHERE id = 1;`)
	third := open(t, dsn, more)
	open(t, dsn, more)
	if _, n := counter(t, third); n != 10 {
		t.Errorf("the third step ran to n = %d, want once (10)", n)
	}
	// A step in Go alone, which rewrites a row with code: once too.
	goStep := more
	goStep.Steps = append(append([]string(nil), more.Steps...), "")
	goStep.Go = map[int]sqlstore.GoStep{4: func(ctx context.Context, tx *sql.Tx, rebind func(string) string) error {
		var n int64
		if err := tx.QueryRowContext(ctx, "SELECT n FROM svc_counter WHERE id = 1").Scan(&n); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, rebind("UPDATE svc_counter SET n = ? WHERE id = 1"), n*3)
		return err
	}}
	open(t, dsn, goStep)
	if _, n := counter(t, open(t, dsn, goStep)); n != 30 {
		t.Errorf("the Go step ran to n = %d, want once (30)", n)
	}
	bad := goStep
	bad.Go = map[int]sqlstore.GoStep{9: goStep.Go[4]}
	if db, err := sqlstore.Open(ctx(t), dsn, bad); err == nil {
		_ = db.Close()
		t.Error("Open with a Go step past the last step succeeded")
	}
	if db.Driver() != "postgres" && db.Driver() != "sqlite" {
		t.Errorf("Driver() = %q", db.Driver())
	}
}

// testConcurrentOpen: processes that open a new database at once all
// succeed, and each step runs once (SQLite's switch to WAL races them).
func testConcurrentOpen(t *testing.T, dsn string) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := sqlstore.Open(ctx(t), dsn, schema)
			if err != nil {
				errs <- err
				return
			}
			_ = db.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a concurrent Open: %v", err)
	}
	if rows, _ := counter(t, open(t, dsn, schema)); rows != 1 {
		t.Errorf("the first step ran %d times, want once", rows)
	}
}

// testWritersSerialize: read-then-write transactions of several handles
// (processes, as far as the database can tell) lose no update.
func testWritersSerialize(t *testing.T, dsn string) {
	const writers, rounds = 4, 10
	var wg sync.WaitGroup
	for range writers {
		db := open(t, dsn, schema)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				err := db.InTx(ctx(t), func(tx *sql.Tx) error {
					var n int64
					if err := tx.QueryRowContext(ctx(t), "SELECT n FROM svc_counter WHERE id = 1").Scan(&n); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx(t), db.Rebind("UPDATE svc_counter SET n = ? WHERE id = 1"), n+1)
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if _, n := counter(t, open(t, dsn, schema)); n != writers*rounds {
		t.Errorf("after %d increments the counter is %d", writers*rounds, n)
	}
}

// testFailedStep: a step that fails leaves no trace, and Open says which.
func testFailedStep(t *testing.T, dsn string) {
	bad := schema
	bad.Steps = []string{schema.Steps[0], `CREATE TABLE svc_half (id INTEGER PRIMARY KEY); THIS IS NOT SQL;`}
	if db, err := sqlstore.Open(ctx(t), dsn, bad); err == nil {
		_ = db.Close()
		t.Fatal("Open with a broken step succeeded")
	} else if want := "to version 2"; !strings.Contains(err.Error(), want) {
		t.Errorf("Open with a broken step: %v, want it to say %q", err, want)
	}
	db := open(t, dsn, schema) // the fixed release
	if v, _ := db.SchemaVersion(ctx(t), schema.Migrations); v != 2 {
		t.Errorf("SchemaVersion after the fix = %d, want 2", v)
	}
	var n int
	err := db.SQL().QueryRowContext(ctx(t), "SELECT COUNT(*) FROM svc_half").Scan(&n)
	if err == nil {
		t.Error("the broken step's table exists")
	}
}

// testConstraints: unique violations are told apart from other errors,
// and foreign keys hold (SQLite enforces them only when asked to).
func testConstraints(t *testing.T, dsn string) {
	db := open(t, dsn, schema)
	insert := func(name string, owner int) error {
		return db.InTx(ctx(t), func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx(t), db.Rebind("INSERT INTO svc_items (name, data, owner) VALUES (?, ?, ?)"), name, []byte{1, 2}, owner)
			return err
		})
	}
	if err := insert("a", 1); err != nil {
		t.Fatal(err)
	}
	if err := insert("a", 1); !db.IsUnique(err) {
		t.Errorf("a second item a: %v, want a unique violation", err)
	}
	err := insert("b", 99)
	if err == nil {
		t.Error("an item of no owner was stored: foreign keys are off")
	} else if db.IsUnique(err) {
		t.Errorf("a foreign key violation taken for a unique one: %v", err)
	}
	if db.IsUnique(errors.New("other")) || db.IsUnique(nil) {
		t.Error("IsUnique of an error that is none")
	}
}

// testDataErrors: a value the database refuses (PostgreSQL: a NUL byte in
// text, a number out of its column's range) is told apart from errors a
// retry may get past.
func testDataErrors(t *testing.T, dsn string) {
	db := open(t, dsn, schema)
	exec := func(q string, args ...any) error {
		return db.InTx(ctx(t), func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx(t), db.Rebind(q), args...)
			return err
		})
	}
	if err := exec("INSERT INTO svc_items (name, data, owner) VALUES (?, ?, ?)", "a", []byte{1}, 1); err != nil {
		t.Fatal(err)
	}
	if err := exec("INSERT INTO svc_items (name, data, owner) VALUES (?, ?, ?)", "a", []byte{1}, 1); db.IsData(err) {
		t.Errorf("a unique violation taken for a data error: %v", err)
	}
	if db.IsData(errors.New("other")) || db.IsData(nil) || db.IsData(context.Canceled) {
		t.Error("IsData of an error that is none")
	}
	if db.Driver() != "postgres" {
		return // SQLite stores a NUL, and turns an overflowing sum into a float
	}
	if err := exec("INSERT INTO svc_items (name, data, owner) VALUES (?, ?, ?)", "b\x00", []byte{1}, 1); !db.IsData(err) {
		t.Errorf("a NUL in text: %v, want a data error", err)
	}
	if err := exec("UPDATE svc_counter SET n = n + ?", int64(1<<62)); err != nil {
		t.Fatal(err)
	}
	if err := exec("UPDATE svc_counter SET n = n + n"); !db.IsData(err) {
		t.Errorf("a sum out of range: %v, want a data error", err)
	}
}

// testReadTx: a read-only transaction sees one snapshot, and writes in it
// fail.
func testReadTx(t *testing.T, dsn string) {
	db := open(t, dsn, schema)
	err := db.ReadTx(ctx(t), func(tx *sql.Tx) error {
		var first int64
		if err := tx.QueryRowContext(ctx(t), "SELECT n FROM svc_counter WHERE id = 1").Scan(&first); err != nil {
			return err
		}
		if err := db.InTx(ctx(t), func(w *sql.Tx) error {
			_, err := w.ExecContext(ctx(t), "UPDATE svc_counter SET n = n + 1 WHERE id = 1")
			return err
		}); err != nil {
			return err
		}
		var second int64
		if err := tx.QueryRowContext(ctx(t), "SELECT n FROM svc_counter WHERE id = 1").Scan(&second); err != nil {
			return err
		}
		if first != second {
			t.Errorf("a read transaction saw n %d, then %d", first, second)
		}
		if _, err := tx.ExecContext(ctx(t), "UPDATE svc_counter SET n = 100 WHERE id = 1"); err == nil {
			t.Error("a write in a read-only transaction succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testCanceled(t *testing.T, dsn string) {
	db := open(t, dsn, schema)
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if err := db.InTx(c, func(*sql.Tx) error { return nil }); err == nil {
		t.Error("InTx with a canceled context succeeded")
	}
}

func testSchemaWithoutName(t *testing.T, dsn string) {
	if db, err := sqlstore.Open(ctx(t), dsn, sqlstore.Schema{Steps: schema.Steps}); err == nil {
		_ = db.Close()
		t.Error("Open of a schema without a migrations table succeeded")
	}
}

// testLocksPerService: on PostgreSQL two services sharing a database take
// locks of their own: one's writer does not wait for the other's.
func testLocksPerService(t *testing.T, dsn string) {
	a := open(t, dsn, schema)
	other := sqlstore.Schema{Migrations: "other_migrations", LockKey: schema.LockKey + 1,
		Steps: []string{`CREATE TABLE other_t (id INTEGER PRIMARY KEY);`}}
	b := open(t, dsn, other)
	held, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- a.InTx(ctx(t), func(*sql.Tx) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	c, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	if err := b.InTx(c, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(c, "INSERT INTO other_t (id) VALUES (1)")
		return err
	}); err != nil {
		t.Errorf("the other service's writer, while the first one's is open: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesUnknownDSN(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"", "mysql://x", "/var/lib/portico/x.db"} {
		if db, err := sqlstore.Open(context.Background(), dsn, schema); !errors.Is(err, sqlstore.ErrInvalidDSN) {
			if db != nil {
				_ = db.Close()
			}
			t.Errorf("Open(%q) = %v, want ErrInvalidDSN", dsn, err)
		}
	}
	if db, err := sqlstore.Open(context.Background(), "sqlite:", schema); err == nil {
		_ = db.Close()
		t.Error(`Open("sqlite:") succeeded`)
	}
}

func TestRebindAndTime(t *testing.T) {
	t.Parallel()
	db := open(t, "sqlite:"+filepath.Join(t.TempDir(), "r.db"), schema)
	if got := db.Rebind("a = ? AND b = ?"); got != "a = ? AND b = ?" {
		t.Errorf("sqlite Rebind = %q", got)
	}
	now := sqlstore.Now()
	if got := sqlstore.FromMicros(sqlstore.Micros(now)); !got.Equal(now) || got.Location() != time.UTC {
		t.Errorf("FromMicros(Micros(%v)) = %v", now, got)
	}
	if sqlstore.Micros(time.Time{}) != 0 || !sqlstore.FromMicros(0).IsZero() {
		t.Error("the zero time is not stored as 0")
	}
}
