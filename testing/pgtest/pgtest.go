// Package pgtest runs a real PostgreSQL server for tests and gives each test
// its own database on it.
//
// Starting PostgreSQL takes about two seconds, so a test binary runs at most
// one server: the first Start starts it and every test of the binary shares
// it, isolated from the others by the database NewDatabase makes for it.
// Because the server outlives any one test, t.Cleanup cannot stop it; a
// package that uses pgtest stops it from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.RunMain(m)) }
//
// The server listens on 127.0.0.1 only, trusts every connection of the user
// postgres, and runs with fsync, synchronous_commit and full_page_writes off:
// what a test writes is not worth a disk flush. Its files live in a directory
// os.TempDir()/pgtest-*. PostgreSQL refuses to run as root, so under root
// initdb and pg_ctl run as the postgres user through runuser.
//
// pg_ctl detaches the server from the test binary, so a binary that crashes,
// times out or is killed before RunMain returns leaves it running. Each
// directory therefore records the process id and start time of the test
// binary that owns it, and the first Start of every later test binary stops
// the servers whose owner is gone and removes their directories. Removing a
// directory is enough on its own: PostgreSQL shuts down within a minute once
// its postmaster.pid file is gone.
//
// When PostgreSQL is not installed the test is skipped, or fails if the
// environment variable CI is set, so that CI never passes by skipping.
package pgtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// InstallHint is how to install PostgreSQL on the Debian machines the tests
// run on.
const InstallHint = "apt-get update && apt-get install -y --no-install-recommends postgresql"

const (
	// initdbTimeout bounds initdb, which takes about a second with
	// --no-sync but more on a loaded two-core machine.
	initdbTimeout = 2 * time.Minute
	// pgCtlWait is how long pg_ctl waits for the server to start or stop
	// (its -t flag); pgCtlTimeout kills pg_ctl itself should it hang.
	pgCtlWait    = 60 * time.Second
	pgCtlTimeout = pgCtlWait + 30*time.Second
	// sqlTimeout bounds connecting and one statement of NewDatabase and its
	// cleanup. CREATE DATABASE copies a template and takes tens of
	// milliseconds, but many parallel tests queue behind one another.
	sqlTimeout = 30 * time.Second
	// portAttempts is how often a start is retried when the free port it
	// picked was taken by someone else before PostgreSQL bound it.
	portAttempts = 5
)

// Names inside a server's directory. A directory without ownerFile is not
// touched by the sweep for stale servers: it may not be ours, or its owner
// has not written the file yet.
const (
	dirPattern = "pgtest-*"
	ownerFile  = "owner"
	dataDir    = "data"
	logFile    = "postgres.log"
)

var errAddrInUse = errors.New("address already in use")

// mainRan is set by RunMain; Start refuses to start a server that nothing
// would stop.
var mainRan atomic.Bool

// shared is the server of this test binary. Its mutex is held while the
// server starts, so that concurrent first calls of Start wait for the one
// server instead of starting several.
var shared struct {
	mu      sync.Mutex
	tried   bool    // a start was attempted; it is not retried
	srv     *Server // nil until started, and after RunMain stopped it
	err     error   // why the start failed, reported to every later Start
	stopped bool    // RunMain has stopped the server; Start must not start another
}

// dbSeq numbers the databases of this test binary, so their names are
// unique on its server.
var dbSeq atomic.Int64

// Server is the PostgreSQL server of one test binary. Its methods may be
// called from several goroutines, and so from parallel tests.
type Server struct {
	tools tools
	dir   string // owner file, data directory, Unix socket and log
	port  int
}

// RunMain runs the tests of m and then stops the server that Start started,
// if any, and removes its files. It returns the exit code for os.Exit: that
// of m.Run, or 1 when the tests passed but the server could not be stopped.
// A test package that calls Start must call RunMain from its TestMain.
func RunMain(m *testing.M) int {
	mainRan.Store(true)
	code := m.Run()

	shared.mu.Lock()
	srv := shared.srv
	shared.srv = nil
	shared.stopped = true
	shared.mu.Unlock()
	if srv == nil {
		return code
	}
	if err := srv.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Start returns the PostgreSQL server of the test binary, starting it on the
// first call and waiting until it accepts connections. It first stops the
// servers that crashed test binaries left behind. A failed start is not
// retried: every later Start fails with the same error.
//
// Start fails the test when TestMain does not call RunMain, since nothing
// would stop the server then. It skips the test when PostgreSQL is not
// installed, or fails it when the environment variable CI is set.
func Start(t testing.TB) *Server {
	t.Helper()
	if !mainRan.Load() {
		t.Fatal("pgtest: TestMain must call pgtest.RunMain, which stops the shared server; see the package documentation")
	}
	tl := findTools(t)

	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.stopped {
		t.Fatal("pgtest: Start called after RunMain stopped the server")
	}
	if !shared.tried {
		shared.tried = true
		sweep(tl)
		shared.srv, shared.err = start(tl)
	}
	if shared.err != nil {
		t.Fatalf("pgtest: %v", shared.err)
	}
	return shared.srv
}

// Addr is the server's host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// NewDatabase creates an empty database for the test and returns a DSN of
// the form postgres://postgres@127.0.0.1:PORT/NAME?sslmode=disable, which
// pgx and database/sql drivers accept. The database is dropped when the test
// ends, forcibly: connections the test left open are terminated. Its name
// is unique on the server and contains the test's name, for reading the
// server log.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := databaseName(t.Name())
	ctx, cancel := context.WithTimeout(t.Context(), sqlTimeout)
	defer cancel()
	if err := s.exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// t.Context is cancelled before cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
		defer cancel()
		if err := s.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return s.dsn(name)
}

