package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
)

// periodLayout is a billing period as the quota service names it: the
// calendar month in UTC.
const periodLayout = "2006-01"

// Limits of ListUsage, checked here too so a mistake is a usage error
// with the flag's name rather than a refusal.
const (
	maxUsagePageSize = 10000
	// usagePageSize is the page usage list reads in when it follows the
	// pages to the end.
	usagePageSize = 1000
)

// usageCmd is porticoctl usage: the totals, node sequences, reconciler
// and billing export of the quota service.
func (c *cli) usageCmd() *cobra.Command {
	return group(&cobra.Command{
		Use:   "usage",
		Short: "Read usage totals, reconcile and close periods, export billing",
		Long: `Usage reads the quota service's totals: what each caller (an API key, an app
calling with tokens, or anonymous) used of each product in a billing period,
the calendar month in UTC (2026-11). A period is open until the reconciler
closes it; its totals are final from then on, and only a final period's
billing lines can be exported.

The quota service is --quota-server (default $PORTICO_QUOTA_SERVER, else the
control plane's address: portico dev serves it there), with the token in
--quota-token-file (default $PORTICO_QUOTA_TOKEN, else the admin token).`,
		Example: `  porticoctl usage get key:key_01
  porticoctl usage list --period 2026-11 --tenant acme
  porticoctl usage reconcile --period 2026-11 --finalise
  porticoctl usage export --period 2026-11 -f billing-2026-11.csv`,
	}, c.remote(c.usageGetCmd()), c.remote(c.usageListCmd()), c.remote(c.usageNodesCmd()),
		c.remote(c.usageReconcileCmd()), c.remote(c.usageExportCmd()), c.remote(c.usageAdjustmentsCmd()))
}

// periodFlag adds --period to cmd.
func periodFlag(cmd *cobra.Command, period *string, usage string) {
	cmd.Flags().StringVar(period, "period", "", usage)
}

// parsePeriod checks a --period; empty is the current month (UTC) unless
// the period is required.
func parsePeriod(period string, required bool) (string, error) {
	if period == "" {
		if required {
			return "", usagef("--period YYYY-MM is required")
		}
		return time.Now().UTC().Format(periodLayout), nil
	}
	if t, err := time.Parse(periodLayout, period); err != nil || t.Format(periodLayout) != period {
		return "", usagef("--period %q is not a month like 2026-11 (YYYY-MM)", period)
	}
	return period, nil
}

// quotaFailed is failed for a quota service call: when it was refused
// for want of a token and none was given, it says where one goes.
func (c *cli) quotaFailed(err error) error {
	if connect.CodeOf(err) == connect.CodeUnauthenticated && c.quotaToken == "" {
		return errors.Join(failed(err), failf("no token was given: set --quota-token-file or $PORTICO_QUOTA_TOKEN, or the admin token (--token-file, $PORTICO_TOKEN)"))
	}
	return failed(err)
}

