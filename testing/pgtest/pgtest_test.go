package pgtest_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portico-gw/portico/testing/pgtest"
)

// timeout bounds each test's work against the server; helperTimeout a test
// binary run as a helper process, which starts a server of its own.
const (
	timeout       = 30 * time.Second
	helperTimeout = 2 * time.Minute
)

func TestMain(m *testing.M) {
	os.Exit(pgtest.RunMain(m))
}

// connect opens a connection to dsn, closed when the test ends.
func connect(ctx context.Context, t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgx.Connect(%q): %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestStartSharesOneServer(t *testing.T) {
	t.Parallel()
	a := pgtest.Start(t)
	b := pgtest.Start(t)
	if a != b {
		t.Errorf("Start twice = %p, %p, want the same server", a, b)
	}
	if !strings.HasPrefix(a.Addr(), "127.0.0.1:") {
		t.Errorf("Addr() = %q, want 127.0.0.1:PORT", a.Addr())
	}
}

var dsnPattern = regexp.MustCompile(`^postgres://postgres@127\.0\.0\.1:(\d+)/(pgtest_[a-z0-9_]+)\?sslmode=disable$`)

func TestNewDatabaseDSN(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	srv := pgtest.Start(t)
	dsn := srv.NewDatabase(t)

	m := dsnPattern.FindStringSubmatch(dsn)
	if m == nil {
		t.Fatalf("NewDatabase() = %q, want a match of %s", dsn, dsnPattern)
	}
	if want := "127.0.0.1:" + m[1]; srv.Addr() != want {
		t.Errorf("Addr() = %q, want %q as in the DSN", srv.Addr(), want)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgx.ParseConfig(%q): %v", dsn, err)
	}
	if cfg.TLSConfig != nil {
		t.Errorf("pgx.ParseConfig(%q) has TLS, want sslmode=disable", dsn)
	}

	var user, database, host string
	var port int
	err = connect(ctx, t, dsn).QueryRow(ctx,
		"SELECT current_user, current_database(), host(inet_server_addr()), inet_server_port()").
		Scan(&user, &database, &host, &port)
	if err != nil {
		t.Fatalf("query session: %v", err)
	}
	got := fmt.Sprintf("%s@%s:%d/%s", user, host, port, database)
	if want := fmt.Sprintf("postgres@127.0.0.1:%s/%s", m[1], m[2]); got != want {
		t.Errorf("session of %q = %s, want %s", dsn, got, want)
	}
}

func TestDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	srv := pgtest.Start(t)
	dsnA, dsnB := srv.NewDatabase(t), srv.NewDatabase(t)
	if dsnA == dsnB {
		t.Fatalf("NewDatabase() twice = %q, want two databases", dsnA)
	}
	a, b := connect(ctx, t, dsnA), connect(ctx, t, dsnB)

	const create = "CREATE TABLE items (id int PRIMARY KEY, owner text NOT NULL)"
	if _, err := a.Exec(ctx, create); err != nil {
		t.Fatalf("A: %s: %v", create, err)
	}
	if _, err := a.Exec(ctx, "INSERT INTO items VALUES (1, 'a')"); err != nil {
		t.Fatalf("A: insert: %v", err)
	}

	var table *string
	if err := b.QueryRow(ctx, "SELECT to_regclass('public.items')::text").Scan(&table); err != nil {
		t.Fatalf("B: to_regclass: %v", err)
	}
	if table != nil {
		t.Fatalf("B: to_regclass('public.items') = %q, want NULL: the table of A is visible in B", *table)
	}
	// The same name in B is a different table.
	if _, err := b.Exec(ctx, create); err != nil {
		t.Fatalf("B: %s: %v", create, err)
	}
	if _, err := b.Exec(ctx, "INSERT INTO items VALUES (1, 'b'), (2, 'b')"); err != nil {
		t.Fatalf("B: insert: %v", err)
	}

	for _, tc := range []struct {
		db   string
		conn *pgx.Conn
		want string
	}{
		{"A", a, "1:a"},
		{"B", b, "1:b,2:b"},
	} {
		var got string
		err := tc.conn.QueryRow(ctx, "SELECT string_agg(id || ':' || owner, ',' ORDER BY id) FROM items").Scan(&got)
		if err != nil {
			t.Fatalf("%s: select items: %v", tc.db, err)
		}
		if got != tc.want {
			t.Errorf("%s: items = %q, want %q", tc.db, got, tc.want)
		}
	}
}

func TestNewDatabaseDroppedWhenTestEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	srv := pgtest.Start(t)

	var name string
	var open *pgx.Conn
	t.Run("sub", func(t *testing.T) {
		dsn := srv.NewDatabase(t)
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatalf("url.Parse(%q): %v", dsn, err)
		}
		name = strings.TrimPrefix(u.Path, "/")
		// A connection still open when the subtest ends must not keep its
		// database alive. The outer test closes it, after the drop.
		if open, err = pgx.Connect(ctx, dsn); err != nil {
			t.Fatalf("pgx.Connect(%q): %v", dsn, err)
		}
	})
	if open != nil {
		t.Cleanup(func() { open.Close(context.Background()) })
	}
	if name == "" || open == nil {
		t.Fatal("the subtest failed to make a database and connect to it")
	}

	var exists bool
	err := connect(ctx, t, srv.NewDatabase(t)).QueryRow(ctx,
		"SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	if err != nil {
		t.Fatalf("query pg_database: %v", err)
	}
	if exists {
		t.Errorf("database %s of a finished test still exists", name)
	}
}

func TestNewDatabaseParallel(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	for i := range 8 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), timeout)
			defer cancel()
			conn := connect(ctx, t, srv.NewDatabase(t))
			if _, err := conn.Exec(ctx, "CREATE TABLE t (v int)"); err != nil {
				t.Fatalf("create table: %v", err)
			}
		})
	}
}

// helperEnv selects what TestHelperProcess does in a test binary that
// TestCrashedBinaryIsSwept runs.
const helperEnv = "PGTEST_HELPER"

// TestHelperProcess is not a test: TestCrashedBinaryIsSwept runs this test
// binary again to play a test binary that crashes, and one that comes after.
func TestHelperProcess(t *testing.T) {
	switch mode := os.Getenv(helperEnv); mode {
	case "":
		t.Skip("run by TestCrashedBinaryIsSwept in a process of its own")
	case "crash":
		fmt.Printf("addr=%s\n", pgtest.Start(t).Addr())
		// Exit as a crash would: RunMain does not get to stop the server.
		os.Exit(3)
	case "next":
		pgtest.Start(t)
	default:
		t.Fatalf("%s=%q, want crash or next", helperEnv, mode)
	}
}

// runHelper runs TestHelperProcess in a new process of this test binary and
// returns its output and exit code.
func runHelper(t *testing.T, mode string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), helperTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("run helper %s: %v\n%s", mode, err, out)
	return "", 0
}

func TestCrashedBinaryIsSwept(t *testing.T) {
	t.Parallel()
	// This binary's own server, whose owner is alive, must survive the
	// sweep of the next binary.
	own := pgtest.Start(t).NewDatabase(t)

	out, code := runHelper(t, "crash")
	if code != 3 {
		t.Fatalf("crashing helper exited with %d, want 3:\n%s", code, out)
	}
	var addr string
	for sc := bufio.NewScanner(bytes.NewReader([]byte(out))); sc.Scan(); {
		if a, ok := strings.CutPrefix(sc.Text(), "addr="); ok {
			addr = a
		}
	}
	if addr == "" {
		t.Fatalf("crashing helper printed no addr= line:\n%s", out)
	}
	swept := false
	t.Cleanup(func() {
		if !swept {
			// Do not leave the crashed server to the next run.
			runHelper(t, "next")
		}
	})
	leftDSN := "postgres://postgres@" + addr + "/postgres?sslmode=disable"
	if err := ping(t, leftDSN); err != nil {
		t.Fatalf("the crashed binary's server at %s is not running, so the sweep is not tested: %v", addr, err)
	}

	out, code = runHelper(t, "next")
	swept = true
	if code != 0 {
		t.Fatalf("next helper exited with %d, want 0:\n%s", code, out)
	}
	if err := ping(t, leftDSN); err == nil {
		t.Errorf("the crashed binary's server at %s still runs after the next binary started", addr)
	}
	if err := ping(t, own); err != nil {
		t.Errorf("the server of this binary, which is alive, was stopped by the sweep: %v", err)
	}
}

// ping connects to dsn and runs SELECT 1.
func ping(t *testing.T, dsn string) error {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}
