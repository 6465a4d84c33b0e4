package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/quota"
	"github.com/portico-gw/portico/quota/reconcile"
)

const (
	quotaToken = "qst_porticoctl-test-quota-token"
	spoolA     = "aaaaaaaaaaaaaaaa"
	spoolB     = "bbbbbbbbbbbbbbbb"
)

var (
	// The quota service's clock: an hour into December 2026, so that
	// November can close and December cannot.
	quotaNow = time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)
	nov      = time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC)
	dec      = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

	key1 = &quotav1.Caller{KeyId: "k1", AppId: "shop", Tenant: "acme", Plan: "gold"}
	key2 = &quotav1.Caller{KeyId: "k2", AppId: "blog", Tenant: "umbrella", Plan: "free"}
	app3 = &quotav1.Caller{AppId: "ci", Tenant: "acme", Plan: "gold"}
)

// quotaService starts a real quota service on a SQLite store in the
// test's directory, served over loopback, and returns it and its URL.
// It takes quotaToken and never reconciles by itself.
func quotaService(t *testing.T) (*quota.Service, string) {
	t.Helper()
	s, err := quota.Open(context.Background(), quota.Options{
		StoreDSN:    "sqlite:" + filepath.Join(t.TempDir(), "quota.db"),
		TokenHashes: []string{svcauth.Hash(quotaToken)}, NoReconcileLoop: true,
		Now: func() time.Time { return quotaNow }, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("quota.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// quotaEnv is the environment of a porticoctl that reaches the quota
// service at url with quotaToken, and a control plane that is not there.
func quotaEnv(url string) map[string]string {
	return map[string]string{"PORTICO_SERVER": "http://127.0.0.1:1", "PORTICO_TOKEN": "admin-token",
		"PORTICO_QUOTA_SERVER": url, "PORTICO_QUOTA_TOKEN": quotaToken}
}

func usageRow(c *quotav1.Caller, product string, class uint32, n, billable uint64) *quotav1.UsageRow {
	return &quotav1.UsageRow{Caller: c, Product: product, RouteId: "r-" + product, StatusClass: class, Counted: n, Billable: billable}
}

// deliver applies windows of node's spool, from seq firstSeq on, one
// every 10 s from start, with the period counters of a node that lost
// nothing since firstSeq.
func deliver(t *testing.T, s *quota.Service, node, spool string, firstSeq uint64, start time.Time, windows ...[]*quotav1.UsageRow) {
	t.Helper()
	var counted, billable uint64
	for i, rows := range windows {
		seq := firstSeq + uint64(i)
		start := start.Add(time.Duration(i) * 10 * time.Second)
		w := &quotav1.UsageWindow{NodeId: node, SpoolId: spool, Seq: seq, Parts: 1, Region: "eu",
			Start: timestamppb.New(start), End: timestamppb.New(start.Add(10 * time.Second)),
			Period: reconcile.PeriodOf(start), Rows: rows}
		for _, r := range rows {
			w.Counted += r.GetCounted()
			w.Billable += r.GetBillable()
		}
		counted, billable = counted+w.Counted, billable+w.Billable
		w.PeriodCounted, w.PeriodBillable = counted, billable
		b, err := proto.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Deliver(context.Background(), b); err != nil {
			t.Fatalf("Deliver(%s/%d): %v", node, seq, err)
		}
	}
}

// november delivers n1's November (three windows) and its first window
// of December.
func november(t *testing.T, s *quota.Service) {
	t.Helper()
	deliver(t, s, "n1", spoolA, 1, nov,
		[]*quotav1.UsageRow{usageRow(key1, "orders", 2, 5, 5), usageRow(key2, "search", 2, 2, 1)},
		[]*quotav1.UsageRow{usageRow(key1, "orders", 4, 5, 4), usageRow(app3, "orders", 2, 3, 3)},
		[]*quotav1.UsageRow{usageRow(key1, "search", 5, 1, 1)},
	)
	// December's first window: November is whole.
	deliver(t, s, "n1", spoolA, 4, dec, []*quotav1.UsageRow{usageRow(key1, "orders", 2, 7, 7)})
}

// usageCtl runs porticoctl against the quota service at url and fails
// the test unless it exits with code and prints nothing on stderr (when
// code is 0).
func usageCtl(t *testing.T, url string, code int, args ...string) (string, string) {
	t.Helper()
	got, out, errOut := ctl(t, quotaEnv(url), args...)
	if got != code || (code == 0 && errOut != "") {
		t.Fatalf("porticoctl %s = %d %q %q, want %d", strings.Join(args, " "), got, out, errOut, code)
	}
	return out, errOut
}

// lines are out's lines, each with its runs of spaces made one, so that
// a table's rows compare without its alignment.
func lines(out string) []string {
	var ls []string
	for l := range strings.SplitSeq(strings.TrimRight(out, "\n"), "\n") {
		ls = append(ls, strings.Join(strings.Fields(l), " "))
	}
	return ls
}

// wantLines fails the test unless out's lines are want's, spaces aside;
// anyTime in want stands for any RFC 3339 time (one the store stamped
// with its own clock).
func wantLines(t *testing.T, what, out string, want ...string) {
	t.Helper()
	got := lines(out)
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		g, w := strings.Fields(got[i]), strings.Fields(want[i])
		same = len(g) == len(w)
		for j := 0; same && j < len(g); j++ {
			_, err := time.Parse(time.RFC3339, g[j])
			same = g[j] == w[j] || w[j] == anyTime && err == nil
		}
	}
	if !same {
		t.Errorf("%s printed:\n%s\nwant:\n%s", what, out, strings.Join(want, "\n"))
	}
}

const anyTime = "<time>"

func TestUsageGet(t *testing.T) {
	t.Parallel()
	s, url := quotaService(t)
	november(t, s)

	out, _ := usageCtl(t, url, 0, "usage", "get", "key:k1", "--period", "2026-11")
	wantLines(t, "usage get key:k1", out,
		"key:k1 in 2026-11 (open, not reconciled yet)",
		"app shop, tenant acme, plan gold",
		"",
		"PRODUCT COUNTED BILLABLE ADJUSTED BY STATUS UPDATED",
		"orders 10 9 0 2xx 5, 4xx 5 "+anyTime,
		"search 1 1 0 5xx 1 "+anyTime,
	)

	out, _ = usageCtl(t, url, 0, "usage", "get", "key:k1", "--product", "search", "--period=2026-11", "-o", "json")
	var resp quotav1.GetUsageResponse
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("usage get -o json printed %q: %v", out, err)
	}
	if tot := resp.GetTotals(); len(tot) != 1 || tot[0].GetProduct() != "search" || tot[0].GetCounted() != 1 || resp.GetState().GetPeriod() != "2026-11" {
		t.Errorf("usage get --product search -o json = %v, want search's total alone", &resp)
	}

	out, _ = usageCtl(t, url, 0, "usage", "get", "app:nobody", "--product", "orders", "--period", "2026-11")
	wantLines(t, "usage get app:nobody", out, "app:nobody made no calls of orders in 2026-11 (open, not reconciled yet)")

	// Without --period: the current month, UTC.
	before := time.Now().UTC().Format(periodLayout)
	out, _ = usageCtl(t, url, 0, "usage", "get", "anonymous", "-o", "yaml")
	after := time.Now().UTC().Format(periodLayout)
	if !strings.Contains(out, "period: \""+before+"\"") && !strings.Contains(out, "period: \""+after+"\"") &&
		!strings.Contains(out, "period: "+before) && !strings.Contains(out, "period: "+after) {
		t.Errorf("usage get anonymous -o yaml printed %q, want the state of %s", out, before)
	}
}

func TestUsageList(t *testing.T) {
	t.Parallel()
	s, url := quotaService(t)
	november(t, s)

	out, _ := usageCtl(t, url, 0, "usage", "list", "--period", "2026-11")
	wantLines(t, "usage list", out,
		"2026-11 (open, not reconciled yet)",
		"",
		"SUBJECT TENANT APP PLAN PRODUCT COUNTED BILLABLE ADJUSTED",
		"app:ci acme ci gold orders 3 3 0",
		"key:k1 acme shop gold orders 10 9 0",
		"key:k1 acme shop gold search 1 1 0",
		"key:k2 umbrella blog free search 2 1 0",
	)
	out, _ = usageCtl(t, url, 0, "usage", "list", "--period", "2026-11", "--tenant", "umbrella")
	wantLines(t, "usage list --tenant umbrella", out,
		"2026-11 (open, not reconciled yet)", "",
		"SUBJECT TENANT APP PLAN PRODUCT COUNTED BILLABLE ADJUSTED",
		"key:k2 umbrella blog free search 2 1 0",
	)
	out, _ = usageCtl(t, url, 0, "usage", "list", "--period", "2026-10")
	wantLines(t, "usage list of an empty period", out, "2026-10 (open, not reconciled yet): no usage")

	// One page, and the command that prints the next.
	out, _ = usageCtl(t, url, 0, "usage", "list", "--period", "2026-11", "--tenant", "acme", "--page-size", "2")
	ls := lines(out)
	prefix := "more follow: porticoctl usage list --period 2026-11 --tenant acme --page-size 2 --page-token "
	if len(ls) != 7 || ls[3] != "app:ci acme ci gold orders 3 3 0" || ls[4] != "key:k1 acme shop gold orders 10 9 0" || !strings.HasPrefix(ls[6], prefix) {
		t.Fatalf("usage list --page-size 2 printed:\n%s", out)
	}
	next := strings.TrimPrefix(ls[6], prefix)
	out, _ = usageCtl(t, url, 0, "usage", "list", "--period", "2026-11", "--tenant", "acme", "--page-size", "2", "--page-token", next)
	wantLines(t, "usage list, the next page", out,
		"2026-11 (open, not reconciled yet)", "",
		"SUBJECT TENANT APP PLAN PRODUCT COUNTED BILLABLE ADJUSTED",
		"key:k1 acme shop gold search 1 1 0",
	)
	out, _ = usageCtl(t, url, 0, "usage", "list", "--period", "2026-11", "--page-size", "3", "-o", "json")
	var page quotav1.ListUsageResponse
	if err := protojson.Unmarshal([]byte(out), &page); err != nil || len(page.GetTotals()) != 3 || page.GetNextPageToken() == "" {
		t.Errorf("usage list --page-size 3 -o json printed %q (%v), want 3 totals and a next page token", out, err)
	}
	// A page token of another listing is refused by the service.
	_, errOut := usageCtl(t, url, 1, "usage", "list", "--period", "2026-10", "--page-token", next)
	if !strings.HasPrefix(errOut, "porticoctl usage list: invalid_argument: ") {
		t.Errorf("usage list with another period's token printed %q", errOut)
	}
}

// TestUsageListEveryPage: without --page-size, list follows the pages to
// the end (more totals than one page holds).
func TestUsageListEveryPage(t *testing.T) {
	t.Parallel()
	s, url := quotaService(t)
	const n = usagePageSize*2 + 17
	var rows []*quotav1.UsageRow
	for i := range n {
		rows = append(rows, usageRow(&quotav1.Caller{KeyId: fmt.Sprintf("k%04d", i), AppId: "a", Tenant: "t", Plan: "p"}, "orders", 2, 1, 1))
	}
	deliver(t, s, "n2", spoolB, 1, nov, rows)
	out, _ := usageCtl(t, url, 0, "usage", "list", "--period", "2026-11", "-o", "json")
	var all quotav1.ListUsageResponse
	if err := protojson.Unmarshal([]byte(out), &all); err != nil {
		t.Fatal(err)
	}
	if len(all.GetTotals()) != n || all.GetNextPageToken() != "" {
		t.Fatalf("usage list -o json answered %d totals, next page %q, want %d and none", len(all.GetTotals()), all.GetNextPageToken(), n)
	}
	for i, x := range all.GetTotals() {
		if want := fmt.Sprintf("key:k%04d", i); x.GetSubject() != want {
			t.Fatalf("total %d is %s, want %s", i, x.GetSubject(), want)
		}
	}
	out, _ = usageCtl(t, url, 0, "usage", "list", "--period", "2026-11")
	if ls := lines(out); len(ls) != n+3 || strings.Contains(out, "more follow") {
		t.Errorf("usage list printed %d lines, want %d", len(ls), n+3)
	}
}

func TestUsageNodes(t *testing.T) {
	t.Parallel()
	s, url := quotaService(t)
	out, _ := usageCtl(t, url, 0, "usage", "nodes")
	wantLines(t, "usage nodes with no windows", out, "the quota service has no usage window of any node")

	november(t, s)
	// n2 sent seqs 1, 2 and 5: 3 and 4 are missing.
	deliver(t, s, "n2", spoolB, 1, nov, nil, nil)
	deliver(t, s, "n2", spoolB, 5, nov.Add(40*time.Second), nil)
	out, _ = usageCtl(t, url, 0, "usage", "nodes")
	wantLines(t, "usage nodes", out,
		"NODE SPOOL REGION CONTIGUOUS HIGHEST MISSING LAST WINDOW",
		"n1 "+spoolA+" eu 4 4 0 "+dec.Format(time.RFC3339),
		"n2 "+spoolB+" eu 2 5 2 "+nov.Add(40*time.Second).Format(time.RFC3339),
	)
	out, _ = usageCtl(t, url, 0, "usage", "nodes", "-o", "json")
	var resp quotav1.ListNodesResponse
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil || len(resp.GetNodes()) != 2 || len(resp.GetNodes()[1].GetMissing()) != 2 {
		t.Errorf("usage nodes -o json printed %q (%v)", out, err)
	}
}

// TestUsageReconcileExport reconciles November, exports it before and
// after it is final, and books a late window of it into December.
func TestUsageReconcileExport(t *testing.T) {
	t.Parallel()
	s, url := quotaService(t)
	november(t, s)
	ran := quotaNow.Format(time.RFC3339)

	out, _ := usageCtl(t, url, 0, "usage", "reconcile", "--period", "2026-11")
	wantLines(t, "usage reconcile", out,
		"reconciled 2026-11 at "+ran,
		"no gaps, corrections or counter mismatches",
		"2026-11 is open (--finalise closes it once every node's windows of it are in)",
	)
	_, errOut := usageCtl(t, url, 1, "usage", "export", "--period", "2026-11")
	if want := "porticoctl usage export: failed_precondition: exporting the billing lines of 2026-11: the period is not final yet (reconcile it with finalise)\n"; errOut != want {
		t.Errorf("usage export of an open period printed %q, want %q", errOut, want)
	}

	// December has not ended: it cannot close, and reconcile says so
	// and exits 1.
	out, errOut = usageCtl(t, url, 1, "usage", "reconcile", "--period", "2026-12", "--finalise")
	if ls := lines(out); len(ls) != 4 || ls[2] != "2026-12 was not finalised:" || !strings.Contains(ls[3], "the period ends at 2027-01-01T00:00:00Z") ||
		errOut != "porticoctl usage reconcile: 2026-12 was not finalised\n" {
		t.Errorf("usage reconcile --period 2026-12 --finalise printed %q %q", out, errOut)
	}
	// A node id the service would never have is refused, with its field.
	_, errOut = usageCtl(t, url, 1, "usage", "reconcile", "--period", "2026-11", "--finalise", "--write-off", "no such node!")
	if !strings.HasPrefix(errOut, "porticoctl usage reconcile: invalid_argument: validation error: write_off[0]: ") {
		t.Errorf("usage reconcile --write-off 'no such node!' printed %q", errOut)
	}

	out, _ = usageCtl(t, url, 0, "usage", "reconcile", "--period", "2026-11", "--finalise")
	wantLines(t, "usage reconcile --finalise", out,
		"reconciled 2026-11 at "+ran,
		"no gaps, corrections or counter mismatches",
		"2026-11 is final",
	)
	out, _ = usageCtl(t, url, 0, "usage", "get", "key:k2", "--period", "2026-11")
	if !strings.HasPrefix(out, "key:k2 in 2026-11 (final since "+ran+")\n") {
		t.Errorf("usage get after the close printed %q", out)
	}

	// CSV to standard output, as the service encodes it.
	csvOut, _ := usageCtl(t, url, 0, "usage", "export", "--period", "2026-11")
	records, err := csv.NewReader(strings.NewReader(csvOut)).ReadAll()
	if err != nil || len(records) != 5 || !strings.Contains(csvOut, "acme,shop,orders,2026-11,gold,10,9,9,0,0") {
		t.Errorf("usage export printed %d records (%v):\n%s", len(records), err, csvOut)
	}
	// JSON Lines to a file, and the answer's lines as JSON.
	file := filepath.Join(t.TempDir(), "billing.jsonl")
	out, _ = usageCtl(t, url, 0, "usage", "export", "--period", "2026-11", "--format", "json", "-f", file)
	if want := "wrote 4 billing lines of 2026-11 to " + file + " (application/jsonl)\n"; out != want {
		t.Errorf("usage export -f printed %q, want %q", out, want)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n != 4 || !json.Valid([]byte(strings.SplitN(string(data), "\n", 2)[0])) {
		t.Errorf("usage export --format json wrote %d lines:\n%s", n, data)
	}
	csvFile := filepath.Join(filepath.Dir(file), "billing.csv")
	out, _ = usageCtl(t, url, 0, "usage", "export", "--period", "2026-11", "-f", csvFile, "-o", "json")
	var resp quotav1.ExportBillingResponse
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil || len(resp.GetLines()) != 4 || len(resp.GetData()) != 0 || resp.GetContentType() != reconcile.ContentTypeCSV {
		t.Errorf("usage export -f -o json printed %q (%v), want the lines without the data", out, err)
	}
	if b, err := os.ReadFile(csvFile); err != nil || string(b) != csvOut {
		t.Errorf("usage export -f wrote %q (%v), want what it prints on stdout", b, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(file)); len(ents) != 2 {
		t.Errorf("usage export left %d files, want the 2 exports alone", len(ents))
	}

	// A window of November that arrives now is booked into December.
	out, _ = usageCtl(t, url, 0, "usage", "adjustments", "--period", "2026-12")
	wantLines(t, "usage adjustments with none", out, "2026-12 has no adjustments")
	deliver(t, s, "n3", spoolB, 1, nov, []*quotav1.UsageRow{usageRow(key1, "orders", 2, 2, 2)})
	out, _ = usageCtl(t, url, 0, "usage", "adjustments", "--period", "2026-12")
	wantLines(t, "usage adjustments", out,
		"RECORDED KIND SUBJECT PRODUCT COUNTED BILLABLE SOURCE",
		anyTime+" late_window key:k1 orders +2 +2 late window n3/"+spoolB+"/1 of 2026-11",
	)
	out, _ = usageCtl(t, url, 0, "usage", "adjustments", "--period", "2026-12", "-o", "json")
	var adjs quotav1.ListAdjustmentsResponse
	if err := protojson.Unmarshal([]byte(out), &adjs); err != nil || len(adjs.GetAdjustments()) != 1 || adjs.GetAdjustments()[0].GetKind() != "late_window" {
		t.Errorf("usage adjustments -o json printed %q (%v)", out, err)
	}
	out, _ = usageCtl(t, url, 0, "usage", "get", "key:k1", "--product", "orders", "--period", "2026-12")
	if ls := lines(out); len(ls) != 5 || !strings.HasPrefix(ls[4], "orders 9 9 +2 2xx 9 ") {
		t.Errorf("usage get of December printed:\n%s", out)
	}
}

// TestUsageBadUsage: what porticoctl refuses before it calls anything
// exits 2 and says which flag is wrong.
func TestUsageBadUsage(t *testing.T) {
	t.Parallel()
	_, url := quotaService(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"usage", "get", "key:k1", "--period", "2026-13"}, `porticoctl usage get: --period "2026-13" is not a month like 2026-11 (YYYY-MM)`},
		{[]string{"usage", "list", "--period", "november"}, `porticoctl usage list: --period "november" is not a month like 2026-11 (YYYY-MM)`},
		{[]string{"usage", "reconcile", "--period", "2026-1"}, `porticoctl usage reconcile: --period "2026-1" is not a month like 2026-11 (YYYY-MM)`},
		{[]string{"usage", "adjustments", "--period", "2026-11-01"}, `porticoctl usage adjustments: --period "2026-11-01" is not a month like 2026-11 (YYYY-MM)`},
		{[]string{"usage", "export"}, "porticoctl usage export: --period YYYY-MM is required"},
		{[]string{"usage", "export", "--period", "2026-11", "--format", "xml"}, `porticoctl usage export: --format is csv or json, not "xml"`},
		{[]string{"usage", "export", "--period", "2026-11", "-o", "json"}, "porticoctl usage export: -o json needs -f FILE: without it, standard output is the export itself"},
		{[]string{"usage", "get"}, "porticoctl usage get: which subject? porticoctl usage get SUBJECT [flags]"},
		{[]string{"usage", "get", "k1"}, `porticoctl usage get: "k1" is no subject: want key:KEY_ID, app:APP_ID or anonymous`},
		{[]string{"usage", "list", "--page-size", "0"}, "porticoctl usage list: --page-size is between 1 and 10000, not 0"},
		{[]string{"usage", "list", "--page-size", "10001"}, "porticoctl usage list: --page-size is between 1 and 10000, not 10001"},
		{[]string{"usage", "reconcile", "--write-off", "n1"}, "porticoctl usage reconcile: --write-off is for closing the period: add --finalise"},
		{[]string{"usage", "nodes", "n1"}, `porticoctl usage nodes: unexpected "n1": the command takes flags only`},
	} {
		code, out, errOut := ctl(t, quotaEnv(url), tc.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, tc.want+"\n") {
			t.Errorf("porticoctl %s = %d %q %q, want 2 and %q", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
}

// TestUsageServerAndToken: the quota service is --quota-server, else
// $PORTICO_QUOTA_SERVER, else the control plane's address (portico dev),
// with the quota token, else the admin token; a call without a token, or
// with another, is refused.
func TestUsageServerAndToken(t *testing.T) {
	t.Parallel()
	s, url := quotaService(t)
	november(t, s)
	tokenFile := filepath.Join(t.TempDir(), "quota.token")
	if err := os.WriteFile(tokenFile, []byte(quotaToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
	}{
		{quotaEnv(url), nil},
		// portico dev: one address, the platform token.
		{map[string]string{"PORTICO_SERVER": url, "PORTICO_TOKEN": quotaToken}, nil},
		{map[string]string{"PORTICO_SERVER": "http://127.0.0.1:1", "PORTICO_TOKEN": quotaToken}, []string{"--quota-server", url}},
		{map[string]string{"PORTICO_QUOTA_SERVER": "http://127.0.0.1:1", "PORTICO_TOKEN": "admin-token"}, []string{"--quota-server=" + url, "--quota-token-file", tokenFile}},
		{map[string]string{"PORTICO_SERVER": url, "PORTICO_TOKEN": "admin-token"}, []string{"-quota-token-file", tokenFile}},
	} {
		args := append([]string{"usage", "nodes"}, tc.args...)
		if code, out, errOut := ctl(t, tc.env, args...); code != 0 || !strings.HasPrefix(out, "NODE ") {
			t.Errorf("porticoctl %s with %v = %d %q %q, want 0 and the nodes", strings.Join(args, " "), tc.env, code, out, errOut)
		}
	}

	code, out, errOut := ctl(t, map[string]string{"PORTICO_QUOTA_SERVER": url}, "usage", "get", "key:k1")
	want := "porticoctl usage get: unauthenticated: a quota service token is required (Authorization: Bearer …)\n" +
		"porticoctl usage get: no token was given: set --quota-token-file or $PORTICO_QUOTA_TOKEN, or the admin token (--token-file, $PORTICO_TOKEN)\n"
	if code != 1 || out != "" || errOut != want {
		t.Errorf("usage get without a token = %d %q %q, want 1 and %q", code, out, errOut, want)
	}
	code, out, errOut = ctl(t, map[string]string{"PORTICO_QUOTA_SERVER": url, "PORTICO_TOKEN": "admin-token"}, "usage", "list")
	if want := "porticoctl usage list: unauthenticated: unknown token\n"; code != 1 || out != "" || errOut != want {
		t.Errorf("usage list with another token = %d %q %q, want 1 and %q", code, out, errOut, want)
	}
	if code, _, errOut := ctl(t, quotaEnv("http://127.0.0.1:1"), "usage", "nodes"); code != 1 || !strings.HasPrefix(errOut, "porticoctl usage nodes: unavailable: ") {
		t.Errorf("usage nodes with no quota service = %d %q", code, errOut)
	}
}

// TestUsageWriteOff: a node whose missing windows keep November open is
// written off, which closes it and is recorded as an adjustment.
func TestUsageWriteOff(t *testing.T) {
	t.Parallel()
	s, url := quotaService(t)
	november(t, s)
	// n2 sent seqs 1, 2 and 5 of November, and is gone: 3 and 4 are lost.
	deliver(t, s, "n2", spoolB, 1, nov, nil, nil)
	deliver(t, s, "n2", spoolB, 5, nov.Add(40*time.Second), nil)

	out, errOut := usageCtl(t, url, 1, "usage", "reconcile", "--period", "2026-11", "--finalise")
	ls := lines(out)
	if len(ls) != 8 || ls[4] != "n2 "+spoolB+" 3-4 not connected" || ls[6] != "2026-11 was not finalised:" || !strings.Contains(ls[7], "node n2") ||
		errOut != "porticoctl usage reconcile: 2026-11 was not finalised\n" {
		t.Fatalf("usage reconcile --finalise with n2's windows missing printed %q %q", out, errOut)
	}
	out, _ = usageCtl(t, url, 0, "usage", "reconcile", "--period", "2026-11", "--finalise", "--write-off", "n2")
	ls = lines(out)
	if len(ls) != 12 || ls[7] != "NODE SPOOL SEQS" || ls[8] != "n2 "+spoolB+" 3-4" || ls[10] != "2026-11 is final" || !strings.HasPrefix(ls[11], "written off: node n2") {
		t.Errorf("usage reconcile --write-off n2 printed:\n%s", out)
	}
	out, _ = usageCtl(t, url, 0, "usage", "adjustments", "--period", "2026-11", "-o", "json")
	var adjs quotav1.ListAdjustmentsResponse
	if err := protojson.Unmarshal([]byte(out), &adjs); err != nil || len(adjs.GetAdjustments()) != 1 ||
		adjs.GetAdjustments()[0].GetKind() != "write_off" || !strings.Contains(adjs.GetAdjustments()[0].GetSource(), "n2") {
		t.Errorf("usage adjustments after the write-off printed %q (%v), want n2's write-off", out, err)
	}
}