// databaseName returns a new database name made of a sequence number, which
// makes it unique, and as much of the test's name as PostgreSQL keeps of an
// identifier (63 bytes), in lower case so it needs no quoting in psql.
func databaseName(test string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pgtest_%d_", dbSeq.Add(1))
	for _, r := range strings.ToLower(test) {
		if b.Len() == 63 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func (s *Server) dsn(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     s.Addr(),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// exec runs one statement on a new connection to the postgres database.
// A connection per call, rather than a shared one, lets parallel tests
// create databases concurrently; it costs a few milliseconds on loopback.
func (s *Server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// start creates a directory, runs initdb in it and starts a server on a
// free port. On failure it leaves nothing behind.
func start(tl tools) (_ *Server, err error) {
	dir, err := os.MkdirTemp("", dirPattern)
	if err != nil {
		return nil, err
	}
	s := &Server{tools: tl, dir: dir}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	// The owner is written first, so that a crash at any later step leaves
	// a directory the next sweep recognises.
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(ownerRecord(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	if tl.runuser != "" {
		// MkdirTemp made the directory 0700 for root; the postgres user
		// creates the data directory, the socket and the log in it.
		if err := os.Chown(dir, tl.uid, tl.gid); err != nil {
			return nil, err
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), initdbTimeout)
	defer cancel()
	// The C locale makes sorting and error messages the same on every
	// machine; the latter is what start reads the log for.
	if _, err := tl.run(ctx, dir, tl.initdb, "-D", filepath.Join(dir, dataDir),
		"-A", "trust", "--no-sync", "-U", "postgres", "-E", "UTF8", "--locale=C"); err != nil {
		if tl.runuser != "" {
			err = fmt.Errorf("%w (the postgres user must be able to enter %s and every directory above it)", err, dir)
		}
		return nil, err
	}

	for range portAttempts {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		if err = s.launch(); !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if errors.Is(err, errAddrInUse) {
		return nil, fmt.Errorf("start postgres: other processes took %d free ports before it bound them: %w", portAttempts, err)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// launch starts the server on s.port with pg_ctl, which waits until it
// accepts connections. It returns errAddrInUse when the port was taken.
func (s *Server) launch() error {
	logPath := filepath.Join(s.dir, logFile)
	// A fresh log per attempt, so that a failure is not blamed on the port
	// an earlier attempt lost.
	if err := os.Remove(logPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// pg_ctl hands -o to a shell; single quotes keep the directory one word.
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k '%s' -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
		s.port, s.dir)
	ctx, cancel := context.WithTimeout(context.Background(), pgCtlTimeout)
	defer cancel()
	_, err := s.tools.run(ctx, s.dir, s.tools.pgCtl, "-D", filepath.Join(s.dir, dataDir), "-l", logPath,
		"-w", "-t", strconv.Itoa(int(pgCtlWait.Seconds())), "-o", opts, "start")
	if err == nil {
		return nil
	}
	log, _ := os.ReadFile(logPath)
	if strings.Contains(string(log), "Address already in use") {
		return errAddrInUse
	}
	return fmt.Errorf("start postgres on %s: %w\nserver log:\n%s", s.Addr(), err, log)
}

// stop stops the server immediately, without a checkpoint, and removes its
// directory. Stopping a server that is not running only removes the
// directory.
func (s *Server) stop() error {
	var err error
	if _, statErr := os.Stat(filepath.Join(s.dir, dataDir, "postmaster.pid")); statErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), pgCtlTimeout)
		defer cancel()
		_, err = s.tools.run(ctx, s.dir, s.tools.pgCtl, "-D", filepath.Join(s.dir, dataDir),
			"-m", "immediate", "-w", "-t", strconv.Itoa(int(pgCtlWait.Seconds())), "stop")
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

// sweep stops the servers of test binaries that exited without RunMain and
// removes their directories. Errors are ignored: a directory it cannot
// handle, such as another user's, is left alone.
func sweep(tl tools) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern))
	for _, dir := range dirs {
		record, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil || ownerAlive(string(record)) {
			continue
		}
		(&Server{tools: tl, dir: dir}).stop()
	}
}

// ownerRecord describes the process pid for the owner file. The start time
// tells the process apart from a later one that reuses its pid.
func ownerRecord(pid int) string {
	return strconv.Itoa(pid) + " " + startTime(pid) + "\n"
}

// ownerAlive reports whether the process an owner file describes is still
// running. A record it cannot read counts as alive: the file may be half
// written.
func ownerAlive(record string) bool {
	fields := strings.Fields(record)
	if len(fields) == 0 {
		return true
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil || pid <= 0 {
		return true
	}
	if pid == os.Getpid() {
		// This binary sweeps before it makes its own directory, so the
		// owner is an earlier process that had the same pid.
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	defer p.Release()
	// Signal 0 checks for existence; EPERM means it exists as another user.
	if errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone) {
		return false
	}
	if len(fields) > 1 {
		if now := startTime(pid); now != "" && now != fields[1] {
			return false
		}
	}
	return true
}

// startTime returns when process pid started, in clock ticks since boot, or
// "" where /proc does not say.
func startTime(pid int) string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name in parentheses may contain spaces; starttime is the
	// 20th field after it (field 22 of proc(5)).
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return ""
	}
	return fields[19]
}

// freePort returns a loopback TCP port that was free a moment ago.
// PostgreSQL must be told its port, so one is found by binding it here and
// closing it; a start that then loses the race is retried.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// tools are the programs that run a server and the user they run as.
type tools struct {
	initdb, pgCtl string
	// runuser is set when the test runs as root, which PostgreSQL refuses:
	// commands then run as the postgres user, uid:gid, through it.
	runuser  string
	uid, gid int
}

// run runs a PostgreSQL program in dir, as the postgres user if needed, and
// returns its output, which an error includes.
func (tl tools) run(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	if tl.runuser != "" {
		args = append([]string{"-u", "postgres", "--", name}, args...)
		name = tl.runuser
	}
	cmd := exec.CommandContext(ctx, name, args...)
	// The postgres user may not be able to enter the test's working
	// directory; initdb and pg_ctl warn or fail there.
	cmd.Dir = dir
	// Should a child keep the output pipe open, Wait gives up after this.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return out, nil
}

// findTools finds initdb and pg_ctl, or ends the test: with Skip when
// PostgreSQL is not installed, with Fatal when it is but cannot be run or
// when CI is set.
func findTools(t testing.TB) tools {
	t.Helper()
	var tl tools
	var ok bool
	tl.initdb, tl.pgCtl, ok = lookPostgres()
	if !ok {
		msg := "pgtest: initdb and pg_ctl are neither on PATH nor in /usr/lib/postgresql/*/bin; install PostgreSQL with: " + InstallHint
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " (CI is set, so this fails instead of skipping)")
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		return tl
	}
	var err error
	if tl.runuser, err = exec.LookPath("runuser"); err != nil {
		t.Fatalf("pgtest: PostgreSQL does not run as root, and runuser, needed to run it as the postgres user, is missing: %v", err)
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("pgtest: PostgreSQL does not run as root, and there is no postgres user to run it as: %v", err)
	}
	if tl.uid, err = strconv.Atoi(u.Uid); err != nil {
		t.Fatalf("pgtest: uid of the postgres user: %v", err)
	}
	if tl.gid, err = strconv.Atoi(u.Gid); err != nil {
		t.Fatalf("pgtest: gid of the postgres user: %v", err)
	}
	return tl
}

// lookPostgres returns the paths of initdb and pg_ctl: from PATH, or from
// the newest /usr/lib/postgresql/VERSION/bin, where Debian's packages put
// them without linking them into PATH.
func lookPostgres() (initdb, pgCtl string, ok bool) {
	initdb, err1 := exec.LookPath("initdb")
	pgCtl, err2 := exec.LookPath("pg_ctl")
	if err1 == nil && err2 == nil {
		return initdb, pgCtl, true
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) float64 {
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		if err != nil {
			return -1
		}
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return cmp.Compare(version(b), version(a)) })
	for _, dir := range dirs {
		initdb, err1 = exec.LookPath(filepath.Join(dir, "initdb"))
		pgCtl, err2 = exec.LookPath(filepath.Join(dir, "pg_ctl"))
		if err1 == nil && err2 == nil {
			return initdb, pgCtl, true
		}
	}
	return "", "", false
}
