// Package ship sends a gateway node's spooled usage windows on to the
// quota service: each window of the spool (package spool) as one message,
// keyed by the node's id, through a Sender (package kafka in production).
//
// # Lifecycle
//
//  1. New takes the spool the recorder appends to and the Sender.
//  2. Run, on a goroutine of its owner's, ships every window of the spool
//     from spool.First(), in sequence order, then each window as it is
//     spooled (Options.Windows or Notify wake it). Trim, Resend and
//     Notify may be called from any goroutine, before or during Run; they
//     never block: Run does the work.
//  3. Run returns when its context is done. Stop it before the spool is
//     closed (the recorder's Close).
//
// # Delivery
//
// Delivery is at least once. A Send that fails is retried, the same
// windows in the same order, with backoff growing from Options.MinBackoff
// to Options.MaxBackoff, for as long as it fails: while Kafka is down
// the spool grows and nothing else waits (requests are counted into the
// window file, the recorder appends to the spool, and the stream and the
// fast lane go on). A Send that failed may have delivered some of its
// messages, and a node that restarts ships again from spool.First():
// every window the quota service has not yet marked committed (the marks
// the fast lane brings, Trim) is sent again. Such duplicates are
// absorbed by the quota service, which applies each (node, spool, seq,
// part) once, in the same transaction that adds it to the totals. The
// sender has no idempotent producer to lean on (kafka-go has none).
//
// Order: the windows of one spool are sent in sequence order, each Send
// after the previous one succeeded, under the node's id as key, so a
// Sender that maps keys to partitions (kafka.Hash) keeps them in order on
// one partition. A retry and a re-send (Resend) repeat earlier windows.
//
// # Parts
//
// A window whose encoding is larger than Options.MaxMessageBytes (900
// KiB, under Kafka's default limit of 1 MiB per message) is sent as
// several messages, its parts: each carries the window's node, spool,
// seq, times, period and counters (Counted, Billable and the period
// counters, of the whole window) and a share of its rows and latency
// rows, with Part (from 0) and Parts set, and is under the bound. The
// quota service adds up the rows of the parts, checks them against the
// counters once every part is in, and deduplicates on (node, spool, seq,
// part). A single row larger than the bound cannot happen (a row is a
// few hundred bytes at most); were one to, it would go alone in its part,
// which the sender might then refuse.
package ship

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/usage/spool"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/internal/backoff"
)

// Message is one message for the usage topic.
type Message struct {
	// Key is the node's id: the partition key.
	Key []byte
	// Value is a marshalled quotav1.UsageWindow.
	Value []byte
}

// Sender sends messages to the usage topic. Send returns nil only once
// every message is stored (Kafka: acknowledged by every in-sync
// replica); on error any of them may or may not have been, and the
// shipper sends them all again. Send must keep the order of msgs among
// messages of one key, and must return when ctx is done. It is called
// from one goroutine at a time; it must not keep msgs after it returns.
type Sender interface {
	Send(ctx context.Context, msgs []Message) error
}

// SenderFunc is a Sender of a function: an in-process delivery (portico
// dev) or a test's.
type SenderFunc func(ctx context.Context, msgs []Message) error

// Send calls f.
func (f SenderFunc) Send(ctx context.Context, msgs []Message) error { return f(ctx, msgs) }

// Defaults of Options.
const (
	DefaultMaxMessageBytes = 900 << 10
	DefaultMinBackoff      = 200 * time.Millisecond
	DefaultMaxBackoff      = 10 * time.Second
	DefaultBatch           = 16
)

// batchBytes bounds the payload of one Send, beside Options.Batch: a
// Send is never larger than this or a single window.
const batchBytes = 8 << 20

