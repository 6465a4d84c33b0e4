// Package consume takes the nodes' usage windows off the usage topic and
// applies them to the quota store, at least once each: the store's
// (node, spool, seq, part) check turns a second delivery into a no-op,
// so at least once is exactly once in the totals.
//
// Consumer reads the topic as a member of a Kafka consumer group
// (kafka-go; this package is the only importer of it under quota/). For
// each message, in partition order, it
//
//  1. decodes a quotav1.UsageWindow and validates it (protovalidate);
//  2. applies it (Store.Apply), retrying with backoff while the store
//     fails for a reason that may pass (the database is down);
//  3. commits the message's offset, synchronously, and only then fetches
//     on past it.
//
// A crash between 2 and 3 delivers the message again after the restart
// (or to the group member that takes its partition over), and the store
// absorbs it. A message that does not decode or validate, or that the
// store refuses as malformed (store.ErrInvalid), can never be applied:
// it is logged (what identifies it, never its payload), counted in Stats
// and committed, so that it does not hold up its partition.
//
// Local runs the same steps for one message handed to it in-process
// (portico dev, where no Kafka runs): the node's sender calls Deliver.
package consume

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/internal/backoff"
	"github.com/portico-gw/portico/quota/store"
)

// The defaults of Options.
const (
	DefaultTopic = "portico.usage"
	DefaultGroup = "portico-quota"
)

// Store is what the consumer needs of the quota store (*store.Store).
type Store interface {
	Apply(ctx context.Context, w *quotav1.UsageWindow) (store.Applied, error)
}

// Options configure a Consumer (all fields) or a Local (Store, Drop,
// OnApply, Logger).
type Options struct {
	// Brokers are the Kafka bootstrap addresses (host:port); required for
	// a Consumer.
	Brokers []string
	// Topic is the usage topic; empty means DefaultTopic.
	Topic string
	// Group is the consumer group; empty means DefaultGroup. Every quota
	// service process on one store consumes in one group.
	Group string
	// Store is where windows are applied; required.
	Store Store
	// Drop, when set, is asked about every valid window before it is
	// applied: true skips it, committed as if applied and counted as
	// Dropped. It is a fault hook for tests (a window lost by the
	// consumer, which the reconciler must recover by a re-send).
	Drop func(*quotav1.UsageWindow) bool
	// OnApply, when set, is called after each window the store took,
	// duplicates included, with what the store did (e.g. to publish a
	// risen mark at once). It must not block.
	OnApply func(*quotav1.UsageWindow, store.Applied)
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// MaxBytes bounds one fetch from a partition; zero means 16 MiB
	// (a window part is at most about 1 MB).
	MaxBytes int
	// MaxWait bounds how long the broker holds a fetch for data; zero
	// means 250 ms.
	MaxWait time.Duration
	// RetryMin and RetryMax bound the waits between tries of a window the
	// store could not apply; zero means 100 ms and 10 s.
	RetryMin, RetryMax time.Duration
}

// Stats count what happened to the messages taken. Applied counts the
// windows (parts) the store added to the totals; Late those of them that
// belonged to a final period (booked into the next open one); Duplicates
// the windows the store had already; Invalid the messages that were
// committed without being applied because they cannot be (undecodable,
// invalid, refused by the store); Dropped the windows Options.Drop
// skipped; Retries the failed tries of windows applied later.
type Stats struct {
	Applied, Late, Duplicates, Invalid, Dropped, Retries uint64
}

// applier is the path a message takes, Kafka's or Local's: decode,
// validate, apply.
type applier struct {
	opts Options
	log  *slog.Logger

	applied, late, duplicates, invalid, dropped, retries atomic.Uint64
}