func (c *cli) usageGetCmd() *cobra.Command {
	var product, period string
	cmd := &cobra.Command{
		Use:   "get SUBJECT [flags]",
		Short: "Show one caller's totals in a period, by product",
		Long: `Get shows the totals of SUBJECT in a period (default the current month, UTC):
for each product, or only --product's, the calls counted, those billable
(forwarded upstream), what reconciliation adjusted, and the calls by status
class. SUBJECT is key:KEY_ID (an API key), app:APP_ID (an app calling with
tokens) or anonymous.`,
		Example: `  porticoctl usage get key:key_01
  porticoctl usage get app:shop --product orders --period 2026-11`,
		Args: oneArg("subject"),
		RunE: func(cmd *cobra.Command, args []string) error {
			subject := args[0]
			if !strings.HasPrefix(subject, "key:") && !strings.HasPrefix(subject, "app:") && subject != "anonymous" {
				return usagef("%q is no subject: want key:KEY_ID, app:APP_ID or anonymous", subject)
			}
			period, err := parsePeriod(period, false)
			if err != nil {
				return err
			}
			resp, err := c.quota.GetUsage(cmd.Context(), connect.NewRequest(&quotav1.GetUsageRequest{Subject: subject, Product: product, Period: period}))
			if err != nil {
				return c.quotaFailed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			totals, state := resp.Msg.GetTotals(), periodState(resp.Msg.GetState())
			if len(totals) == 0 {
				of := ""
				if product != "" {
					of = " of " + product
				}
				fmt.Fprintf(c.stdout, "%s made no calls%s in %s (%s)\n", subject, of, period, state)
				return nil
			}
			caller := totals[0].GetCaller()
			fmt.Fprintf(c.stdout, "%s in %s (%s)\n", subject, period, state)
			if who := callerSummary(caller); who != "" {
				fmt.Fprintln(c.stdout, who)
			}
			fmt.Fprintln(c.stdout)
			t := newTable(c.stdout, "PRODUCT", "COUNTED", "BILLABLE", "ADJUSTED", "BY STATUS", "UPDATED")
			for _, x := range totals {
				t.row(x.GetProduct(), count(x.GetCounted()), count(x.GetBillable()), signed(x.GetAdjusted()),
					byClass(x.GetByClass()), formatTime(x.GetUpdated()))
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&product, "product", "", "only this `PRODUCT`'s total (default every product)")
	periodFlag(cmd, &period, "the billing period, `YYYY-MM` (default the current month, UTC)")
	return cmd
}

// callerSummary is who a subject is, as its totals name it: "app shop,
// tenant acme, plan gold".
func callerSummary(c *quotav1.Caller) string {
	var parts []string
	for _, p := range [][2]string{{"app", c.GetAppId()}, {"tenant", c.GetTenant()}, {"plan", c.GetPlan()}} {
		if p[1] != "" {
			parts = append(parts, p[0]+" "+p[1])
		}
	}
	return strings.Join(parts, ", ")
}

func (c *cli) usageListCmd() *cobra.Command {
	var period, tenant, pageToken string
	var pageSize int32
	cmd := &cobra.Command{
		Use:   "list [flags]",
		Short: "List every caller's totals in a period",
		Long: `List shows every caller's totals in a period (default the current month, UTC),
or only those of --tenant's callers, in subject and product order.

It reads every page of totals and prints them all. With --page-size N it
prints one page of at most N instead and, if more follow, the command that
prints the next page (the same flags with --page-token); -o json answers the
page with its nextPageToken. --page-token without --page-size reads from that
page to the end.`,
		Example: `  porticoctl usage list --period 2026-11
  porticoctl usage list --tenant acme -o json
  porticoctl usage list --period 2026-11 --page-size 100`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			period, err := parsePeriod(period, false)
			if err != nil {
				return err
			}
			one := cmd.Flags().Changed("page-size")
			if one && (pageSize < 1 || pageSize > maxUsagePageSize) {
				return usagef("--page-size is between 1 and %d, not %d", maxUsagePageSize, pageSize)
			}
			req := &quotav1.ListUsageRequest{Period: period, Tenant: tenant, PageSize: usagePageSize, PageToken: pageToken}
			if one {
				req.PageSize = pageSize
			}
			all := &quotav1.ListUsageResponse{}
			for seen := map[string]bool{}; ; {
				resp, err := c.quota.ListUsage(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return c.quotaFailed(err)
				}
				all.Totals = append(all.Totals, resp.Msg.GetTotals()...)
				all.State = resp.Msg.GetState()
				next := resp.Msg.GetNextPageToken()
				if one {
					all.NextPageToken = next
					break
				}
				if next == "" {
					break
				}
				if seen[next] {
					return failf("the quota service answered page token %q twice", next)
				}
				seen[next] = true
				req.PageToken = next
			}
			if c.structured() {
				return c.printMessage(all)
			}
			state := periodState(all.GetState())
			switch n := len(all.GetTotals()); {
			case n == 0 && tenant != "":
				fmt.Fprintf(c.stdout, "%s (%s): no usage of tenant %s\n", period, state, tenant)
			case n == 0:
				fmt.Fprintf(c.stdout, "%s (%s): no usage\n", period, state)
			default:
				fmt.Fprintf(c.stdout, "%s (%s)\n\n", period, state)
				t := newTable(c.stdout, "SUBJECT", "TENANT", "APP", "PLAN", "PRODUCT", "COUNTED", "BILLABLE", "ADJUSTED")
				for _, x := range all.GetTotals() {
					cl := x.GetCaller()
					t.row(x.GetSubject(), cl.GetTenant(), cl.GetAppId(), cl.GetPlan(), x.GetProduct(),
						count(x.GetCounted()), count(x.GetBillable()), signed(x.GetAdjusted()))
				}
				if err := t.flush(); err != nil {
					return err
				}
			}
			if next := all.GetNextPageToken(); next != "" {
				more := fmt.Sprintf("%s --period %s", cmd.CommandPath(), period)
				if tenant != "" {
					more += " --tenant " + tenant
				}
				fmt.Fprintf(c.stdout, "\nmore follow: %s --page-size %d --page-token %s\n", more, pageSize, next)
			}
			return nil
		},
	}
	f := cmd.Flags()
	periodFlag(cmd, &period, "the billing period, `YYYY-MM` (default the current month, UTC)")
	f.StringVar(&tenant, "tenant", "", "only the callers of this tenant `T`")
	f.Int32Var(&pageSize, "page-size", 0, "print one page of at most `N` totals (1 to 10000) instead of every page")
	f.StringVar(&pageToken, "page-token", "", "start at the page this `TOKEN` names (printed after a page)")
	return cmd
}

func (c *cli) usageNodesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "nodes",
		Short: "Show how far the quota service has each node's usage windows",
		Long: `Nodes shows every node spool the quota service has usage windows of: up to
which seq every window is in (CONTIGUOUS, the mark nodes trim their spools
at), the highest seq seen, how many seqs above CONTIGUOUS are missing (at most
1000 are counted), and when its latest window started.`,
		Example: `  porticoctl usage nodes`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := c.quota.ListNodes(cmd.Context(), connect.NewRequest(&quotav1.ListNodesRequest{}))
			if err != nil {
				return c.quotaFailed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			nodes := resp.Msg.GetNodes()
			if len(nodes) == 0 {
				fmt.Fprintln(c.stdout, "the quota service has no usage window of any node")
				return nil
			}
			t := newTable(c.stdout, "NODE", "SPOOL", "REGION", "CONTIGUOUS", "HIGHEST", "MISSING", "LAST WINDOW")
			for _, n := range nodes {
				missing := strconv.Itoa(len(n.GetMissing()))
				if len(n.GetMissing()) >= 1000 {
					missing += "+" // the service lists 1000 at most
				}
				t.row(n.GetNodeId(), n.GetSpoolId(), n.GetRegion(), count(n.GetContiguous()), count(n.GetHighest()),
					missing, formatTime(n.GetLastWindow()))
			}
			return t.flush()
		},
	}
}