// Options configure a Shipper.
type Options struct {
	// Spool is the spool the recorder appends windows to. Required.
	Spool *spool.Spool
	// Sender sends the messages. Required.
	Sender Sender
	// NodeID and SpoolID are the node's and its spool's: the key of
	// every message, and the usage marks Trim heeds. Required.
	NodeID, SpoolID string
	// Windows, if set, wakes Run whenever a window has been spooled (the
	// recorder's Windows()); Notify does the same.
	Windows <-chan struct{}
	// Logger receives the shipper's logs; nil means slog.Default().
	Logger *slog.Logger
	// MaxMessageBytes bounds a message's value: a larger window is sent
	// in parts. Zero means DefaultMaxMessageBytes.
	MaxMessageBytes int
	// MinBackoff and MaxBackoff bound the waits between the retries of a
	// Send that failed. Zero means DefaultMinBackoff, DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Batch is the most windows one Send carries. Zero means
	// DefaultBatch.
	Batch int
	// From is the first seq to ship; zero means the spool's first. A
	// node that kept its last usage mark starts after it.
	From uint64
	// OnTrim, if set, is called after the spool is trimmed at a usage
	// mark, with the mark's seq, on the goroutine of Run (or Flush): the
	// node records the mark (usage.Recorder.SaveMark) so that its next
	// start neither keeps nor ships what the quota service committed. It
	// may write a file; it must not wait for anything else.
	OnTrim func(seq uint64)
}

// Stats are a shipper's counters.
type Stats struct {
	// Shipped counts the windows sent (whole: every part), Messages the
	// messages, Resent the windows sent again because Resend asked.
	Shipped, Messages, Resent uint64
	// Next is the seq of the next window to ship; Pending how many
	// spooled windows wait for it (spool.Last() - Next + 1, or 0).
	Next, Pending uint64
	// Trimmed is the highest usage mark applied: the spool is trimmed at
	// or below it.
	Trimmed uint64
	// Failures counts the Sends that failed; LastError is the last one's
	// error ("" once a Send succeeded after it).
	Failures  uint64
	LastError string
	// Skipped counts spool records that could not be shipped at all: they
	// no longer read back (corrupt) or do not decode as a window.
	Skipped uint64
}

// Shipper ships a spool's windows. Its methods are safe for concurrent
// use.
type Shipper struct {
	opts Options
	sp   *spool.Spool
	log  *slog.Logger
	key  []byte
	wake chan struct{}

	// mu guards what the callers of Trim and Resend hand to Run.
	mu      sync.Mutex
	mark    uint64     // the highest mark of Trim, not yet applied
	resends []seqRange // asked for by Resend, not yet sent

	next                      atomic.Uint64
	trimmed                   atomic.Uint64
	shipped, messages, resent atomic.Uint64
	failures, skipped         atomic.Uint64
	lastErr                   atomic.Pointer[string]
	running                   atomic.Bool
}

// seqRange is a Resend's range, inclusive.
type seqRange struct{ from, to uint64 }

