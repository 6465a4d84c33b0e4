package quota_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/segmentio/kafka-go"

	"github.com/portico-gw/portico/control"
	cstore "github.com/portico-gw/portico/control/store"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/quota"
	"github.com/portico-gw/portico/quota/store"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/kafkatest"
)

// eventually waits until ok, or fails the test after a minute.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: timed out", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKafkaToUsage: windows produced to the usage topic, each twice,
// are consumed into the totals GetUsage answers.
func TestKafkaToUsage(t *testing.T) {
	t.Parallel()
	const topic = "usage-quota-test"
	c := kafkatest.Start(t, 2, topic)
	s := open(t, quota.Options{Brokers: c.Addrs(), Topic: topic, Group: "quota-test"})
	s.run(t)

	w := &kafka.Writer{Addr: kafka.TCP(c.Addrs()...), Topic: topic, RequiredAcks: kafka.RequireAll,
		Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond}
	t.Cleanup(func() { _ = w.Close() })
	start := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	var msgs []kafka.Message
	for _, node := range []string{"n1", "n2"} {
		for seq := uint64(1); seq <= 5; seq++ {
			m := kafka.Message{Key: []byte(node), Value: marshal(t, window(node, spoolA, seq, start.Add(time.Duration(seq)*10*time.Second), row(key1, "p", seq, seq)))}
			msgs = append(msgs, m, m)
		}
	}
	if err := w.WriteMessages(testCtx(t), msgs...); err != nil {
		t.Fatalf("WriteMessages: %v", err)
	}
	eventually(t, "every message consumed", func() bool { st := s.Stats(); return st.Applied+st.Duplicates >= 20 })
	if tot := usage(t, s.client, "key:k1", "p", "2026-11").GetTotals(); len(tot) != 1 || tot[0].GetCounted() != 30 {
		t.Errorf("GetUsage(key:k1) = %v, want 30 counted (2 nodes × 1+2+3+4+5)", tot)
	}
	if st := s.Stats(); st.Applied != 10 || st.Duplicates != 10 {
		t.Errorf("Stats() = %+v, want 10 applied, 10 duplicates", st)
	}
}

const publisherToken = "quota-test-publisher-token-0123456789abcdef"

// TestMarksOnTheFastLane runs the service against a real control plane:
// each spool's risen mark is published on its fast lane as source
// "quota", and the reconciler reaches the usage relay with the
// publisher token.
func TestMarksOnTheFastLane(t *testing.T) {
	t.Parallel()
	cst, err := cstore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cst.Close() })
	plane, err := control.New(context.Background(), control.Options{Store: cst, PublisherToken: publisherToken, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plane.Close)
	srv := httptest.NewUnstartedServer(plane.Handler)
	gatewaytest.StartH2C(t, srv)

	s := open(t, quota.Options{ControlURL: srv.URL, ControlToken: publisherToken})
	s.run(t)
	start := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	deliver(t, s.Service, withPeriodCounters(
		window("n1", spoolA, 1, start, row(key1, "p", 1, 1)),
		window("n1", spoolA, 2, start.Add(10*time.Second), row(key1, "p", 1, 1)),
		window("n2", spoolB, 1, start, row(key2, "p", 1, 1)),
		// Above a gap: the mark does not rise.
		window("n2", spoolB, 3, start.Add(20*time.Second), row(key2, "p", 1, 1)),
	)...)
	seq, err := s.Store().Seq(testCtx(t))
	if err != nil || seq != 3 {
		t.Fatalf("the store's outbox Seq() = %d, %v; want 3 (n1 to 1, to 2; n2 to 1)", seq, err)
	}
	lane := distributionv1connect.NewFastLaneServiceClient(gatewaytest.H2CClient(t), srv.URL, connect.WithInterceptors(svcauth.Interceptor(publisherToken)))
	eventually(t, "the marks on the fast lane", func() bool {
		resp, err := lane.Source(testCtx(t), connect.NewRequest(&distributionv1.SourceRequest{Source: "quota"}))
		return err == nil && resp.Msg.GetSeq() == seq
	})

	rec, err := s.client.Reconcile(testCtx(t), connect.NewRequest(&quotav1.ReconcileRequest{Period: "2026-11"}))
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	// n2's seq 2 is a gap; no node is connected to the relay, so it is
	// reported and not asked for.
	if gaps := rec.Msg.GetReport().GetGaps(); len(gaps) != 1 || gaps[0].GetNodeId() != "n2" || gaps[0].GetFromSeq() != 2 || gaps[0].GetRequested() {
		t.Errorf("Reconcile gaps = %v, want n2's seq 2, not requested", gaps)
	}
	// A close is blocked by the gap alone: the relay answered.
	rec, err = s.client.Reconcile(testCtx(t), connect.NewRequest(&quotav1.ReconcileRequest{Period: "2026-11", Finalise: true}))
	if err != nil {
		t.Fatalf("Reconcile(finalise): %v", err)
	}
	blocked := rec.Msg.GetReport().GetBlocked()
	if rec.Msg.GetReport().GetFinalised() || len(blocked) == 0 {
		t.Errorf("Reconcile(finalise) = %v, want blocked by n2's gap", rec.Msg.GetReport())
	}
	for _, b := range blocked {
		if strings.Contains(b, "relay") || !strings.Contains(b, "n2") {
			t.Errorf("Reconcile(finalise) blocked: %s, want n2's gap alone", b)
		}
	}
}

