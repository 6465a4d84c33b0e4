package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/portico-gw/portico/gateway"
)

// An upgrade in place, as nginx's binary upgrade and HAProxy's seamless
// reload do it: on SIGUSR2 the running gateway starts its own executable
// again, with the same arguments and environment, and hands it its
// listening sockets. The two processes then accept from the same sockets
// (one accept queue each, shared, so nothing queued is lost). The new
// process writes one byte to an inherited pipe once its node is ready
// (gateway.Node.Ready: serving, with a snapshot applied); only then does
// the old one stop its sources and drain, exactly as on SIGTERM. A new
// process that exits, or is not ready within -upgrade-timeout, is killed
// and the old one serves on.
//
// With -usage-dir both processes count at once, so each takes a slot of
// the usage directory of its own (gateway/usage.OpenDir): the new one
// the first slot the old one does not hold. Once the old one has drained,
// shipped its last window and exited, the new one adopts its slot, ships
// what is left in it and releases it; the windows of the two spools are
// told apart by spool id, so none is lost or counted twice.
const (
	// listenFDsEnv names the inherited listening sockets: a
	// comma-separated list of fd:pool=addr, addr as the flag spelled it
	// ("3:public=127.0.0.1:8080,4:partner=:8443").
	listenFDsEnv = "PORTICO_LISTEN_FDS"
	// readyFDEnv names the inherited pipe the new process reports ready on.
	readyFDEnv = "PORTICO_READY_FD"
)

// errUpgraded ends the old process's runs once the new one is ready: they
// stop and drain as on SIGTERM, and the process exits 0.
var errUpgraded = errors.New("upgraded: the new process serves")

// listenerKey is how both processes name a listener: its pool and its
// address as the flags spell it, so ":0" matches ":0".
func listenerKey(l gateway.Listener) string {
	pool := l.Pool
	if pool == "" {
		pool = "public"
	}
	return pool + "=" + l.Addr
}

// handoff is what a process started by an upgrade inherited.
type handoff struct {
	// ready, if set, is the pipe to write one byte to once the node is
	// ready.
	ready *os.File
}

// inherit takes the listening sockets an upgrading process handed over
// (listenFDsEnv) for the listeners in ls with the same pool and address,
// and the pipe to report ready on. Without the variables it does nothing.
// It clears them, so that this process's own upgrade starts afresh.
func inherit(ls []gateway.Listener, log *slog.Logger) (handoff, error) {
	var h handoff
	fds, ready := os.Getenv(listenFDsEnv), os.Getenv(readyFDEnv)
	_ = os.Unsetenv(listenFDsEnv)
	_ = os.Unsetenv(readyFDEnv)
	if ready != "" {
		fd, err := strconv.Atoi(ready)
		if err != nil || fd < 3 {
			return h, fmt.Errorf("%s=%q: not a file descriptor", readyFDEnv, ready)
		}
		h.ready = os.NewFile(uintptr(fd), "ready")
	}
	if fds == "" {
		return h, nil
	}
	files := map[string][]*os.File{}
	for _, e := range strings.Split(fds, ",") {
		n, key, ok := strings.Cut(e, ":")
		fd, err := strconv.Atoi(n)
		if !ok || err != nil || fd < 3 {
			return h, fmt.Errorf("%s: %q is not fd:pool=addr", listenFDsEnv, e)
		}
		files[key] = append(files[key], os.NewFile(uintptr(fd), key))
	}
	for i := range ls {
		key := listenerKey(ls[i])
		fs := files[key]
		if len(fs) == 0 {
			continue // a listener the old process did not have: bound anew
		}
		files[key] = fs[1:]
		ln, err := net.FileListener(fs[0])
		_ = fs[0].Close()
		if err != nil {
			return h, fmt.Errorf("%s: %s: %w", listenFDsEnv, key, err)
		}
		ls[i].Listener = ln
		log.Info("inherited listener", "listener", key, "addr", ln.Addr().String(), "pid", os.Getpid())
	}
	for key, fs := range files {
		for _, f := range fs {
			log.Warn("inherited a listener no flag asks for; closing it", "listener", key)
			_ = f.Close()
		}
	}
	return h, nil
}

