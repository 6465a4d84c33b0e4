package usage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/portico-gw/portico/gateway/usage/spool"
)

// MaxSlots bounds the slots of a usage directory OpenDir tries.
const MaxSlots = 16

// OpenDir opens a slot of the usage directory dir (see Slots) as Open
// opens a directory: the first slot no other process holds, in the order
// Slots lists them, making dir/0, dir/1 and so on as needed. So two
// processes of one node, the old and the new of an upgrade in place, count
// side by side, each into its own spool with its own id and sequence; the
// quota service keeps them apart by (node, spool id, seq). It fails with
// spool.ErrLocked when MaxSlots are held.
func OpenDir(dir string, opts Options) (*Recorder, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	slots, err := Slots(dir)
	if err != nil {
		return nil, err
	}
	for i := 0; len(slots) < MaxSlots; i++ {
		if p := filepath.Join(dir, strconv.Itoa(i)); !slices.Contains(slots, p) {
			slots = append(slots, p)
		}
	}
	for _, slot := range slots[:MaxSlots] {
		r, err := Open(slot, opts)
		if !errors.Is(err, spool.ErrLocked) {
			return r, err
		}
	}
	return nil, fmt.Errorf("usage: %s: %d slots, all in use: %w", dir, MaxSlots, spool.ErrLocked)
}

// Slots lists the slots of the usage directory dir: each a directory as
// Open makes it (window file, spool, spool id, mark). They are dir
// itself, if it holds a spool (a usage directory of a node from before
// slots, which so goes on as the first slot), then dir/0, dir/1 and so
// on, those that exist, in numeric order.
func Slots(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	var slots []string
	var nums []int
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if e.Name() == "spool" {
			slots = append(slots, dir)
			continue
		}
		if n, err := strconv.Atoi(e.Name()); err == nil && n >= 0 && strconv.Itoa(n) == e.Name() {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	for _, n := range nums {
		slots = append(slots, filepath.Join(dir, strconv.Itoa(n)))
	}
	return slots, nil
}

// Adopt opens the slot dir another process left, to ship what it holds:
// like Open, it spools the windows that process left in the window file
// (all of them, when it was killed; none, when it stopped and sealed),
// and trims the spool at the slot's mark; but it opens no window, so it
// counts nothing (Record counts late) and its Close spools nothing. The
// caller ships the spool (from Mark()+1), keeps the marks that come
// meanwhile (SaveMark) and closes the recorder once it has shipped all
// and no window is Waiting, which releases the slot with its spool id and
// sequence for the next process to go on from. It fails with
// spool.ErrLocked while a process holds the slot.
func Adopt(dir string, opts Options) (*Recorder, error) {
	opts.adopt = true
	return Open(dir, opts)
}

// Waiting reports whether a window waits in the window file for room in
// the spool: an adopted slot is released only once none does.
func (r *Recorder) Waiting() bool {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closed {
		return false
	}
	return r.halves[0].state() != stateFree || r.halves[1].state() != stateFree
}

// Generation returns a number that changes whenever a recorder opens a
// window in the slot dir: the highest window epoch of its window file.
// It reads only the file's headers, so a caller that released a slot can
// tell cheaply whether another process has counted into it since, before
// it adopts it again. A slot without a window file is generation 0.
func Generation(dir string) (uint64, error) {
	m, err := openMap(filepath.Join(dir, "window.map"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("usage: %w", err)
	}
	defer m.close()
	return max(m.u64(m.l.halfOff(0)+hhEpoch).Load(), m.u64(m.l.halfOff(1)+hhEpoch).Load()), nil
}

// Dir returns the directory (the slot) the recorder opened.
func (r *Recorder) Dir() string { return r.dir }