// TestStartupReadsKafkaFirst: windows of November wait on the usage
// topic when the quota service starts in December, past November's
// grace. The reconcile loop's first close must not finalise November
// before they are applied: they are November's, not late windows of
// December. Over a fresh store, and over one that knows the node's
// spool already (contiguous and not on a relay: it would pass as
// retired).
func TestStartupReadsKafkaFirst(t *testing.T) {
	t.Parallel()
	for _, known := range []bool{false, true} {
		t.Run(fmt.Sprintf("known=%v", known), func(t *testing.T) {
			t.Parallel()
			const topic = "usage-startup-test"
			c := kafkatest.Start(t, 2, topic)
			st, err := store.Open(testCtx(t), "sqlite:"+filepath.Join(t.TempDir(), "quota.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			nov := time.Date(2026, 11, 30, 23, 59, 30, 0, time.UTC)
			ws := withPeriodCounters(
				window("n1", spoolA, 1, nov, row(key1, "p", 3, 3)),
				window("n1", spoolA, 2, nov.Add(10*time.Second), row(key1, "p", 4, 4)),
				window("n2", spoolB, 1, nov.Add(20*time.Second), row(key2, "p", 5, 5)),
			)
			var msgs []kafka.Message
			for i, w := range ws {
				if known && i == 0 {
					if _, err := st.Apply(testCtx(t), w); err != nil {
						t.Fatal(err)
					}
					continue
				}
				msgs = append(msgs, kafka.Message{Key: []byte(w.GetNodeId()), Value: marshal(t, w)})
			}
			kw := &kafka.Writer{Addr: kafka.TCP(c.Addrs()...), Topic: topic, RequiredAcks: kafka.RequireAll,
				Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond}
			t.Cleanup(func() { _ = kw.Close() })
			if err := kw.WriteMessages(testCtx(t), msgs...); err != nil {
				t.Fatalf("WriteMessages: %v", err)
			}

			// An hour into December, a grace of a millisecond: November
			// may close from the loop's first run, but for what waits.
			base := time.Now()
			now := func() time.Time { return time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC).Add(time.Since(base)) }
			s, err := quota.Open(testCtx(t), quota.Options{Store: st, TokenHashes: []string{svcauth.Hash(token)},
				Brokers: c.Addrs(), Topic: topic, Group: "startup-test", Now: now,
				Interval: 10 * time.Millisecond, Grace: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); s.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })

			eventually(t, "November final", func() bool {
				ps, err := st.Period(testCtx(t), "2026-11")
				return err == nil && ps.Final
			})
			if st := s.Stats(); st.Late != 0 || st.Applied != uint64(len(msgs)) {
				t.Errorf("Stats() = %+v, want %d applied, none late", st, len(msgs))
			}
			for _, want := range []struct {
				key  string
				want uint64
			}{{"key:k1", 7}, {"key:k2", 5}} {
				tot, err := st.Total(testCtx(t), store.Key{Subject: want.key, Product: "p", Period: "2026-11"})
				if err != nil || tot.Counts.Counted != want.want {
					t.Errorf("November's total of %s = %+v, %v; want %d counted", want.key, tot.Counts, err, want.want)
				}
			}
			if adj, err := st.Adjustments(testCtx(t), "2026-12"); err != nil || len(adj) != 0 {
				t.Errorf("December's adjustments = %+v, %v; want none (no late window)", adj, err)
			}
		})
	}
}
