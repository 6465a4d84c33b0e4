// Package spool is a gateway node's on-disk log of closed usage windows.
// Each window is appended under its sequence number before anything else
// happens to it; a shipper then reads it and sends it on, a re-send request
// reads one again by number, and once the quota service has committed the
// node's windows up to a high-water mark the node trims them away.
//
// # Lifecycle
//
//  1. Open reads every segment in the directory, checks every record and
//     builds the index. A torn tail of the last segment is cut away (see
//     Recovered); any other damage fails Open.
//  2. One goroutine, typically the one that closes windows, calls Append
//     with increasing sequence numbers. Others call Get, Scan, First, Last
//     and Size at the same time, and Trim when a high-water mark arrives.
//  3. Close releases the files and the directory lock. Open again to go on.
//
// A Spool starts no goroutines. Append waits for the disk, so it belongs on
// a background goroutine, never on the request path; Get and Scan never
// wait for an Append's fsync.
//
// # On disk
//
// The directory holds a LOCK file and segment files named for the sequence
// number of their first record, as 16 lower-case hex digits and ".seg"
// (0000000000000001.seg), so a listing sorts in sequence order. Records are
// only ever appended, to the last segment; a new segment is started when the
// next record would take the last one past Options.SegmentBytes. A segment
// file is a run of records with nothing between them:
//
//	offset  size  field
//	0       4     magic: the bytes 'P' 'S' 'P' 0x01 (the last is the version)
//	4       4     payload length n, at most MaxPayload
//	8       8     sequence number
//	16      n     payload
//	16+n    4     CRC-32C (Castagnoli) of bytes 0 to 16+n
//
// All integers are little-endian. Sequence numbers start at 1 and increase
// strictly within a segment and from one segment to the next; they need not
// be contiguous.
//
// # Durability
//
// Unless Options.NoSync is set, Append returns only after the record's file
// has been fsynced, and, when the record started a new segment, the
// directory too. So a record whose Append returned nil survives a crash of
// the process or of the machine. A crash during an Append can leave at most
// that one record torn at the end of the last segment; it had not been
// acknowledged, and Open cuts it away. Trim fsyncs the directory after
// removing segments, though a removal lost in a crash only means the segment
// is trimmed again.
//
// With NoSync, records reach the disk when the kernel writes them: a process
// crash still loses nothing, but a machine crash may lose the records of the
// last few seconds, which Open then cuts away as a torn tail. Even with
// NoSync a segment is fsynced before the next one is started, so a segment
// other than the last is always whole, and damage to one is reported as
// corruption.
//
// If a write or fsync fails, the state of the file is unknown, so the Spool
// refuses further Appends. Close it and Open again, which checks every
// record; Last then tells whether the failed Append reached the disk.
//
// Trimming is kept in memory only. After Open the records of the segment
// that was being written to are all readable again, including those below
// the last Trim, until the next Trim. That segment is never removed, so that
// Last, and with it the next sequence number, survives a restart: a node
// that reused a sequence number would have its window dropped as a
// duplicate.
package spool

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Options configures Open. The zero value works.
type Options struct {
	// SegmentBytes is the size past which the next record starts a new
	// segment file. Zero means 64 MiB. A record larger than SegmentBytes
	// gets a segment of its own.
	SegmentBytes int64

	// MaxBytes bounds the bytes of all segments together: Append returns
	// ErrFull rather than pass it. Zero means 1 GiB. It must be at least
	// twice SegmentBytes, because Trim keeps the segment being written to
	// and there must be room for another beside it.
	MaxBytes int64

	// NoSync leaves writing records to disk to the kernel instead of
	// fsyncing each Append; see the package comment for what a crash may
	// then lose.
	NoSync bool

	// Logger receives the one warning Open logs when it cuts a torn tail.
	// Nil means slog.Default().
	Logger *slog.Logger
}

// Recovery describes what Open cut from the end of the last segment.
type Recovery struct {
	// File is the segment that was cut, "" if nothing was. A segment left
	// with no whole record is removed.
	File string

	// Offset is where the cut began: the end of the last good record.
	Offset int64

	// Bytes is how many bytes were cut. With syncing on they hold at most
	// one record, whose Append had not returned.
	Bytes int64

	// Reason says what was wrong with the first byte cut, such as
	// "bad crc" or "record runs past end of file".
	Reason string
}

