//go:build linux || darwin

package usage_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/portico-gw/portico/gateway/usage"
)

// The crash tests run this test binary again as a child that records
// calls and is killed with SIGKILL; the parent then opens the usage
// directory the child left and checks what the spool holds.
const (
	childMode = "PORTICO_USAGE_CHILD"
	childDir  = "PORTICO_USAGE_DIR"
)

const (
	childWorkers = 4
	slotCloses   = 7 // the counter slot the child counts closed windows in
)

// counters maps the file path of 8 counters shared by parent and child.
// The child adds to them after each call returns, so after a kill they say
// how many calls had finished.
func counters(t testing.TB, path string) *[8]atomic.Uint64 {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(64); err != nil {
		t.Fatal(err)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, 64, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(b) })
	return (*[8]atomic.Uint64)(unsafe.Pointer(&b[0]))
}

// TestCrashChild is the child; it is skipped unless a crash test runs it.
func TestCrashChild(t *testing.T) {
	mode := os.Getenv(childMode)
	if mode == "" {
		t.Skip("the crash tests run this as their child process")
	}
	dir := os.Getenv(childDir)
	r, err := usage.Open(filepath.Join(dir, "usage"), usage.Options{NodeID: "node-1", NoSync: true, MaxSeries: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	switch mode {
	case "traffic":
		// Workers record calls, each for a key of its own; windows close
		// as fast as they can beside them; the parent kills the process.
		cs := counters(t, filepath.Join(dir, "counts"))
		for g := range childWorkers {
			c := call{key: fmt.Sprintf("k%d", g), route: "r", product: "p", status: 200, forwarded: true}
			go func() {
				for {
					r.Record(c.record(time.Now()))
					cs[g].Add(1)
				}
			}()
		}
		for {
			if err := r.CloseWindow(); err != nil {
				t.Fatal(err)
			}
			cs[slotCloses].Add(1)
		}
	default:
		// Record a known number of calls, then die at a point of closing
		// the window.
		point, chunked := mode, false
		if mode == "appended-chunk" {
			point, chunked = "appended", true
			usage.SetChunkLimit(300)
		}
		for i := range crashCalls {
			c := call{key: "k0", route: "r", product: "p", status: 200, forwarded: i%2 == 0}
			if chunked {
				c.route = fmt.Sprintf("r%d", i%50)
			}
			r.Record(c.record(time.Now()))
		}
		if mode == "torn-add" {
			r.CutTotals()
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		usage.SetTestHook(func(p string) {
			if p == point {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		})
		r.CloseWindow()
		t.Fatalf("CloseWindow returned: never got to %q", point)
	}
}

const crashCalls = 1000

func startChild(t *testing.T, mode, dir string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childMode+"="+mode, childDir+"="+dir)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, out
}

func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// TestCrashMidTraffic kills a process recording calls on several cores
// while it closes windows, and checks that the windows the next Open
// spools hold every call that had finished, and none twice.
func TestCrashMidTraffic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cs := counters(t, filepath.Join(dir, "counts"))
	cmd, out := startChild(t, "traffic", dir)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n uint64
		for g := range childWorkers {
			n += cs[g].Load()
		}
		if n >= 200000 && cs[slotCloses].Load() >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child recorded %d calls and closed %d windows in 60 s; output:\n%s", n, cs[slotCloses].Load(), out)
		}
		time.Sleep(time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	if err := cmd.Wait(); !killedBySIGKILL(err) {
		t.Fatalf("child ended with %v, want SIGKILL; output:\n%s", err, out)
	}

	r := open(t, filepath.Join(dir, "usage"), usage.Options{})
	ws := windows(t, r.Spool())
	got := rows(ws...)
	var finished, total uint64
	for g := range childWorkers {
		done := cs[g].Load()
		n := got[fmt.Sprintf("k%d/// p r 2xx", g)]
		// A call the kill interrupted may or may not be counted (or be
		// counted but not yet billable); every call that returned must
		// be, once.
		if n[0] < done || n[0] > done+1 || n[1] < done || n[1] > n[0] {
			t.Errorf("key k%d: windows count %d calls (%d billable), the child finished %d", g, n[0], n[1], done)
		}
		finished += done
		total += n[0]
	}
	// The open window, and the one being closed if the kill came then;
	// none when the kill came right after a rotation, before any call
	// counted into the window it opened (an empty open window is not
	// spooled).
	recovered := r.Stats().Recovered
	if recovered > 2 {
		t.Errorf("Stats().Recovered = %d, want at most 2", recovered)
	}
	last := ws[len(ws)-1]
	// The node's counters follow the rows, even where the kill came
	// between a call's row and the half's totals: the reconciler finds
	// them equal.
	if last.GetRecovered() != (recovered > 0) || last.GetPeriodCounted() != total {
		t.Errorf("last window recovered %v (%d recovered), period counter %d, want %d", last.GetRecovered(), recovered, last.GetPeriodCounted(), total)
	}
	t.Logf("child finished %d calls in %d windows; the windows count %d", finished, len(ws), total)
}

// TestCrashWhileSpooling kills the process at each point of closing a
// window, and checks the next Open neither loses the window nor spools it
// twice, and that the node's period counters go on from it.
func TestCrashWhileSpooling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		point     string
		recovered []bool // per record spooled
	}{
		{"assigned", []bool{true}},
		{"appended", []bool{false}},
		{"spooled", []bool{false}},
		{"appended-chunk", nil}, // the first chunk before, the rest after
		// Killed inside Record, between a call's row and the totals: the
		// counters follow the rows.
		{"torn-add", []bool{true}},
	} {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cmd, out := startChild(t, tc.point, dir)
			if err := cmd.Wait(); !killedBySIGKILL(err) {
				t.Fatalf("child ended with %v, want SIGKILL; output:\n%s", err, out)
			}
			r := open(t, filepath.Join(dir, "usage"), usage.Options{})
			ws := windows(t, r.Spool())
			var rec []bool
			for i, w := range ws {
				if w.GetSeq() != uint64(i+1) {
					t.Errorf("window %d has seq %d", i, w.GetSeq())
				}
				rec = append(rec, w.GetRecovered())
			}
			if tc.recovered == nil {
				if len(ws) < 3 || rec[0] || !rec[1] {
					t.Errorf("chunked window spooled as %d records, recovered %v; want at least 3, the first not recovered, the rest recovered", len(ws), rec)
				}
			} else if fmt.Sprint(rec) != fmt.Sprint(tc.recovered) {
				t.Errorf("spooled windows recovered %v, want %v", rec, tc.recovered)
			}
			if c, b := counted(ws...); c != crashCalls || b != crashCalls/2 {
				t.Errorf("windows count %d calls, %d billable; want %d, %d", c, b, crashCalls, crashCalls/2)
			}
			if last := ws[len(ws)-1]; last.GetPeriodCounted() != crashCalls {
				t.Errorf("period counter %d, want %d", last.GetPeriodCounted(), crashCalls)
			}
			// The node's counters of the period go on from the window, as
			// if there had been no crash.
			for range 5 {
				r.Record(call{key: "k0", status: 200}.record(time.Now()))
			}
			if err := r.CloseWindow(); err != nil {
				t.Fatal(err)
			}
			ws = windows(t, r.Spool())
			if got := ws[len(ws)-1].GetPeriodCounted(); got != crashCalls+5 {
				t.Errorf("next window's period counter %d, want %d", got, crashCalls+5)
			}
		})
	}
}