func (c *cli) usageReconcileCmd() *cobra.Command {
	var period string
	var finalise bool
	var writeOff []string
	cmd := &cobra.Command{
		Use:   "reconcile [flags]",
		Short: "Reconcile a period now and, with --finalise, close it",
		Long: `Reconcile runs the quota service's reconciler over a period (default the
current month, UTC) now, as it runs every hour: it asks connected nodes to
re-send the windows missing (gaps), writes back the differences between the
recount and the live totals (corrections), and reports nodes whose own
counters differ from what their windows add up to (counter mismatches).

With --finalise it also closes the period, if every node's windows of it are
in: the totals are final from then on, and the billing lines can be
exported. A period that cannot close yet is reported with what blocks it,
and reconcile exits 1. --write-off NODE gives up on the missing windows of
a node whose disk is gone, so that they no longer block the close; each
write-off is recorded as an adjustment.`,
		Example: `  porticoctl usage reconcile
  porticoctl usage reconcile --period 2026-11 --finalise
  porticoctl usage reconcile --period 2026-11 --finalise --write-off gw-eu-3`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			period, err := parsePeriod(period, false)
			if err != nil {
				return err
			}
			if len(writeOff) > 0 && !finalise {
				return usagef("--write-off is for closing the period: add --finalise")
			}
			resp, err := c.quota.Reconcile(cmd.Context(), connect.NewRequest(&quotav1.ReconcileRequest{Period: period, Finalise: finalise, WriteOff: writeOff}))
			if err != nil {
				return c.quotaFailed(err)
			}
			rep := resp.Msg.GetReport()
			notFinal := finalise && !rep.GetFinalised()
			if c.structured() {
				if err := c.printMessage(resp.Msg); err != nil {
					return err
				}
			} else if err := c.printReport(rep, finalise); err != nil {
				return err
			}
			if notFinal {
				return failf("%s was not finalised", period)
			}
			return nil
		},
	}
	f := cmd.Flags()
	periodFlag(cmd, &period, "the billing period, `YYYY-MM` (default the current month, UTC)")
	f.BoolVar(&finalise, "finalise", false, "close the period if every node's windows of it are in")
	f.StringArrayVar(&writeOff, "write-off", nil, "give up on the missing windows of this `NODE` (with --finalise; repeatable)")
	return cmd
}