// Spool is an open spool directory. It is safe for concurrent use: Append
// and Trim are serialised with each other, and Get, Scan, First, Last and
// Size may run beside them.
type Spool struct {
	dir  string
	opts Options
	lock *os.File

	// wmu serialises Append, Trim and Close. It is held across writes and
	// fsyncs; readers never take it.
	wmu    sync.Mutex
	wbuf   []byte
	broken error // set when a failed write or fsync left the tail unknown

	// mu guards what readers see. Writers hold it only to publish a
	// finished record or to detach trimmed segments; readers hold it while
	// they read a record, so a detached segment's file is closed only once
	// no reader can reach it.
	mu       sync.RWMutex
	closed   bool
	segs     []*segment // in sequence order; the last is written to
	index    []entry    // records not trimmed, in sequence order
	last     uint64
	size     int64
	recovery Recovery
}

// Open opens the spool in dir, creating dir (mode 0700) if it is missing,
// and reads and checks every record in it. Only one Spool may have a
// directory open at a time; Open returns ErrLocked otherwise. Damage to
// the last segment's tail is cut away and reported by Recovered; damage
// anywhere else fails Open with a *CorruptError naming the file and offset,
// leaving the files as they were.
func Open(dir string, opts Options) (*Spool, error) {
	if opts.SegmentBytes < 0 || opts.MaxBytes < 0 {
		return nil, fmt.Errorf("spool: negative SegmentBytes or MaxBytes")
	}
	if opts.SegmentBytes == 0 {
		opts.SegmentBytes = 64 << 20
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = 1 << 30
	}
	if opts.MaxBytes < 2*opts.SegmentBytes {
		return nil, fmt.Errorf("spool: MaxBytes %d is less than twice SegmentBytes %d", opts.MaxBytes, opts.SegmentBytes)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	s := &Spool{dir: dir, opts: opts, lock: lock}
	if err := s.load(); err != nil {
		for _, seg := range s.segs {
			seg.f.Close()
		}
		if lock != nil {
			lock.Close()
		}
		return nil, err
	}
	if r := s.recovery; r.File != "" {
		opts.Logger.Warn("spool: cut torn tail of last segment",
			"file", r.File, "offset", r.Offset, "bytes", r.Bytes, "reason", r.Reason)
	}
	return s, nil
}

// load reads the segments of s.dir into s.segs and s.index.
func (s *Spool) load() error {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	var segs []*segment
	for _, de := range des {
		if first, ok := parseSegmentName(de.Name()); ok && de.Type().IsRegular() {
			segs = append(segs, &segment{first: first, path: filepath.Join(s.dir, de.Name())})
		}
	}
	// ReadDir sorts by name, which for these names is sequence order.
	for i, seg := range segs {
		if seg.f, err = os.OpenFile(seg.path, os.O_RDWR, 0); err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		s.segs = append(s.segs, seg)
		res, err := scanSegment(seg, s.last)
		if err != nil {
			return fmt.Errorf("spool: read %s: %w", seg.path, err)
		}
		if i < len(segs)-1 {
			switch {
			case res.reason != "":
				return &CorruptError{File: seg.path, Offset: res.end, Reason: res.reason}
			case len(res.entries) == 0:
				return &CorruptError{File: seg.path, Offset: 0, Reason: "empty segment before the last"}
			}
		} else if res.reason != "" || len(res.entries) == 0 {
			if err := s.cutTail(seg, res); err != nil {
				return err
			}
			if len(res.entries) == 0 {
				break
			}
		}
		seg.last = res.entries[len(res.entries)-1].seq
		seg.size = res.end
		s.index = append(s.index, res.entries...)
		s.last = seg.last
		s.size += seg.size
	}
	return nil
}

// cutTail truncates the last segment to the end of its last good record, or
// removes it when it has none, and records what was cut.
func (s *Spool) cutTail(seg *segment, res scanResult) error {
	fi, err := seg.f.Stat()
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.recovery = Recovery{File: seg.path, Offset: res.end, Bytes: fi.Size() - res.end, Reason: res.reason}
	if s.recovery.Reason == "" {
		s.recovery.Reason = "empty segment"
	}
	if len(res.entries) == 0 {
		seg.f.Close()
		s.segs = s.segs[:len(s.segs)-1]
		if err := os.Remove(seg.path); err != nil {
			return fmt.Errorf("spool: cut torn tail: %w", err)
		}
		return s.syncDir()
	}
	if err := seg.f.Truncate(res.end); err != nil {
		return fmt.Errorf("spool: cut torn tail: %w", err)
	}
	if s.opts.NoSync {
		return nil
	}
	if err := seg.f.Sync(); err != nil {
		return fmt.Errorf("spool: cut torn tail: %w", err)
	}
	return nil
}

func (s *Spool) syncDir() error {
	if s.opts.NoSync {
		return nil
	}
	d, err := os.Open(s.dir)
	if err != nil {
		return fmt.Errorf("spool: sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("spool: sync directory: %w", err)
	}
	return nil
}

// Recovered reports what Open cut from the end of the last segment; the
// zero Recovery if nothing.
func (s *Spool) Recovered() Recovery { return s.recovery }

// Append writes the record (seq, payload) at the end of the spool and, unless
// Options.NoSync is set, waits until it is on disk. seq must be greater than
// Last (ErrOutOfOrder), payload at most MaxPayload bytes (ErrTooLarge), and
// the record must fit under Options.MaxBytes (ErrFull). On any error nothing
// was appended, except after a failed write or fsync: then the record may be
// on disk or not, and every later Append fails until the Spool is opened
// again. Append does not keep payload.
func (s *Spool) Append(seq uint64, payload []byte) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("spool: append seq %d of %d bytes: %w", seq, len(payload), ErrTooLarge)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	// Only writers change closed, last and size, and they hold wmu, so
	// they can be read here without mu.
	switch {
	case s.closed:
		return ErrClosed
	case s.broken != nil:
		return fmt.Errorf("spool: unusable after an earlier failure, open it again: %w", s.broken)
	case seq <= s.last:
		return fmt.Errorf("spool: append seq %d after %d: %w", seq, s.last, ErrOutOfOrder)
	}
	n := recordLen(len(payload))
	if s.size+n > s.opts.MaxBytes {
		return fmt.Errorf("spool: append seq %d: %d of %d bytes used: %w", seq, s.size, s.opts.MaxBytes, ErrFull)
	}
	var seg *segment
	if len(s.segs) > 0 {
		seg = s.segs[len(s.segs)-1]
	}
	fresh := seg == nil || seg.size+n > s.opts.SegmentBytes
	if fresh {
		var err error
		if seg, err = s.startSegment(seq); err != nil {
			return err
		}
	}
	s.wbuf = encode(s.wbuf[:0], seq, payload)
	err := s.write(seg, fresh)
	if cap(s.wbuf) > 1<<20 {
		s.wbuf = nil // don't hold on to a rare large record's buffer
	}
	if err != nil {
		return err
	}

	s.mu.Lock()
	if fresh {
		s.segs = append(s.segs, seg)
	}
	s.index = append(s.index, entry{seq: seq, seg: seg, off: seg.size, n: uint32(len(payload))})
	seg.last = seq
	seg.size += n
	s.last = seq
	s.size += n
	s.mu.Unlock()
	return nil
}

// startSegment creates the segment file whose first record is seq, after
// making sure the one before it is whole on disk.
func (s *Spool) startSegment(seq uint64) (*segment, error) {
	if len(s.segs) > 0 {
		if err := s.segs[len(s.segs)-1].f.Sync(); err != nil {
			s.broken = err
			return nil, fmt.Errorf("spool: sync segment: %w", err)
		}
	}
	path := filepath.Join(s.dir, segmentName(seq))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: new segment: %w", err)
	}
	return &segment{first: seq, path: path, f: f}, nil
}