// New returns a Shipper of opts.Spool; it does no I/O.
func New(opts Options) (*Shipper, error) {
	switch {
	case opts.Spool == nil:
		return nil, errors.New("ship: no spool")
	case opts.Sender == nil:
		return nil, errors.New("ship: no sender")
	case opts.NodeID == "" || opts.SpoolID == "":
		return nil, errors.New("ship: a node id and a spool id are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	s := &Shipper{
		opts: opts, sp: opts.Spool, key: []byte(opts.NodeID),
		log:  opts.Logger.With("spool", opts.SpoolID),
		wake: make(chan struct{}, 1),
	}
	first := s.sp.First()
	if first == 0 {
		first = s.sp.Last() + 1
	}
	s.next.Store(max(first, opts.From))
	return s, nil
}

// Notify tells Run a window was spooled. It never blocks.
func (s *Shipper) Notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Trim takes a usage mark from the fast lane: if it is the node's own
// (its node id and spool id), the quota service has committed every
// window up to mark.Seq, so Run trims the spool there and ships nothing
// at or below it any more (unless Resend asks). Marks of other nodes or
// of an earlier spool are ignored, and so is a mark above the spool's
// last window. It never blocks and does not keep mark.
func (s *Shipper) Trim(mark *configv1.UsageMark) {
	if mark.GetNodeId() != s.opts.NodeID || mark.GetSpoolId() != s.opts.SpoolID || mark.GetSeq() == 0 {
		return
	}
	if last := s.sp.Last(); mark.GetSeq() > last {
		// The quota service cannot have committed a window the spool
		// never held: a mark above it is forged or of another history of
		// the spool, and trusting it would skip windows never shipped.
		s.log.Warn("usage: ignoring a usage mark above the spool's last window", "mark", mark.GetSeq(), "last", last)
		return
	}
	s.mu.Lock()
	s.mark = max(s.mark, mark.GetSeq())
	s.mu.Unlock()
	s.Notify()
}

// Resend asks for the windows from to to (inclusive) to be shipped again,
// those still in the spool: a window already trimmed is logged and
// skipped (the quota service had committed it). Windows not yet shipped
// are left to the normal course. It never blocks.
func (s *Shipper) Resend(from, to uint64) {
	if from == 0 {
		from = 1
	}
	if to = min(to, s.sp.Last()); to < from {
		return // nothing spooled to send
	}
	s.mu.Lock()
	defer s.Notify()
	defer s.mu.Unlock()
	for _, r := range s.resends {
		if r.from <= from && to <= r.to {
			return // asked for already, not yet sent
		}
	}
	if n := len(s.resends); n >= maxResends {
		// However often a caller asks, the queue stays bounded: the last
		// range grows to cover the new one (a window sent once more than
		// asked is a duplicate, which the quota service absorbs).
		s.resends[n-1] = seqRange{min(s.resends[n-1].from, from), max(s.resends[n-1].to, to)}
		return
	}
	s.resends = append(s.resends, seqRange{from, to})
}

// maxResends bounds the ranges Resend queues.
const maxResends = 64

// Stats returns the shipper's counters.
func (s *Shipper) Stats() Stats {
	st := Stats{
		Shipped: s.shipped.Load(), Messages: s.messages.Load(), Resent: s.resent.Load(),
		Next: s.next.Load(), Trimmed: s.trimmed.Load(),
		Failures: s.failures.Load(), Skipped: s.skipped.Load(),
	}
	if last := s.sp.Last(); last >= st.Next {
		st.Pending = last - st.Next + 1
	}
	if e := s.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	return st
}

// Run ships until ctx is done, then returns nil; it returns an error only
// if it is called while another Run runs, or the spool was closed.
func (s *Shipper) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("ship: Run called twice at once")
	}
	defer s.running.Store(false)
	bo := backoff.Backoff{Min: s.opts.MinBackoff, Max: s.opts.MaxBackoff}
	timer := time.NewTimer(0)
	if !timer.Stop() {
		<-timer.C
	}
	defer timer.Stop()
	var retry <-chan time.Time // set while backing off
	failing := false           // since the last Send that succeeded
	for {
		s.applyTrim()
		if retry == nil {
			more, err := s.shipBatch(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, spool.ErrClosed):
				return fmt.Errorf("ship: %w", err)
			case err != nil:
				s.failures.Add(1)
				msg := err.Error()
				s.lastErr.Store(&msg)
				// The first failure of a run of them is logged, the rest
				// are in Stats.
				if !failing {
					s.log.Warn("usage: shipping windows failed, retrying; they wait in the spool", "err", err, "next_seq", s.next.Load())
					failing = true
				}
				timer.Reset(bo.Next())
				retry = timer.C
			default:
				if failing {
					s.log.Info("usage: shipping windows again", "failures", s.failures.Load())
					s.lastErr.Store(nil)
					failing = false
				}
				bo.Reset()
				if more {
					continue
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-s.opts.Windows:
		case <-retry:
			retry = nil
		}
	}
}