func newApplier(opts Options) (*applier, error) {
	if opts.Store == nil {
		return nil, errors.New("consume: a store is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = 100 * time.Millisecond
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(10*time.Second, opts.RetryMin)
	}
	return &applier{opts: opts, log: opts.Logger}, nil
}

func (a *applier) stats() Stats {
	return Stats{
		Applied: a.applied.Load(), Late: a.late.Load(), Duplicates: a.duplicates.Load(),
		Invalid: a.invalid.Load(), Dropped: a.dropped.Load(), Retries: a.retries.Load(),
	}
}

// process takes one message's value. It returns nil when the message is
// done with (applied, a duplicate, dropped, or invalid and logged), and
// otherwise the store's error, which may pass: the message must be
// tried again, not committed. where names the message for the log.
func (a *applier) process(ctx context.Context, value []byte, where []any) error {
	w := new(quotav1.UsageWindow)
	if err := proto.Unmarshal(value, w); err != nil {
		a.refuse(ctx, "the message is no usage window", err, value, where)
		return nil
	}
	where = append(where, "node", w.GetNodeId(), "spool", w.GetSpoolId(), "seq", w.GetSeq(), "part", w.GetPart())
	if err := protovalidate.Validate(w); err != nil {
		a.refuse(ctx, "the usage window is invalid", err, value, where)
		return nil
	}
	if a.opts.Drop != nil && a.opts.Drop(w) {
		a.dropped.Add(1)
		a.log.WarnContext(ctx, "consume: dropped a usage window (fault hook)", where...)
		return nil
	}
	res, err := a.opts.Store.Apply(ctx, w)
	switch {
	case errors.Is(err, store.ErrInvalid):
		a.refuse(ctx, "the store refused the usage window", err, value, where)
		return nil
	case err != nil:
		return err
	}
	switch {
	case res.Duplicate:
		a.duplicates.Add(1)
	case res.LateInto != "":
		a.applied.Add(1)
		a.late.Add(1)
		a.log.InfoContext(ctx, "consume: a window of a final period was booked into the next open one",
			append(where, "period", w.GetPeriod(), "booked_into", res.LateInto)...)
	default:
		a.applied.Add(1)
	}
	if a.opts.OnApply != nil {
		a.opts.OnApply(w, res)
	}
	return nil
}

// apply is process, retried with backoff while the store fails, until
// ctx ends (its error then).
func (a *applier) apply(ctx context.Context, value []byte, where []any) error {
	retry := backoff.Backoff{Min: a.opts.RetryMin, Max: a.opts.RetryMax}
	for {
		err := a.process(ctx, value, where)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.retries.Add(1)
		wait := retry.Next()
		a.log.WarnContext(ctx, "consume: the store could not apply a usage window; retrying", append(where, "err", err, "within", wait)...)
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// refuse logs and counts a message that cannot be applied. The log says
// what identifies it and how long it is, and shows at most its first
// bytes: a payload is a window's callers, not for the log.
func (a *applier) refuse(ctx context.Context, msg string, err error, value []byte, where []any) {
	a.invalid.Add(1)
	head := value[:min(len(value), 16)]
	a.log.ErrorContext(ctx, "consume: "+msg+"; skipped", append(where, "err", err, "bytes", len(value), "head", hex.EncodeToString(head))...)
}

// Local applies windows handed over in-process, as a Consumer applies
// the topic's: for `portico dev`, where the node's sender calls Deliver
// instead of producing to Kafka. It is safe for concurrent use.
type Local struct{ a *applier }

// NewLocal returns a Local over opts.Store; the Kafka fields of opts are
// not used.
func NewLocal(opts Options) (*Local, error) {
	a, err := newApplier(opts)
	if err != nil {
		return nil, err
	}
	return &Local{a: a}, nil
}

// Deliver decodes, validates and applies one message's value, once,
// before it returns. It returns nil when the message is done with
// (applied, a duplicate, dropped, or invalid: logged, counted and
// skipped, since sending it again could not mend it) and an error when
// the store failed: the caller keeps the window and sends it again, as
// it would after a failed produce.
func (l *Local) Deliver(ctx context.Context, value []byte) error {
	if err := l.a.process(ctx, value, []any{"from", "local"}); err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	return nil
}

// Stats returns what Deliver did so far.
func (l *Local) Stats() Stats { return l.a.stats() }

// Ready returns nil: a Local applies each window before Deliver returns,
// so nothing ever waits for it (Consumer.Ready).
func (l *Local) Ready(context.Context) error { return nil }
