package quota_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/gen/portico/quota/v1/quotav1connect"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/quota"
	"github.com/portico-gw/portico/quota/reconcile"
	"github.com/portico-gw/portico/quota/store"
	"github.com/portico-gw/portico/testing/logbuf"
	"github.com/portico-gw/portico/testing/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.RunMain(m)) }

const (
	token  = "quota-test-platform-token-0123456789abcdef"
	spoolA = "aaaaaaaaaaaaaaaa"
	spoolB = "bbbbbbbbbbbbbbbb"
)

var (
	key1 = &quotav1.Caller{KeyId: "k1", AppId: "app1", Tenant: "t1", Plan: "pro"}
	key2 = &quotav1.Caller{KeyId: "k2", AppId: "app2", Tenant: "t2", Plan: "free"}
	app3 = &quotav1.Caller{AppId: "app3", Tenant: "t1", Plan: "pro"}
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func row(c *quotav1.Caller, product string, n, billable uint64) *quotav1.UsageRow {
	return &quotav1.UsageRow{Caller: c, Product: product, RouteId: "r-" + product, StatusClass: 2, Counted: n, Billable: billable}
}

// window is seq of node's spool, 10 s from start, its sums its rows'.
func window(node, spool string, seq uint64, start time.Time, rows ...*quotav1.UsageRow) *quotav1.UsageWindow {
	w := &quotav1.UsageWindow{
		NodeId: node, SpoolId: spool, Seq: seq, Parts: 1, Region: "eu",
		Start: timestamppb.New(start), End: timestamppb.New(start.Add(10 * time.Second)),
		Period: reconcile.PeriodOf(start), Rows: rows,
	}
	for _, r := range rows {
		w.Counted += r.GetCounted()
		w.Billable += r.GetBillable()
	}
	return w
}

// withPeriodCounters sets each window's node counters of its period, as
// a node that lost nothing counts them.
func withPeriodCounters(ws ...*quotav1.UsageWindow) []*quotav1.UsageWindow {
	sums := map[string][2]uint64{}
	for _, w := range ws {
		k := w.GetNodeId() + "/" + w.GetSpoolId() + "/" + w.GetPeriod()
		s := sums[k]
		s[0] += w.GetCounted()
		s[1] += w.GetBillable()
		sums[k] = s
		w.PeriodCounted, w.PeriodBillable = s[0], s[1]
	}
	return ws
}

func marshal(t *testing.T, w *quotav1.UsageWindow) []byte {
	t.Helper()
	b, err := proto.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func deliver(t *testing.T, s *quota.Service, ws ...*quotav1.UsageWindow) {
	t.Helper()
	for _, w := range ws {
		if err := s.Deliver(testCtx(t), marshal(t, w)); err != nil {
			t.Fatalf("Deliver(%s/%d): %v", w.GetNodeId(), w.GetSeq(), err)
		}
	}
}

// service is a quota service under test, served over HTTP.
type service struct {
	*quota.Service
	url    string
	client quotav1connect.QuotaServiceClient // with the platform token
}

// open opens a service with opts (the test's token, no reconcile loop,
// logs discarded unless opts.Logger) and serves its Handler.
func open(t *testing.T, opts quota.Options) *service {
	t.Helper()
	opts.TokenHashes = append(opts.TokenHashes, svcauth.Hash(token))
	opts.NoReconcileLoop = true
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Store == nil && opts.StoreDSN == "" {
		opts.StoreDSN = "sqlite:" + filepath.Join(t.TempDir(), "quota.db")
	}
	s, err := quota.Open(testCtx(t), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &service{Service: s, url: srv.URL, client: client(srv.URL, token)}
}

func client(url, token string) quotav1connect.QuotaServiceClient {
	return quotav1connect.NewQuotaServiceClient(http.DefaultClient, url, connect.WithInterceptors(svcauth.Interceptor(token)))
}

// run runs s.Run until the test ends.
func (s *service) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func usage(t *testing.T, c quotav1connect.QuotaServiceClient, subject, product, period string) *quotav1.GetUsageResponse {
	t.Helper()
	resp, err := c.GetUsage(testCtx(t), connect.NewRequest(&quotav1.GetUsageRequest{Subject: subject, Product: product, Period: period}))
	if err != nil {
		t.Fatalf("GetUsage(%s, %q, %s): %v", subject, product, period, err)
	}
	return resp.Msg
}

type figure struct {
	subject, product  string
	counted, billable uint64
}

func figures(ts []*quotav1.Total) []figure {
	var out []figure
	for _, x := range ts {
		out = append(out, figure{x.GetSubject(), x.GetProduct(), x.GetCounted(), x.GetBillable()})
	}
	return out
}

// TestServiceSQLite runs the service's API over SQLite.
func TestServiceSQLite(t *testing.T) {
	t.Parallel()
	testService(t, "sqlite:"+filepath.Join(t.TempDir(), "quota.db"))
}

// TestServicePostgres runs it over PostgreSQL; without one it skips, or
// fails when CI is set (pgtest.Start).
func TestServicePostgres(t *testing.T) {
	t.Parallel()
	testService(t, pgtest.Start(t).NewDatabase(t))
}

// testService delivers a November of windows and the first of December,
// reads the totals back every way the API has, closes November, exports
// its billing and books a late window of it into December.
func testService(t *testing.T, dsn string) {
	nov := time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC)
	dec := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := dec.Add(time.Hour)
	s := open(t, quota.Options{StoreDSN: dsn, Now: func() time.Time { return now }})
	c := s.client

	deliver(t, s.Service, withPeriodCounters(
		window("n1", spoolA, 1, nov, row(key1, "p", 5, 5), row(key2, "q", 2, 1)),
		window("n1", spoolA, 2, nov.Add(10*time.Second), row(key1, "p", 5, 4), row(app3, "p", 3, 3)),
		window("n1", spoolA, 3, nov.Add(20*time.Second), row(key1, "q", 1, 1)),
		// The node's first window of December: November is whole.
		window("n1", spoolA, 4, dec, row(key1, "p", 7, 7)),
	)...)
	// A duplicate changes nothing.
	deliver(t, s.Service, withPeriodCounters(window("n1", spoolA, 1, nov, row(key1, "p", 5, 5), row(key2, "q", 2, 1)))...)

	got := usage(t, c, "key:k1", "", "2026-11")
	if want := []figure{{"key:k1", "p", 10, 9}, {"key:k1", "q", 1, 1}}; !slices.Equal(figures(got.GetTotals()), want) {
		t.Errorf("GetUsage(key:k1, every product) = %v, want %v", figures(got.GetTotals()), want)
	}
	if got.GetState().GetFinal() {
		t.Errorf("GetUsage: state %v, want not final", got.GetState())
	}
	if tot := usage(t, c, "key:k1", "p", "2026-11").GetTotals(); len(tot) != 1 || tot[0].GetByClass()[2] != 10 ||
		tot[0].GetCaller().GetTenant() != "t1" || tot[0].GetUpdated() == nil {
		t.Errorf("GetUsage(key:k1, p) = %v, want 10 of class 2 by t1's key", tot)
	}
	if tot := usage(t, c, "key:nobody", "p", "2026-11").GetTotals(); len(tot) != 0 {
		t.Errorf("GetUsage(key:nobody) = %v, want no totals", tot)
	}

	// ListUsage, one total a page.
	var pages []figure
	req := &quotav1.ListUsageRequest{Period: "2026-11", PageSize: 1}
	for i := 0; ; i++ {
		resp, err := c.ListUsage(testCtx(t), connect.NewRequest(req))
		if err != nil {
			t.Fatalf("ListUsage page %d: %v", i, err)
		}
		pages = append(pages, figures(resp.Msg.GetTotals())...)
		if resp.Msg.GetNextPageToken() == "" {
			break
		}
		if i > 10 {
			t.Fatalf("ListUsage: more pages than totals")
		}
		req.PageToken = resp.Msg.GetNextPageToken()
	}
	want := []figure{{"app:app3", "p", 3, 3}, {"key:k1", "p", 10, 9}, {"key:k1", "q", 1, 1}, {"key:k2", "q", 2, 1}}
	if !slices.Equal(pages, want) {
		t.Errorf("ListUsage pages = %v, want %v", pages, want)
	}
	resp, err := c.ListUsage(testCtx(t), connect.NewRequest(&quotav1.ListUsageRequest{Period: "2026-11", Tenant: "t2"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := figures(resp.Msg.GetTotals()), []figure{{"key:k2", "q", 2, 1}}; !slices.Equal(got, want) || resp.Msg.GetNextPageToken() != "" {
		t.Errorf("ListUsage(tenant t2) = %v %q, want %v and no next page", got, resp.Msg.GetNextPageToken(), want)
	}

	nodes, err := c.ListNodes(testCtx(t), connect.NewRequest(&quotav1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := nodes.Msg.GetNodes(); len(n) != 1 || n[0].GetNodeId() != "n1" || n[0].GetSpoolId() != spoolA ||
		n[0].GetContiguous() != 4 || n[0].GetHighest() != 4 || len(n[0].GetMissing()) != 0 || !n[0].GetLastWindow().AsTime().Equal(dec) {
		t.Errorf("ListNodes = %v, want n1 contiguous through 4", n)
	}

	// Billing of a period that is not final is refused.
	if _, err := c.ExportBilling(testCtx(t), connect.NewRequest(&quotav1.ExportBillingRequest{Period: "2026-11"})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("ExportBilling(open period) = %v, want FailedPrecondition", err)
	}
	rec, err := c.Reconcile(testCtx(t), connect.NewRequest(&quotav1.ReconcileRequest{Period: "2026-11", Finalise: true}))
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if r := rec.Msg.GetReport(); !r.GetFinalised() || len(r.GetCorrections()) != 0 || len(r.GetGaps()) != 0 {
		t.Fatalf("Reconcile(2026-11, finalise) = %v, want finalised, nothing to correct", r)
	}
	if st := usage(t, c, "key:k1", "", "2026-11").GetState(); !st.GetFinal() || st.GetFinalised() == nil {
		t.Errorf("state after the close = %v, want final", st)
	}

	bill, err := c.ExportBilling(testCtx(t), connect.NewRequest(&quotav1.ExportBillingRequest{Period: "2026-11", Format: quotav1.BillingFormat_BILLING_FORMAT_CSV}))
	if err != nil {
		t.Fatalf("ExportBilling: %v", err)
	}
	if bill.Msg.GetContentType() != reconcile.ContentTypeCSV || len(bill.Msg.GetLines()) != 4 {
		t.Errorf("ExportBilling(CSV) = %s with %d lines, want CSV with 4", bill.Msg.GetContentType(), len(bill.Msg.GetLines()))
	}
	records, err := csv.NewReader(bytes.NewReader(bill.Msg.GetData())).ReadAll()
	if err != nil || len(records) != 5 {
		t.Errorf("ExportBilling(CSV) data: %d records (%v), want a header and 4 lines:\n%s", len(records), err, bill.Msg.GetData())
	}
	var buf bytes.Buffer
	if err := reconcile.WriteCSV(&buf, bill.Msg.GetLines()); err != nil || !bytes.Equal(buf.Bytes(), bill.Msg.GetData()) {
		t.Errorf("ExportBilling(CSV) data is not WriteCSV of its lines (%v)", err)
	}
	bill, err = c.ExportBilling(testCtx(t), connect.NewRequest(&quotav1.ExportBillingRequest{Period: "2026-11", Format: quotav1.BillingFormat_BILLING_FORMAT_JSON}))
	if err != nil {
		t.Fatalf("ExportBilling(JSON): %v", err)
	}
	if bill.Msg.GetContentType() != reconcile.ContentTypeJSON || bytes.Count(bill.Msg.GetData(), []byte("\n")) != 4 {
		t.Errorf("ExportBilling(JSON) = %s:\n%s\nwant 4 JSON lines", bill.Msg.GetContentType(), bill.Msg.GetData())
	}

	// A window of November that arrives now is booked into December, as
	// an adjustment.
	deliver(t, s.Service, withPeriodCounters(window("n2", spoolB, 1, nov, row(key1, "p", 2, 2)))...)
	adj, err := c.ListAdjustments(testCtx(t), connect.NewRequest(&quotav1.ListAdjustmentsRequest{Period: "2026-12"}))
	if err != nil {
		t.Fatal(err)
	}
	if a := adj.Msg.GetAdjustments(); len(a) != 1 || a[0].GetKind() != "late_window" || a[0].GetSubject() != "key:k1" ||
		a[0].GetCounted() != 2 || !strings.Contains(a[0].GetSource(), "n2") || a[0].GetRecorded() == nil {
		t.Errorf("ListAdjustments(2026-12) = %v, want the late window of n2", a)
	}
	if tot := usage(t, c, "key:k1", "p", "2026-12").GetTotals(); len(tot) != 1 || tot[0].GetCounted() != 9 || tot[0].GetAdjusted() != 2 {
		t.Errorf("GetUsage(key:k1, p, 2026-12) = %v, want 7 + 2 late, adjusted 2", tot)
	}
	if tot := usage(t, c, "key:k1", "p", "2026-11").GetTotals(); len(tot) != 1 || tot[0].GetCounted() != 10 {
		t.Errorf("GetUsage(key:k1, p, 2026-11) = %v: a final period changed", tot)
	}
	if st := s.Stats(); st.Applied != 5 || st.Duplicates != 1 || st.Late != 1 {
		t.Errorf("Stats() = %+v, want 5 applied (1 late), 1 duplicate", st)
	}
}

// TestAuth: a call without a token, or with one the service does not
// hold, is Unauthenticated, whatever it calls.
func TestAuth(t *testing.T) {
	t.Parallel()
	s := open(t, quota.Options{})
	for _, tc := range []struct {
		name string
		c    quotav1connect.QuotaServiceClient
	}{{"no token", client(s.url, "")}, {"unknown token", client(s.url, "not-the-token")}} {
		ctx := testCtx(t)
		_, err1 := tc.c.GetUsage(ctx, connect.NewRequest(&quotav1.GetUsageRequest{Subject: "key:k1", Period: "2026-11"}))
		_, err2 := tc.c.ListNodes(ctx, connect.NewRequest(&quotav1.ListNodesRequest{}))
		_, err3 := tc.c.Reconcile(ctx, connect.NewRequest(&quotav1.ReconcileRequest{Period: "2026-11", Finalise: true}))
		// Invalid as well as unauthenticated: the token is checked first.
		_, err4 := tc.c.ListUsage(ctx, connect.NewRequest(&quotav1.ListUsageRequest{Period: "bad"}))
		for i, err := range []error{err1, err2, err3, err4} {
			if connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Errorf("%s: call %d = %v, want Unauthenticated", tc.name, i+1, err)
			}
		}
	}
	if _, err := s.client.ListNodes(testCtx(t), connect.NewRequest(&quotav1.ListNodesRequest{})); err != nil {
		t.Errorf("ListNodes with the token: %v", err)
	}
	if _, err := quota.Open(testCtx(t), quota.Options{StoreDSN: "sqlite:" + filepath.Join(t.TempDir(), "q.db")}); err != quota.ErrNoTokens {
		t.Errorf("Open without tokens = %v, want ErrNoTokens", err)
	}
}

// TestBadRequests: what the request rules or the handlers refuse is
// InvalidArgument.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	s := open(t, quota.Options{})
	c := s.client
	deliver(t, s.Service, window("n1", spoolA, 1, time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), row(key1, "p", 1, 1), row(key2, "p", 1, 1)))
	first, err := c.ListUsage(testCtx(t), connect.NewRequest(&quotav1.ListUsageRequest{Period: "2026-11", PageSize: 1}))
	if err != nil || first.Msg.GetNextPageToken() == "" {
		t.Fatalf("ListUsage: %v, token %q", err, first.Msg.GetNextPageToken())
	}
	next := first.Msg.GetNextPageToken()
	for _, tc := range []struct {
		name string
		call func(context.Context) error
	}{
		{"GetUsage without a subject", func(ctx context.Context) error {
			_, err := c.GetUsage(ctx, connect.NewRequest(&quotav1.GetUsageRequest{Period: "2026-11"}))
			return err
		}},
		{"GetUsage of month 13", func(ctx context.Context) error {
			_, err := c.GetUsage(ctx, connect.NewRequest(&quotav1.GetUsageRequest{Subject: "key:k1", Period: "2026-13"}))
			return err
		}},
		{"ListUsage with a negative page size", func(ctx context.Context) error {
			_, err := c.ListUsage(ctx, connect.NewRequest(&quotav1.ListUsageRequest{Period: "2026-11", PageSize: -1}))
			return err
		}},
		{"ListUsage with a made-up page token", func(ctx context.Context) error {
			_, err := c.ListUsage(ctx, connect.NewRequest(&quotav1.ListUsageRequest{Period: "2026-11", PageToken: "!!not base64"}))
			return err
		}},
		{"ListUsage with another period's page token", func(ctx context.Context) error {
			_, err := c.ListUsage(ctx, connect.NewRequest(&quotav1.ListUsageRequest{Period: "2026-10", PageToken: next}))
			return err
		}},
		{"ListUsage with another tenant's page token", func(ctx context.Context) error {
			_, err := c.ListUsage(ctx, connect.NewRequest(&quotav1.ListUsageRequest{Period: "2026-11", Tenant: "t1", PageToken: next}))
			return err
		}},
		{"Reconcile of no period", func(ctx context.Context) error {
			_, err := c.Reconcile(ctx, connect.NewRequest(&quotav1.ReconcileRequest{Period: "soon"}))
			return err
		}},
		{"ExportBilling in no format", func(ctx context.Context) error {
			_, err := c.ExportBilling(ctx, connect.NewRequest(&quotav1.ExportBillingRequest{Period: "2026-11", Format: 7}))
			return err
		}},
		{"ListAdjustments of no period", func(ctx context.Context) error {
			_, err := c.ListAdjustments(ctx, connect.NewRequest(&quotav1.ListAdjustmentsRequest{}))
			return err
		}},
	} {
		if err := tc.call(testCtx(t)); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s = %v, want InvalidArgument", tc.name, err)
		}
	}
	// The token pages on where it was made.
	second, err := c.ListUsage(testCtx(t), connect.NewRequest(&quotav1.ListUsageRequest{Period: "2026-11", PageSize: 1, PageToken: next}))
	if err != nil || len(second.Msg.GetTotals()) != 1 || second.Msg.GetTotals()[0].GetSubject() != "key:k2" {
		t.Errorf("ListUsage(page 2) = %v, %v, want key:k2", second.Msg.GetTotals(), err)
	}
}

// TestInternalNotLeaked: a store that fails is Internal, and the client
// is told what failed, not the database's text, which goes to the log.
func TestInternalNotLeaked(t *testing.T) {
	t.Parallel()
	st, err := store.Open(testCtx(t), "sqlite:"+filepath.Join(t.TempDir(), "quota.db"))
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	s := open(t, quota.Options{Store: st, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = s.client.GetUsage(testCtx(t), connect.NewRequest(&quotav1.GetUsageRequest{Subject: "key:k1", Period: "2026-11"}))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInternal {
		t.Fatalf("GetUsage on a closed store = %v, want Internal", err)
	}
	if msg := ce.Message(); msg != "reading the usage of key:k1 in 2026-11" {
		t.Errorf("GetUsage's message = %q, want what failed alone", msg)
	}
	if !strings.Contains(logs.String(), "closed") {
		t.Errorf("the log does not say why:\n%s", logs.String())
	}
}

// TestWriteOff: a node written off in a Reconcile call closes the period
// without its missing windows; the report lists its gaps in written_off,
// and ListAdjustments shows the write-off, kept in the store.
func TestWriteOff(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)
	s := open(t, quota.Options{Now: func() time.Time { return now }})
	nov := time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)
	ws := withPeriodCounters(
		window("n1", spoolA, 1, nov, row(key1, "p", 2, 2)),
		window("n1", spoolA, 2, nov.Add(10*time.Second), row(key1, "p", 3, 3)), // lost
		window("n1", spoolA, 3, nov.Add(20*time.Second), row(key1, "p", 1, 1)),
	)
	deliver(t, s.Service, ws[0], ws[2])
	ask := func(writeOff ...string) *quotav1.ReconcileReport {
		t.Helper()
		resp, err := s.client.Reconcile(testCtx(t), connect.NewRequest(&quotav1.ReconcileRequest{Period: "2026-11", Finalise: true, WriteOff: writeOff}))
		if err != nil {
			t.Fatalf("Reconcile(write_off %q): %v", writeOff, err)
		}
		return resp.Msg.GetReport()
	}
	if rep := ask(); rep.GetFinalised() || len(rep.GetWrittenOff()) != 0 {
		t.Fatalf("Reconcile without a write-off = %v, want blocked by n1's seq 2", rep)
	}
	rep := ask("n1")
	if wo := rep.GetWrittenOff(); !rep.GetFinalised() || len(wo) != 1 || wo[0].GetNodeId() != "n1" || wo[0].GetSpoolId() != spoolA ||
		wo[0].GetFromSeq() != 2 || wo[0].GetToSeq() != 2 {
		t.Fatalf("Reconcile(write_off n1) = %v, want final with n1's seq 2 written off", rep)
	}
	resp, err := s.client.ListAdjustments(testCtx(t), connect.NewRequest(&quotav1.ListAdjustmentsRequest{Period: "2026-11"}))
	if err != nil {
		t.Fatal(err)
	}
	adj := resp.Msg.GetAdjustments()
	if len(adj) != 1 || adj[0].GetKind() != "write_off" || adj[0].GetCounted() != 0 || adj[0].GetBillable() != 0 ||
		!strings.Contains(adj[0].GetSource(), "node n1 spool "+spoolA+" seqs 2") || !strings.Contains(adj[0].GetSource(), "3 counted, 3 billable") {
		t.Errorf("ListAdjustments(2026-11) = %v, want n1's write-off", adj)
	}
	// Asked again, the final period writes nothing more off.
	if rep := ask("n1"); !rep.GetFinalised() || len(rep.GetWrittenOff()) != 0 {
		t.Errorf("Reconcile of the final period = %v", rep)
	}
}