// applyTrim trims the spool at the highest mark Trim was given.
func (s *Shipper) applyTrim() {
	s.mu.Lock()
	mark := s.mark
	s.mu.Unlock()
	if mark <= s.trimmed.Load() {
		return
	}
	if err := s.sp.Trim(mark); err != nil {
		// The records are dropped from the index even when a file could
		// not be removed; the next Trim removes it.
		s.log.Warn("usage: trimming the spool", "mark", mark, "err", err)
	}
	s.trimmed.Store(mark)
	if s.next.Load() <= mark {
		s.next.Store(mark + 1)
	}
	if s.opts.OnTrim != nil {
		s.opts.OnTrim(mark)
	}
}

// shipBatch sends the next batch: windows not yet shipped, else windows
// Resend asked for. more says there may be more to send at once.
func (s *Shipper) shipBatch(ctx context.Context) (more bool, err error) {
	next, last := s.next.Load(), s.sp.Last()
	if next <= last {
		return true, s.shipNext(ctx, next, last)
	}
	s.mu.Lock()
	if len(s.resends) == 0 {
		s.mu.Unlock()
		return false, nil
	}
	r := s.resends[0]
	s.mu.Unlock()
	// Windows from next on are shipped in the normal course.
	to := min(r.to, next-1)
	recs, after := []record(nil), to+1
	if r.from <= to {
		if first := s.sp.First(); first == 0 || first > r.from {
			upTo := to
			if first != 0 {
				upTo = min(to, first-1)
			}
			s.log.Info("usage: re-send asked for windows already trimmed, skipping them",
				"from", r.from, "to", upTo, "trimmed", s.trimmed.Load())
		}
		if recs, after, err = s.collect(r.from, to); err != nil {
			return false, err
		}
		if err := s.send(ctx, recs); err != nil {
			return false, err
		}
		s.resent.Add(uint64(len(recs)))
	}
	s.mu.Lock()
	if after > to {
		s.resends = slices.Delete(s.resends, 0, 1)
	} else {
		s.resends[0].from = after
	}
	more = len(s.resends) > 0
	s.mu.Unlock()
	return more, nil
}

// shipNext sends the next batch of the windows not yet shipped, from
// next up to last.
func (s *Shipper) shipNext(ctx context.Context, next, last uint64) error {
	recs, after, err := s.collect(next, last)
	if err != nil {
		return err
	}
	if err := s.send(ctx, recs); err != nil {
		return err
	}
	s.next.Store(after)
	s.shipped.Add(uint64(len(recs)))
	return nil
}

// Flush ships every spooled window not yet shipped, up to the spool's
// last when it is called, retrying as Run does, and returns nil once
// they are all shipped, or an error once ctx is done first. It leaves
// Resend's requests to Run. It must not run beside Run: it is for a
// node that stops, once its last window is spooled.
func (s *Shipper) Flush(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("ship: Flush called while Run or Flush runs")
	}
	defer s.running.Store(false)
	bo := backoff.Backoff{Min: s.opts.MinBackoff, Max: s.opts.MaxBackoff}
	timer := time.NewTimer(0)
	if !timer.Stop() {
		<-timer.C
	}
	defer timer.Stop()
	last := s.sp.Last()
	for {
		s.applyTrim()
		next := s.next.Load()
		if next > last {
			return nil
		}
		err := s.shipNext(ctx, next, last)
		switch {
		case err == nil:
			bo.Reset()
			continue
		case ctx.Err() != nil || errors.Is(err, spool.ErrClosed):
			return fmt.Errorf("ship: windows %d to %d not shipped: %w", next, last, err)
		}
		s.failures.Add(1)
		msg := err.Error()
		s.lastErr.Store(&msg)
		timer.Reset(bo.Next())
		select {
		case <-ctx.Done():
			return fmt.Errorf("ship: windows %d to %d not shipped: %w", s.next.Load(), last, err)
		case <-timer.C:
		}
	}
}

// record is one spooled window.
type record struct {
	seq     uint64
	payload []byte
}