// reportReady writes the ready byte once node is ready, then closes the
// pipe; it returns when that is done or ctx is.
func (h handoff) reportReady(ctx context.Context, node *gateway.Node, log *slog.Logger) error {
	defer h.ready.Close()
	select {
	case <-node.Ready():
	case <-ctx.Done():
		return nil
	}
	if _, err := h.ready.Write([]byte{1}); err != nil {
		// The old process gave up on us; we serve on beside it or alone.
		log.Warn("upgrade: could not tell the old process this one is ready", "err", err)
	}
	return nil
}

// upgradeOnSIGUSR2 upgrades the process in place on each SIGUSR2 until one
// upgrade succeeds, when it returns errUpgraded, or ctx is done. usr2 is
// subscribed to SIGUSR2 (subscribe), and unsubscribed when it returns; ls
// are the node's listeners, in the order ListenerFiles returns them.
func upgradeOnSIGUSR2(ctx context.Context, usr2 chan os.Signal, node *gateway.Node, ls []gateway.Listener, timeout time.Duration, log *slog.Logger) error {
	defer signal.Stop(usr2)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-usr2:
		}
		err := upgrade(ctx, node, ls, timeout, log)
		if err == nil {
			return errUpgraded
		}
		if ctx.Err() != nil {
			return nil
		}
		log.Error("upgrade failed; this process serves on", "err", err)
	}
}

// upgrade starts the new process with the listeners and waits until it
// is ready, has exited, or timeout has passed; in the last two cases it
// kills and reaps it and says why.
func upgrade(ctx context.Context, node *gateway.Node, ls []gateway.Listener, timeout time.Duration, log *slog.Logger) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	files, err := node.ListenerFiles()
	if err != nil {
		return err
	}
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	names := make([]string, len(files))
	for i := range files {
		names[i] = strconv.Itoa(3+i) + ":" + listenerKey(ls[i])
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = append(files, w)
	cmd.Env = append(withoutHandoff(os.Environ()),
		listenFDsEnv+"="+strings.Join(names, ","),
		readyFDEnv+"="+strconv.Itoa(3+len(files)))
	err = cmd.Start()
	_ = w.Close() // the new process holds the only write end: EOF when it exits
	for _, f := range files {
		if err := gateway.Nonblock(f); err != nil {
			log.Warn("upgrade: listener left in blocking mode", "err", err)
		}
	}
	if err != nil {
		return fmt.Errorf("starting %s: %w", exe, err)
	}
	pid := cmd.Process.Pid
	log.Info("upgrade: new process started; waiting until it is ready", "pid", pid, "timeout", timeout.String())

	readc := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := r.Read(b[:]) // a byte, or EOF once the new process exits
		readc <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var why error
	read := false
	select {
	case err := <-readc:
		if err == nil {
			log.Info("upgrade: new process ready; this one drains", "pid", pid)
			_ = cmd.Process.Release()
			return nil
		}
		read = true
		why = fmt.Errorf("new process %d ended before it was ready", pid)
	case <-timer.C:
		why = fmt.Errorf("new process %d not ready within %s", pid, timeout)
	case <-ctx.Done():
		why = ctx.Err()
	}
	_ = cmd.Process.Kill()
	werr := cmd.Wait()
	if !read {
		_ = r.Close()
		<-readc
	}
	return fmt.Errorf("%w (%v)", why, werr)
}

// withoutHandoff is env without an earlier upgrade's variables.
func withoutHandoff(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, listenFDsEnv+"=") && !strings.HasPrefix(e, readyFDEnv+"=") {
			out = append(out, e)
		}
	}
	return out
}
