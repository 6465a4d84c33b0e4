package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/quota/store"
	"github.com/portico-gw/portico/testing/pgtest"
)

// benchRows is the rows of a busy node's window: 3,000 distinct callers,
// each a row of its own, so that every row is a total to update and a
// recount row to write (the worst case; rows of one caller on several
// routes fold into one of each).
const benchRows = 3000

// BenchmarkApply applies windows of benchRows rows, each a new seq of one
// spool, to totals that exist (the callers of one window are those of
// the last, as on a busy node): rows/s is what one consumer sustains.
func BenchmarkApply(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		benchApply(b, "sqlite:"+filepath.Join(b.TempDir(), "quota.db"))
	})
	b.Run("postgres", func(b *testing.B) {
		benchApply(b, pgtest.Start(b).NewDatabase(b))
	})
}

func benchApply(b *testing.B, dsn string) {
	ctx := context.Background()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	rows := make([]*quotav1.UsageRow, benchRows)
	var counted, billable uint64
	for i := range rows {
		rows[i] = &quotav1.UsageRow{
			Caller:  &quotav1.Caller{KeyId: fmt.Sprintf("key%05d", i), AppId: fmt.Sprintf("app%04d", i/3), Tenant: "t1", Plan: "pro"},
			Product: "orders", RouteId: "orders.v1.Orders/Get", StatusClass: 2, Counted: uint64(i%7 + 1), Billable: uint64(i%7 + 1),
		}
		counted += rows[i].Counted
		billable += rows[i].Billable
	}
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	window := func(seq uint64) *quotav1.UsageWindow {
		t := start.Add(time.Duration(seq) * 10 * time.Second)
		return &quotav1.UsageWindow{NodeId: "n1", SpoolId: "aaaaaaaaaaaaaaaa", Seq: seq, Parts: 1, Period: "2026-11",
			Start: timestamppb.New(t), End: timestamppb.New(t.Add(10 * time.Second)), Rows: rows, Counted: counted, Billable: billable}
	}
	if _, err := s.Apply(ctx, window(1)); err != nil { // the totals exist
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	seq := uint64(1)
	for b.Loop() {
		seq++
		if a, err := s.Apply(ctx, window(seq)); err != nil || a.Duplicate {
			b.Fatalf("Apply(%d) = %+v, %v", seq, a, err)
		}
	}
	b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