// collect reads up to a batch of records from seq from to to, skipping
// those no longer in the spool, and returns the seq after the last it
// read (to+1 once it went through).
func (s *Shipper) collect(from, to uint64) (recs []record, after uint64, err error) {
	seq, size := from, 0
	for seq <= to && len(recs) < s.opts.Batch && (size < batchBytes || len(recs) == 0) {
		p, err := s.sp.Get(seq)
		var corrupt *spool.CorruptError
		switch {
		case err == nil:
			recs = append(recs, record{seq, p})
			size += len(p)
			seq++
		case errors.Is(err, spool.ErrNotFound):
			// Trimmed (or never appended, a hole): go on from the first
			// record the spool holds.
			first := s.sp.First()
			if first == 0 || first > to {
				return recs, to + 1, nil
			}
			seq = max(seq+1, first)
		case errors.As(err, &corrupt):
			s.skipped.Add(1)
			s.log.Error("usage: a spooled window no longer reads back; it cannot be shipped", "seq", seq, "err", err)
			seq++
		default:
			return nil, from, err
		}
	}
	return recs, seq, nil
}

// send sends recs as messages, a window too large in parts.
func (s *Shipper) send(ctx context.Context, recs []record) error {
	if len(recs) == 0 {
		return nil
	}
	msgs := make([]Message, 0, len(recs))
	for _, r := range recs {
		if len(r.payload) <= s.opts.MaxMessageBytes {
			msgs = append(msgs, Message{Key: s.key, Value: r.payload})
			continue
		}
		parts, err := Split(r.payload, s.opts.MaxMessageBytes)
		if err != nil {
			s.skipped.Add(1)
			s.log.Error("usage: a spooled window does not decode; it cannot be shipped", "seq", r.seq, "err", err)
			continue
		}
		for _, p := range parts {
			msgs = append(msgs, Message{Key: s.key, Value: p})
		}
	}
	if err := s.opts.Sender.Send(ctx, msgs); err != nil {
		return err
	}
	s.messages.Add(uint64(len(msgs)))
	return nil
}

// Split divides the marshalled window payload into parts of at most
// maxBytes each (see the package comment), marshalled. A window that
// fits is one part, payload itself.
func Split(payload []byte, maxBytes int) ([][]byte, error) {
	if len(payload) <= maxBytes {
		return [][]byte{payload}, nil
	}
	w := &quotav1.UsageWindow{}
	if err := proto.Unmarshal(payload, w); err != nil {
		return nil, err
	}
	rows, lats := w.Rows, w.Latencies
	w.Rows, w.Latencies = nil, nil
	w.Part, w.Parts = 0, 0
	// Part and Parts take at most 6 bytes each (a tag, a varint).
	budget := maxBytes - proto.Size(w) - 12
	if budget <= 0 {
		return nil, fmt.Errorf("window %d: its header alone takes over %d bytes", w.Seq, maxBytes)
	}
	type share struct {
		rows []*quotav1.UsageRow
		lats []*quotav1.LatencyRow
	}
	shares := []share{{}}
	size := 0
	room := func(n int) *share {
		// A field of the window: a one-byte tag, the length, the row.
		n += 1 + protowire.SizeVarint(uint64(n))
		sh := &shares[len(shares)-1]
		if size+n > budget && (len(sh.rows) > 0 || len(sh.lats) > 0) {
			shares = append(shares, share{})
			sh, size = &shares[len(shares)-1], 0
		}
		size += n
		return sh
	}
	for _, r := range rows {
		sh := room(proto.Size(r))
		sh.rows = append(sh.rows, r)
	}
	for _, l := range lats {
		sh := room(proto.Size(l))
		sh.lats = append(sh.lats, l)
	}
	out := make([][]byte, len(shares))
	for i, sh := range shares {
		w.Rows, w.Latencies = sh.rows, sh.lats
		w.Part, w.Parts = uint32(i), uint32(len(shares))
		b, err := proto.Marshal(w)
		if err != nil {
			return nil, fmt.Errorf("window %d part %d: %w", w.Seq, i, err)
		}
		out[i] = b
	}
	return out, nil
}
