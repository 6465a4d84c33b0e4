package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/usage/kafka"
	"github.com/portico-gw/portico/gateway/usage/ship"
	"github.com/portico-gw/portico/gateway/usage/spool"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/testing/kafkatest"
)

const spoolID = "0123456789abcdef0123456789abcdef"

func newSender(t *testing.T, c *kafkatest.Cluster) *kafka.Sender {
	t.Helper()
	s, err := kafka.New(kafka.Options{Brokers: c.Addrs(), WriteTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// readAll reads every message of the topic, per partition, in offset
// order.
func readAll(t *testing.T, c *kafkatest.Cluster) map[int][]kafkago.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	parts, err := kafkago.DefaultDialer.LookupPartitions(ctx, "tcp", c.Addrs()[0], kafka.DefaultTopic)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int][]kafkago.Message{}
	for _, p := range parts {
		conn, err := kafkago.DialLeader(ctx, "tcp", c.Addrs()[0], kafka.DefaultTopic, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		last, err := conn.ReadLastOffset()
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if last == 0 {
			continue
		}
		r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: c.Addrs(), Topic: kafka.DefaultTopic, Partition: p.ID,
			MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 50 * time.Millisecond})
		for int64(len(got[p.ID])) < last {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				t.Fatalf("partition %d: ReadMessage: %v", p.ID, err)
			}
			got[p.ID] = append(got[p.ID], m)
		}
		r.Close()
	}
	return got
}

func windowBytes(t *testing.T, node string, seq uint64) []byte {
	t.Helper()
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	b, err := proto.Marshal(&quotav1.UsageWindow{NodeId: node, SpoolId: spoolID, Seq: seq, Parts: 1, Period: "2026-12",
		Start: timestamppb.New(start), End: timestamppb.New(start.Add(10 * time.Second))})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode(t *testing.T, m kafkago.Message) *quotav1.UsageWindow {
	t.Helper()
	w := &quotav1.UsageWindow{}
	if err := proto.Unmarshal(m.Value, w); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestPerNodeOrder: each node's messages land on one partition, keyed by
// the node, in the order they were sent.
func TestPerNodeOrder(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, 4, kafka.DefaultTopic)
	s := newSender(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes := []string{"node-a", "node-b", "node-c", "node-d", "node-e"}
	for round := range 4 {
		var msgs []ship.Message
		for seq := uint64(round*5 + 1); seq <= uint64(round*5+5); seq++ {
			for _, n := range nodes {
				msgs = append(msgs, ship.Message{Key: []byte(n), Value: windowBytes(t, n, seq)})
			}
		}
		if err := s.Send(ctx, msgs); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	where := map[string]int{}
	order := map[string][]uint64{}
	for p, ms := range readAll(t, c) {
		for _, m := range ms {
			w := decode(t, m)
			if string(m.Key) != w.GetNodeId() {
				t.Errorf("a window of %s keyed %q", w.GetNodeId(), m.Key)
			}
			if q, ok := where[w.GetNodeId()]; ok && q != p {
				t.Errorf("%s's windows on partitions %d and %d", w.GetNodeId(), q, p)
			}
			where[w.GetNodeId()] = p
			order[w.GetNodeId()] = append(order[w.GetNodeId()], w.GetSeq())
		}
	}
	want := make([]uint64, 20)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	for _, n := range nodes {
		if !slices.Equal(order[n], want) {
			t.Errorf("%s's windows read %v, want %v", n, order[n], want)
		}
	}
	if parts := len(slices.Compact(slices.Sorted(func(yield func(int) bool) {
		for _, p := range where {
			yield(p)
		}
	}))); parts < 2 {
		t.Logf("all %d nodes hashed to one partition", len(nodes))
	}
}

// TestDown: while Kafka is unreachable, Send fails and the shipper keeps
// the windows in the spool; once it is back they are all shipped.
func TestDown(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, 2, kafka.DefaultTopic)
	sender := newSender(t, c)
	sp, err := spool.Open(t.TempDir(), spool.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	const node = "node-1"
	appendSeq := func(seq uint64) {
		if err := sp.Append(seq, windowBytes(t, node, seq)); err != nil {
			t.Fatal(err)
		}
	}
	appendSeq(1)

	sh, err := ship.New(ship.Options{Spool: sp, Sender: sender, NodeID: node, SpoolID: spoolID,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sh.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitFor(t, "window 1", func() bool { return sh.Stats().Shipped == 1 })

	c.SetDown(true)
	appendSeq(2)
	appendSeq(3)
	sh.Notify()
	waitFor(t, "a failed send", func() bool { return sh.Stats().Failures > 0 })
	if st := sh.Stats(); st.Shipped != 1 || st.Pending != 2 || st.LastError == "" {
		t.Errorf("Stats() while down = %+v, want Shipped 1, Pending 2, a LastError", st)
	}
	if sp.First() != 1 || sp.Last() != 3 {
		t.Errorf("spool holds %d to %d while down, want 1 to 3", sp.First(), sp.Last())
	}
	c.SetDown(false)
	waitFor(t, "windows 2 and 3", func() bool { return sh.Stats().Shipped == 3 })

	var seen []uint64
	for _, ms := range readAll(t, c) {
		for _, m := range ms {
			if s := decode(t, m).GetSeq(); !slices.Contains(seen, s) {
				seen = append(seen, s) // a retried send may have landed twice
			}
		}
	}
	if !slices.Equal(seen, []uint64{1, 2, 3}) {
		t.Errorf("read windows %v (first sightings), want 1, 2, 3", seen)
	}
}

// TestParts: a window over the message bound reaches the topic as parts
// of up to 900 KiB each, which Kafka's default 1 MiB limit takes.
func TestParts(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, 1, kafka.DefaultTopic)
	sender := newSender(t, c)
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	w := &quotav1.UsageWindow{NodeId: "node-1", SpoolId: spoolID, Seq: 1, Parts: 1, Period: "2026-12",
		Start: timestamppb.New(start), End: timestamppb.New(start.Add(10 * time.Second))}
	for i := range 12000 {
		w.Rows = append(w.Rows, &quotav1.UsageRow{Caller: &quotav1.Caller{KeyId: fmt.Sprintf("key-%06d-%0100d", i, 0)},
			Product: "p", RouteId: "r", StatusClass: 2, Counted: 1, Billable: 1})
		w.Counted++
		w.Billable++
	}
	b, err := proto.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := ship.Split(b, ship.DefaultMaxMessageBytes)
	if err != nil || len(parts) < 2 {
		t.Fatalf("Split of %d bytes = %d parts, %v; want 2 or more", len(b), len(parts), err)
	}
	msgs := make([]ship.Message, len(parts))
	for i, p := range parts {
		msgs[i] = ship.Message{Key: []byte("node-1"), Value: p}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sender.Send(ctx, msgs); err != nil {
		t.Fatalf("Send of %d parts of up to %d bytes: %v", len(parts), ship.DefaultMaxMessageBytes, err)
	}
	rows := 0
	for _, ms := range readAll(t, c) {
		for _, m := range ms {
			rows += len(decode(t, m).GetRows())
		}
	}
	if rows != 12000 {
		t.Errorf("the parts on the topic carry %d rows, want 12000", rows)
	}
}

func TestNewRequiresBrokers(t *testing.T) {
	t.Parallel()
	if _, err := kafka.New(kafka.Options{}); err == nil {
		t.Error("New without brokers: no error")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