// write writes s.wbuf at the end of seg and syncs it. On failure it undoes
// what it can: a fresh segment is removed, a partial record truncated away.
func (s *Spool) write(seg *segment, fresh bool) error {
	_, err := seg.f.WriteAt(s.wbuf, seg.size)
	if err == nil && !s.opts.NoSync {
		if err = seg.f.Sync(); err == nil && fresh {
			err = s.syncDir()
		}
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("spool: write %s: %w", seg.path, err)
	if fresh {
		seg.f.Close()
		if rmErr := os.Remove(seg.path); rmErr != nil {
			s.broken = err
		}
		return err
	}
	// The record may be partly or wholly on disk, and after a failed fsync
	// the kernel may have dropped pages it reported as written, so the
	// file is not trusted again until Open has checked it.
	seg.f.Truncate(seg.size)
	s.broken = err
	return err
}

// Last returns the sequence number of the last record appended, or found by
// Open, even if it has been trimmed; 0 if the spool has none.
func (s *Spool) Last() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.last
}

// First returns the lowest sequence number Get can return, 0 if there is
// none.
func (s *Spool) First() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.index) == 0 {
		return 0
	}
	return s.index[0].seq
}

// Size returns the bytes the segment files take, trimmed records of the
// segment being written to included.
func (s *Spool) Size() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.size
}

