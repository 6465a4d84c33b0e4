package kafkatest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/portico-gw/portico/testing/kafkatest"
)

// TestProduceConsumeAndDown writes through kafka-go, reads it back in a
// consumer group, and checks that SetDown makes the broker unreachable
// and SetDown(false) reachable again, with the log intact.
func TestProduceConsumeAndDown(t *testing.T) {
	c := kafkatest.Start(t, 2, "usage")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	w := &kafka.Writer{Addr: kafka.TCP(c.Addrs()...), Topic: "usage", RequiredAcks: kafka.RequireAll,
		Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond, MaxAttempts: 1}
	t.Cleanup(func() { _ = w.Close() })
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("n1"), Value: []byte("one")}); err != nil {
		t.Fatalf("WriteMessages: %v", err)
	}

	c.SetDown(true)
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	err := w.WriteMessages(short, kafka.Message{Key: []byte("n1"), Value: []byte("lost?")})
	cancelShort()
	if err == nil {
		t.Fatalf("WriteMessages with the broker down = nil, want an error")
	}
	if c.Cuts() == 0 {
		t.Fatalf("Cuts() = 0 after a write with the broker down")
	}
	c.SetDown(false)
	for {
		err := w.WriteMessages(ctx, kafka.Message{Key: []byte("n1"), Value: []byte("two")})
		if err == nil {
			break
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WriteMessages after SetDown(false): %v", err)
		}
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: c.Addrs(), Topic: "usage", GroupID: "g",
		MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 100 * time.Millisecond, StartOffset: kafka.FirstOffset})
	t.Cleanup(func() { _ = r.Close() })
	var got []string
	for len(got) < 2 {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("FetchMessage: %v (got %q)", err, got)
		}
		if string(m.Value) != "lost?" {
			got = append(got, string(m.Value))
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatalf("CommitMessages: %v", err)
		}
	}
	if got[0] != "one" || got[1] != "two" {
		t.Fatalf("read %q, want [one two] in order (one key, one partition)", got)
	}
}
