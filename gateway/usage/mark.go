package usage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// markFile, in the usage directory, holds the last usage mark the node
// applied to its spool: the quota service had committed every window up
// to it. It is one line, "<spool id> <seq>", replaced whole (written to a
// new file, synced, renamed over the old) so a crash leaves the old mark
// or the new one, never a torn one.
const markFile = "MARK"

// markAbove reports whether dir's mark is of the spool SPOOLID names and
// above last, the spool's last seq: the spool lost windows the quota
// service had (its segments removed, an older copy of the disk), and the
// seqs after last under the same spool id would be taken for duplicates.
func markAbove(dir string, last uint64) (seq uint64, above bool) {
	b, err := os.ReadFile(filepath.Join(dir, "SPOOLID"))
	if err != nil {
		return 0, false
	}
	m, err := os.ReadFile(filepath.Join(dir, markFile))
	if err != nil {
		return 0, false
	}
	sid, n, ok := strings.Cut(strings.TrimSpace(string(m)), " ")
	seq, perr := strconv.ParseUint(n, 10, 64)
	if !ok || perr != nil || sid != strings.TrimSpace(string(b)) {
		return 0, false
	}
	return seq, seq > last
}

// readMark returns the seq of dir's mark if it is of spool id, else 0. A
// mark that does not read is logged and ignored: the windows after the
// segment the spool kept are shipped again, and the quota service drops
// what it had.
func (r *Recorder) readMark(dir, id string) uint64 {
	b, err := os.ReadFile(filepath.Join(dir, markFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	sid, n, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	seq, perr := strconv.ParseUint(n, 10, 64)
	if err != nil || !ok || perr != nil {
		r.log.Warn("usage: the usage mark does not read; windows the quota service had may be shipped again", "dir", dir, "err", err)
		return 0
	}
	if sid != id {
		return 0 // a mark of a spool that is gone
	}
	return seq
}

// Mark returns the last usage mark the recorder applied to its spool
// (SaveMark's, or the one Open found in the directory): every window up
// to it is committed, and the shipper starts after it. 0 when none.
func (r *Recorder) Mark() uint64 { return r.mark.Load() }

// SaveMark records in the usage directory that the windows up to seq are
// committed and trimmed from the spool (the shipper's Options.OnTrim),
// so that the next Open trims them too instead of bringing back the
// segment the spool keeps. A seq at or below Mark is ignored. It writes
// and syncs a file: call it off the request path. Safe for concurrent
// use.
func (r *Recorder) SaveMark(seq uint64) error {
	r.markMu.Lock()
	defer r.markMu.Unlock()
	if seq <= r.mark.Load() {
		return nil
	}
	if last := r.spool.Last(); seq > last {
		return fmt.Errorf("usage: mark: seq %d is above the spool's last window %d", seq, last)
	}
	path := filepath.Join(r.dir, markFile)
	tmp := path + ".new"
	if err := writeFile(tmp, []byte(r.spoolID+" "+strconv.FormatUint(seq, 10)+"\n"), !r.opts.NoSync); err != nil {
		return fmt.Errorf("usage: mark: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("usage: mark: %w", err)
	}
	if !r.opts.NoSync {
		if err := syncDir(r.dir); err != nil {
			return fmt.Errorf("usage: mark: %w", err)
		}
	}
	r.mark.Store(seq)
	return nil
}

// writeFile writes b to a new file at path, synced if sync.
func writeFile(path string, b []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && sync {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}
