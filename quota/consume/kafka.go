package consume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/portico-gw/portico/internal/backoff"
)

// Consumer applies the usage topic's windows as a member of a consumer
// group.
//
// Lifecycle: New joins nothing yet; Run fetches, applies and commits
// until its ctx ends or Close is called; Ready says when what waited on
// the topic is in; Close leaves the group (another member, or the next
// Consumer of the group, goes on from the last commit). Run is called at
// most once.
type Consumer struct {
	a     *applier
	r     *kafka.Reader
	ready readiness
	tr    *kafka.Transport // ready's

	mu     sync.Mutex
	closed bool
	stop   context.CancelFunc // Run's, once it runs
}

// New returns a Consumer of opts.Topic in opts.Group on opts.Brokers.
func New(opts Options) (*Consumer, error) {
	if len(opts.Brokers) == 0 {
		return nil, errors.New("consume: no Kafka brokers")
	}
	a, err := newApplier(opts)
	if err != nil {
		return nil, err
	}
	log := a.log
	topic, group := cmp.Or(opts.Topic, DefaultTopic), cmp.Or(opts.Group, DefaultGroup)
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:  opts.Brokers,
		Topic:    topic,
		GroupID:  group,
		MinBytes: 1,
		MaxBytes: cmp.Or(opts.MaxBytes, 16<<20),
		MaxWait:  cmp.Or(opts.MaxWait, 250*time.Millisecond),
		// The group's first member reads each partition from its start:
		// windows produced before the quota service ever ran count too.
		StartOffset: kafka.FirstOffset,
		// Synchronous commits: CommitMessages returns once the broker has
		// the offset, so a commit is never ahead of an Apply.
		CommitInterval:   0,
		JoinGroupBackoff: time.Second,
		// A member the broker lost (an outage, a crash) holds its
		// partitions until its session times out: 10 s rather than
		// kafka-go's 30 s, so that consuming resumes soon after Kafka is
		// back, with heartbeats every 3 s.
		SessionTimeout:   10 * time.Second,
		RebalanceTimeout: 10 * time.Second,
		ReadBackoffMin:   100 * time.Millisecond,
		ReadBackoffMax:   time.Second,
		Logger:           kafkaLogger(log, slog.LevelDebug),
		ErrorLogger:      errorLogger(log),
	})
	tr := &kafka.Transport{}
	c := &Consumer{a: a, r: r, tr: tr, ready: readiness{topic: topic, group: group,
		client: &kafka.Client{Addr: kafka.TCP(opts.Brokers...), Transport: tr, Timeout: 10 * time.Second}}}
	return c, nil
}

// kafkaLogger passes kafka-go's log lines to log at level.
func kafkaLogger(log *slog.Logger, level slog.Level) kafka.LoggerFunc {
	return func(msg string, args ...any) {
		log.Log(context.Background(), level, "kafka: "+fmt.Sprintf(msg, args...))
	}
}

// errorLogger passes kafka-go's error lines to log: one a minute as a
// warning, so that a broker that is away shows in the log without a line
// for every retry, and the rest at debug.
func errorLogger(log *slog.Logger) kafka.LoggerFunc {
	var last atomic.Int64 // unix nanos of the last warning
	return func(msg string, args ...any) {
		level := slog.LevelDebug
		now := time.Now().UnixNano()
		if l := last.Load(); now-l >= int64(time.Minute) && last.CompareAndSwap(l, now) {
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, "kafka: "+fmt.Sprintf(msg, args...))
	}
}

// Run consumes until ctx ends or the Consumer is closed, and returns nil
// then. A message is committed only after the store took it (or it was
// skipped as invalid), so stopping at any point loses nothing: what was
// not committed is delivered again.
func (c *Consumer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.stop = cancel
	c.mu.Unlock()
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		m, err := c.r.FetchMessage(ctx)
		switch {
		case ctx.Err() != nil || err != nil && c.isClosed():
			// The reader answers io.EOF once closed; but a connection
			// that ends mid-read while the broker is away is an io.EOF
			// too, and must not stop the consumer for good.
			return nil
		case err != nil:
			wait := retry.Next()
			c.a.log.WarnContext(ctx, "consume: fetching from the usage topic failed; retrying", "err", err, "within", wait)
			if !sleep(ctx, wait) {
				return nil
			}
			continue
		}
		retry.Reset()
		where := []any{"partition", m.Partition, "offset", m.Offset}
		if err := c.a.apply(ctx, m.Value, where); err != nil {
			return nil // ctx ended: the message is delivered again
		}
		if err := c.r.CommitMessages(ctx, m); err != nil {
			if ctx.Err() != nil || errors.Is(err, io.ErrClosedPipe) {
				return nil
			}
			// A later commit of the partition covers this one; if none
			// comes (a rebalance took the partition away), the message is
			// delivered again and the store absorbs it.
			c.a.log.WarnContext(ctx, "consume: committing an offset failed", append(where, "err", err)...)
		}
	}
}

// isClosed reports whether Close was called.
func (c *Consumer) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close stops Run (a window being applied is given up, uncommitted) and
// leaves the group.
func (c *Consumer) Close() error {
	c.mu.Lock()
	c.closed = true
	if c.stop != nil {
		c.stop()
	}
	c.mu.Unlock()
	err := c.r.Close()
	c.tr.CloseIdleConnections()
	return err
}

// Stats returns what the Consumer did so far.
func (c *Consumer) Stats() Stats { return c.a.stats() }

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
