package gateway

import (
	"fmt"
	"os"
	"syscall"
)

// Ready returns a channel that is closed once Run serves on every
// listener with a snapshot applied: the config file's, the control
// plane's cached one, or else the first one the control plane sends. A
// process that takes over another's listeners (an upgrade in place) says
// it is ready then, and not before, so that the old process keeps
// serving until the new one can answer as it did.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// ListenerFiles returns a copy of every listener's socket, in
// Options.Listeners order, for a new process to inherit (os/exec's
// ExtraFiles) and serve through Listener.Listener: the raw TCP sockets,
// which the node wraps for TLS and the framing guard in Run, as the new
// process's node does again. Both processes then accept from the same
// socket, with one accept queue, so closing this node's listeners, as its
// drain does, loses no connection waiting in it. The caller owns the
// files and closes them once the new process has started.
//
// Passing a file to os/exec clears O_NONBLOCK on the socket, for this
// process's listener too, which shares it: call Nonblock on each file
// once the new process has started.
func (n *Node) ListenerFiles() ([]*os.File, error) {
	files := make([]*os.File, 0, len(n.listeners))
	for i, ln := range n.listeners {
		fl, ok := ln.(interface{ File() (*os.File, error) })
		if !ok {
			closeFiles(files)
			return nil, fmt.Errorf("gateway: pool %q: listener %T has no file to hand over", n.pools[i].name, ln)
		}
		f, err := fl.File()
		if err != nil {
			closeFiles(files)
			return nil, fmt.Errorf("gateway: pool %q: %w", n.pools[i].name, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// Nonblock puts the socket of a file ListenerFiles returned back in
// non-blocking mode, which os/exec took it out of when it passed the file
// on. A listener whose socket blocks ties up a thread in accept(2), and
// closing it waits for that call to return.
func Nonblock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), true) }); err != nil {
		return err
	}
	return serr
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}