// printReport prints what a reconciler run found and did, a table a
// finding, and where the period stands.
func (c *cli) printReport(rep *quotav1.ReconcileReport, finalise bool) error {
	period := rep.GetPeriod()
	fmt.Fprintf(c.stdout, "reconciled %s at %s\n", period, formatTime(rep.GetRan()))
	sections := 0
	section := func(title string, headers ...string) *table {
		sections++
		fmt.Fprintf(c.stdout, "\n%s:\n", title)
		return newTable(c.stdout, headers...)
	}
	if gaps := rep.GetGaps(); len(gaps) > 0 {
		t := section("gaps", "NODE", "SPOOL", "SEQS", "RE-SEND")
		for _, g := range gaps {
			resend := "not connected"
			if g.GetRequested() {
				resend = "asked"
			}
			t.row(g.GetNodeId(), g.GetSpoolId(), seqs(g), resend)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if cs := rep.GetCorrections(); len(cs) > 0 {
		t := section("corrections (written back)", "SUBJECT", "PRODUCT", "COUNTED", "BILLABLE", "REASON")
		for _, x := range cs {
			t.row(x.GetSubject(), x.GetProduct(), signed(x.GetCounted()), signed(x.GetBillable()), x.GetReason())
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if ms := rep.GetCounterMismatches(); len(ms) > 0 {
		t := section("counter mismatches", "NODE", "SPOOL", "SEQ", "NODE COUNTED", "WINDOWS COUNTED", "NODE BILLABLE", "WINDOWS BILLABLE")
		for _, m := range ms {
			t.row(m.GetNodeId(), m.GetSpoolId(), count(m.GetSeq()), count(m.GetNodeCounted()), count(m.GetWindowsCounted()),
				count(m.GetNodeBillable()), count(m.GetWindowsBillable()))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if ws := rep.GetWrittenOff(); len(ws) > 0 {
		t := section("written off", "NODE", "SPOOL", "SEQS")
		for _, g := range ws {
			t.row(g.GetNodeId(), g.GetSpoolId(), seqs(g))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if sections == 0 {
		fmt.Fprintln(c.stdout, "no gaps, corrections or counter mismatches")
	} else {
		fmt.Fprintln(c.stdout)
	}
	// Blocked says why a period did not close; on one that did, it notes
	// what was written off to close it.
	blocked := rep.GetBlocked()
	switch {
	case rep.GetFinalised():
		fmt.Fprintf(c.stdout, "%s is final\n", period)
		for _, b := range blocked {
			fmt.Fprintf(c.stdout, "  %s\n", b)
		}
	case finalise:
		fmt.Fprintf(c.stdout, "%s was not finalised:\n", period)
		for _, b := range blocked {
			fmt.Fprintf(c.stdout, "  %s\n", b)
		}
	default:
		fmt.Fprintf(c.stdout, "%s is open (--finalise closes it once every node's windows of it are in)\n", period)
	}
	return nil
}

// seqs is a gap's seqs: "7", or "7-12".
func seqs(g *quotav1.Gap) string {
	if g.GetFromSeq() == g.GetToSeq() {
		return count(g.GetFromSeq())
	}
	return count(g.GetFromSeq()) + "-" + count(g.GetToSeq())
}

// billingFormats are the values of usage export --format.
var billingFormats = map[string]quotav1.BillingFormat{
	"csv":  quotav1.BillingFormat_BILLING_FORMAT_CSV,
	"json": quotav1.BillingFormat_BILLING_FORMAT_JSON,
}

func (c *cli) usageExportCmd() *cobra.Command {
	var period, formatName, file string
	cmd := &cobra.Command{
		Use:   "export --period YYYY-MM [flags]",
		Short: "Write a final period's billing lines, as CSV or JSON Lines",
		Long: `Export writes the billing lines of a final period (one per tenant, app, product
and plan: counted, billable, billed, overshoot, adjustments) as the quota
service encodes them: CSV with a header row, or with --format json JSON
Lines. They go to standard output as they are, or with -f to FILE, which is
replaced only once the whole export is in hand. A period that is not final
yet is refused: close it with porticoctl usage reconcile --finalise.

-o json or -o yaml, with -f, prints the answer's lines and media type
instead of a sentence; without -f, standard output is the export itself.`,
		Example: `  porticoctl usage export --period 2026-11 > billing-2026-11.csv
  porticoctl usage export --period 2026-11 --format json -f billing-2026-11.jsonl`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			period, err := parsePeriod(period, true)
			if err != nil {
				return err
			}
			format, ok := billingFormats[formatName]
			switch {
			case !ok:
				return usagef("--format is csv or json, not %q", formatName)
			case c.structured() && file == "":
				return usagef("-o %s needs -f FILE: without it, standard output is the export itself", c.output)
			}
			resp, err := c.quota.ExportBilling(cmd.Context(), connect.NewRequest(&quotav1.ExportBillingRequest{Period: period, Format: format}))
			if err != nil {
				return c.quotaFailed(err)
			}
			data := resp.Msg.GetData()
			if file == "" {
				if _, err := c.stdout.Write(data); err != nil {
					return &failure{err: err}
				}
				return nil
			}
			if err := writeFileWhole(file, data); err != nil {
				return &failure{err: err}
			}
			if c.structured() {
				resp.Msg.Data = nil // in the file
				return c.printMessage(resp.Msg)
			}
			fmt.Fprintf(c.stdout, "wrote %d billing lines of %s to %s (%s)\n", len(resp.Msg.GetLines()), period, file, resp.Msg.GetContentType())
			return nil
		},
	}
	f := cmd.Flags()
	periodFlag(cmd, &period, "the final billing period, `YYYY-MM` (required)")
	f.StringVar(&formatName, "format", "csv", "the export's `FORMAT`: csv, or json for JSON Lines")
	f.StringVarP(&file, "file", "f", "", "write the export to `FILE` instead of standard output")
	must(cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"csv", "json"}, cobra.ShellCompDirectiveNoFileComp)))
	must(cmd.MarkFlagFilename("file", "csv", "json", "jsonl"))
	return cmd
}

// writeFileWhole writes data to name through a temporary file beside it,
// so that name is never left holding part of an export.
func writeFileWhole(name string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

func (c *cli) usageAdjustmentsCmd() *cobra.Command {
	var period string
	cmd := &cobra.Command{
		Use:   "adjustments [flags]",
		Short: "List the corrections, late windows and write-offs of a period",
		Long: `Adjustments lists what changed a period's totals (default the current month,
UTC) outside its own windows: the reconciler's corrections, late windows of
earlier, final periods booked into it, and write-offs of nodes' missing
windows (their counts are zero: what was lost is not known).`,
		Example: `  porticoctl usage adjustments --period 2026-12`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			period, err := parsePeriod(period, false)
			if err != nil {
				return err
			}
			resp, err := c.quota.ListAdjustments(cmd.Context(), connect.NewRequest(&quotav1.ListAdjustmentsRequest{Period: period}))
			if err != nil {
				return c.quotaFailed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			adjs := resp.Msg.GetAdjustments()
			if len(adjs) == 0 {
				fmt.Fprintf(c.stdout, "%s has no adjustments\n", period)
				return nil
			}
			t := newTable(c.stdout, "RECORDED", "KIND", "SUBJECT", "PRODUCT", "COUNTED", "BILLABLE", "SOURCE")
			for _, a := range adjs {
				t.row(formatTime(a.GetRecorded()), a.GetKind(), a.GetSubject(), a.GetProduct(),
					signed(a.GetCounted()), signed(a.GetBillable()), a.GetSource())
			}
			return t.flush()
		},
	}
	periodFlag(cmd, &period, "the billing period, `YYYY-MM` (default the current month, UTC)")
	return cmd
}

// periodState is where a period stands, in words.
func periodState(s *quotav1.PeriodState) string {
	switch {
	case s.GetFinal() && s.GetFinalised() != nil:
		return "final since " + formatTime(s.GetFinalised())
	case s.GetFinal():
		return "final"
	case s.GetLastReconciled() != nil:
		return "open, last reconciled " + formatTime(s.GetLastReconciled())
	default:
		return "open, not reconciled yet"
	}
}

// statusClasses name Total.by_class's indexes: class 0 is a request
// that ended before anything was answered.
var statusClasses = []string{"unanswered", "1xx", "2xx", "3xx", "4xx", "5xx"}

// byClass is a total's calls by status class, the classes it has: "2xx
// 10, 4xx 1".
func byClass(counts []uint64) string {
	var parts []string
	for i, n := range counts {
		if n > 0 && i < len(statusClasses) {
			parts = append(parts, statusClasses[i]+" "+count(n))
		}
	}
	return strings.Join(parts, ", ")
}

func count(n uint64) string { return strconv.FormatUint(n, 10) }

// signed is an adjustment: "+2", "-1", or "0".
func signed(n int64) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%+d", n)
}
