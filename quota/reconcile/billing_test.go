package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/quota/reconcile"
	"github.com/portico-gw/portico/quota/store"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from what the export writes now")

// caps: the free plan's cap on payments is hard, the gold plan's soft.
func caps(plan, product string) (uint64, bool) {
	switch {
	case plan == "free" && product == "payments":
		return 100, true
	case plan == "gold" && product == "payments":
		return 50, false
	}
	return 0, false
}

// billingStore is November with a line of every kind: an app's keys and
// token summed, a hard cap (per key) with its overshoot, a soft cap over,
// anonymous calls, a tenant that needs CSV quoting, and a late October
// window booked into November.
func billingStore(t *testing.T) *store.Store {
	t.Helper()
	ctx := context.Background()
	st := sqliteStore(t)
	n1, n2 := newNode(st, "n1"), newNode(st, "n2")
	n1.emit(t, at("2026-10-31T23:59:50Z"), row(k1, "payments", 2, 1, 1))
	if err := st.Finalise(ctx, "2026-10", at("2026-11-01T00:05:00Z")); err != nil {
		t.Fatal(err)
	}
	n1.emit(t, at("2026-11-10T10:00:00Z"),
		row(k1, "payments", 2, 100, 90), row(k1, "payments", 4, 10, 0),
		row(k2, "payments", 2, 50, 50), row(tok1, "payments", 2, 5, 5), row(k1, "search", 2, 7, 7),
		row(k3, "payments", 2, 150, 150), row(k4, "payments", 2, 30, 30),
		row(k5, "payments", 2, 3, 3),
		row(anon, "", 4, 20, 0), row(anon, "public", 2, 8, 8))
	if a, err := st.Apply(ctx, n2.window(at("2026-10-31T23:59:55Z"), row(k3, "payments", 2, 4, 4))); err != nil || a.LateInto != nov {
		t.Fatalf("the late window: %+v, %v", a, err)
	}
	if err := st.Finalise(ctx, nov, at("2026-12-01T00:05:00Z")); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestLines: the billing lines of a final period, and their CSV and JSON
// Lines exports against golden files (go test -update rewrites them).
func TestLines(t *testing.T) {
	t.Parallel()
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: billingStore(t), Caps: caps})
	lines, err := r.Lines(context.Background(), nov)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		golden string
		format quotav1.BillingFormat
		write  func(*bytes.Buffer) error
		ctype  string
	}{
		{"billing.csv.golden", quotav1.BillingFormat_BILLING_FORMAT_CSV, func(b *bytes.Buffer) error { return reconcile.WriteCSV(b, lines) }, reconcile.ContentTypeCSV},
		{"billing.jsonl.golden", quotav1.BillingFormat_BILLING_FORMAT_JSON, func(b *bytes.Buffer) error { return reconcile.WriteJSON(b, lines) }, reconcile.ContentTypeJSON},
	} {
		var b bytes.Buffer
		if err := tc.write(&b); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", tc.golden)
		if *update {
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), want) {
			t.Errorf("%s: got\n%s\nwant\n%s", tc.golden, b.Bytes(), want)
		}
		data, ctype, err := reconcile.Encode(lines, tc.format)
		if err != nil || !bytes.Equal(data, want) || ctype != tc.ctype {
			t.Errorf("Encode(%v) = %q, %q, %v", tc.format, data, ctype, err)
		}
	}
}

// TestLinesNoCaps: without caps everything billable is billed.
func TestLinesNoCaps(t *testing.T) {
	t.Parallel()
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: billingStore(t)})
	lines, err := r.Lines(context.Background(), nov)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if l.GetBilled() != l.GetBillable() || l.GetOvershoot() != 0 {
			t.Errorf("line %v", l)
		}
	}
}

// TestLinesRefuseOpenPeriod: an open period has no billing lines.
func TestLinesRefuseOpenPeriod(t *testing.T) {
	t.Parallel()
	r := reconcile.New(reconcile.Options{Logger: quiet, Store: billingStore(t)})
	if _, err := r.Lines(context.Background(), dec); !errors.Is(err, reconcile.ErrNotFinal) {
		t.Errorf("Lines(%s) = %v, want ErrNotFinal", dec, err)
	}
	if _, err := r.Lines(context.Background(), "2026-13"); err == nil || errors.Is(err, reconcile.ErrNotFinal) {
		t.Errorf("Lines of no month = %v", err)
	}
}

// TestLinesPaged: a period of more totals than one page of the store's.
func TestLinesPaged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqliteStore(t)
	n1 := newNode(st, "n1")
	var rows []*quotav1.UsageRow
	for i := range 2500 {
		c := &quotav1.Caller{KeyId: fmt.Sprintf("k%04d", i), AppId: fmt.Sprintf("app%04d", i/2), Tenant: "acme", Plan: "gold"}
		rows = append(rows, row(c, "payments", 2, 1, 1))
	}
	n1.emit(t, at("2026-11-10T10:00:00Z"), rows...)
	if err := st.Finalise(ctx, nov, at("2026-12-01T00:05:00Z")); err != nil {
		t.Fatal(err)
	}
	lines, err := reconcile.New(reconcile.Options{Logger: quiet, Store: st}).Lines(ctx, nov)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1250 || lines[0].GetAppId() != "app0000" || lines[1249].GetAppId() != "app1249" {
		t.Fatalf("%d lines", len(lines))
	}
	for _, l := range lines {
		if l.GetCounted() != 2 || l.GetBilled() != 2 {
			t.Fatalf("line %v", l)
		}
	}
}
