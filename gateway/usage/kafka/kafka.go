// Package kafka is the node's Kafka producer of usage windows: a
// ship.Sender on a kafka-go Writer. It is the only package under gateway/
// that imports kafka-go.
//
// Every message is written with RequiredAcks = all, so Send returns nil
// only once every in-sync replica has it, and partitioned by a hash of its
// key, the node's id, so that one node's windows are on one partition, in
// the order the shipper sends them. Send is synchronous: it returns when
// every message is acknowledged or one failed (then the shipper sends
// them all again: kafka-go has no idempotent producer, and the quota
// service absorbs the duplicates).
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/portico-gw/portico/gateway/usage/ship"
)

// DefaultTopic is the usage topic.
const DefaultTopic = "portico.usage"

// Options configure a Sender.
type Options struct {
	// Brokers are the bootstrap brokers (host:port). Required.
	Brokers []string
	// Topic is the usage topic; empty means DefaultTopic. It must exist:
	// the sender does not create it.
	Topic string
	// MaxAttempts is how many times the writer tries a batch before Send
	// fails (the shipper then retries with its own backoff). Zero means 3.
	MaxAttempts int
	// BatchTimeout is how long the writer waits for more messages before
	// it sends a batch that is not full. Zero means 5 ms: the shipper
	// hands over what it has at once, so waiting gains nothing.
	BatchTimeout time.Duration
	// WriteTimeout bounds one produce request. Zero means 10 s.
	WriteTimeout time.Duration
	// Logger receives the writer's errors; nil means slog.Default().
	Logger *slog.Logger
}

// Sender writes usage messages to Kafka. It is safe for concurrent use.
type Sender struct {
	w *kafkago.Writer
}

var _ ship.Sender = (*Sender)(nil)

// New returns a Sender to opts.Brokers; it connects on the first Send.
func New(opts Options) (*Sender, error) {
	if len(opts.Brokers) == 0 {
		return nil, errors.New("kafka: no brokers")
	}
	if opts.Topic == "" {
		opts.Topic = DefaultTopic
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 3
	}
	if opts.BatchTimeout <= 0 {
		opts.BatchTimeout = 5 * time.Millisecond
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger.With("topic", opts.Topic)
	return &Sender{w: &kafkago.Writer{
		Addr:         kafkago.TCP(opts.Brokers...),
		Topic:        opts.Topic,
		Balancer:     &kafkago.Hash{},
		RequiredAcks: kafkago.RequireAll,
		MaxAttempts:  opts.MaxAttempts,
		BatchTimeout: opts.BatchTimeout,
		// A message may be as large as ship's bound (900 KiB) plus its
		// key; Kafka's own default limit is 1 MiB.
		BatchBytes:   1 << 20,
		WriteTimeout: opts.WriteTimeout,
		Async:        false,
		ErrorLogger: kafkago.LoggerFunc(func(msg string, args ...any) {
			log.Debug("kafka: " + fmt.Sprintf(msg, args...))
		}),
	}}, nil
}

// Send writes msgs and returns once all are acknowledged, or the first
// error: then some may have been written.
func (s *Sender) Send(ctx context.Context, msgs []ship.Message) error {
	kms := make([]kafkago.Message, len(msgs))
	for i, m := range msgs {
		kms[i] = kafkago.Message{Key: m.Key, Value: m.Value}
	}
	if err := s.w.WriteMessages(ctx, kms...); err != nil {
		var werrs kafkago.WriteErrors
		if errors.As(err, &werrs) {
			// One error stands for the batch: the shipper sends it all
			// again.
			for _, e := range werrs {
				if e != nil {
					return fmt.Errorf("kafka: %d of %d messages not written: %w", werrs.Count(), len(msgs), e)
				}
			}
		}
		return fmt.Errorf("kafka: %w", err)
	}
	return nil
}

// Close flushes and closes the writer.
func (s *Sender) Close() error { return s.w.Close() }