// find returns the position in s.index of the first record with a sequence
// number of at least seq. The caller holds mu.
func (s *Spool) find(seq uint64) int {
	i, _ := slices.BinarySearchFunc(s.index, seq, func(e entry, seq uint64) int {
		switch {
		case e.seq < seq:
			return -1
		case e.seq > seq:
			return 1
		}
		return 0
	})
	return i
}

// Get returns the payload of record seq, read from disk and checked again;
// the caller owns it. It returns ErrNotFound if seq was never appended or
// has been trimmed, and a *CorruptError if the record no longer checks out.
func (s *Spool) Get(seq uint64) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	i := s.find(seq)
	if i == len(s.index) || s.index[i].seq != seq {
		return nil, fmt.Errorf("spool: seq %d: %w", seq, ErrNotFound)
	}
	return s.index[i].read()
}

// Scan calls fn for each record with a sequence number of at least from, in
// order, up to the last record appended when Scan began. Records appended
// while it runs are not visited, and records trimmed while it runs are
// skipped. fn owns the payload it is given and may call any method of the
// Spool. Scan holds no lock while fn runs, so a slow fn delays
// neither Append nor readers. It stops at the first error fn returns, and
// returns that error as it is.
func (s *Spool) Scan(from uint64, fn func(seq uint64, payload []byte) error) error {
	s.mu.RLock()
	end := s.last
	s.mu.RUnlock()
	for next := from; ; {
		s.mu.RLock()
		if s.closed {
			s.mu.RUnlock()
			return ErrClosed
		}
		i := s.find(next)
		if i == len(s.index) || s.index[i].seq > end {
			s.mu.RUnlock()
			return nil
		}
		e := s.index[i]
		payload, err := e.read()
		s.mu.RUnlock()
		if err != nil {
			return err
		}
		if err := fn(e.seq, payload); err != nil {
			return err
		}
		if e.seq == end {
			return nil
		}
		next = e.seq + 1
	}
}

// Trim drops every record with a sequence number of at most upTo: Get no
// longer finds them and Scan skips them. It removes each segment file whose
// records are all dropped, but never the one being written to; see the
// package comment for why, and for what a restart brings back.
func (s *Spool) Trim(upTo uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return ErrClosed
	}
	upTo = min(upTo, s.last)
	// Files are removed before the segments are detached: readers may
	// still be reading them, which an open file allows.
	var removed int
	var err error
	for _, seg := range s.segs[:max(len(s.segs)-1, 0)] {
		if seg.last > upTo {
			break
		}
		if err = os.Remove(seg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("spool: trim: %w", err)
			break
		}
		err = nil
		removed++
	}

	s.mu.Lock()
	gone := s.segs[:removed]
	s.segs = slices.Clone(s.segs[removed:])
	for _, seg := range gone {
		s.size -= seg.size
	}
	s.index = s.index[s.find(upTo+1):]
	if upTo == ^uint64(0) {
		s.index = nil
	}
	s.mu.Unlock()

	for _, seg := range gone {
		seg.f.Close()
	}
	if removed > 0 {
		if serr := s.syncDir(); err == nil {
			err = serr
		}
	}
	return err
}

// Close closes the files and releases the directory. Calls after Close
// return ErrClosed; Close itself may be called more than once.
func (s *Spool) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, seg := range s.segs {
		errs = append(errs, seg.f.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close())
	}
	s.segs, s.index = nil, nil
	return errors.Join(errs...)
}
