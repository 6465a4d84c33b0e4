package reconcile

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/quota/store"
)

// ErrNotFinal is returned (wrapped) for the billing lines of a period
// that is not final: its figures may still change.
var ErrNotFinal = errors.New("reconcile: the period is not final")

// Lines returns a final period's billing lines: one per tenant, app,
// product and plan, in that order. The subjects of an app (its keys, and
// its tokens' "app:" subject) are summed into its line; anonymous calls
// have a line with an empty app. Per subject, billed is min(billable,
// cap) when the plan's cap on the product is hard (a subject's quota is
// what enforcement stops at) and billable otherwise; a line sums its
// subjects' figures, and overshoot is billable - billed. Counted and
// billable include the late windows of earlier periods booked into this
// one; adjustments says how many of the billable calls those were.
func (r *Reconciler) Lines(ctx context.Context, period string) ([]*quotav1.BillingLine, error) {
	if _, _, err := Bounds(period); err != nil {
		return nil, err
	}
	st, err := r.store.Period(ctx, period)
	if err != nil {
		return nil, fmt.Errorf("reconcile: reading period %s: %w", period, err)
	}
	if !st.Final {
		return nil, fmt.Errorf("%w: %s", ErrNotFinal, period)
	}
	_, totals, err := r.totals(ctx, period)
	if err != nil {
		return nil, err
	}
	late, err := r.late(ctx, period)
	if err != nil {
		return nil, err
	}

	type lineKey struct{ tenant, app, product, plan string }
	lines := map[lineKey]*quotav1.BillingLine{}
	line := func(k lineKey) *quotav1.BillingLine {
		l := lines[k]
		if l == nil {
			l = &quotav1.BillingLine{Tenant: k.tenant, AppId: k.app, Product: k.product, Period: period, Plan: k.plan}
			lines[k] = l
		}
		return l
	}
	keyOf := func(subject, product string, c *quotav1.Caller) lineKey {
		k := lineKey{tenant: c.GetTenant(), app: c.GetAppId(), product: product, plan: c.GetPlan()}
		if app, ok := strings.CutPrefix(subject, "app:"); ok && k.app == "" {
			k.app = app
		}
		if subject == "anonymous" {
			k.app = ""
		}
		return k
	}
	seen := map[store.Key]lineKey{}
	for _, t := range totals {
		k := keyOf(t.Subject, t.Product, t.Caller)
		seen[t.Key] = k
		l := line(k)
		billed := t.Counts.Billable
		if r.opts.Caps != nil {
			if limit, hard := r.opts.Caps(k.plan, k.product); hard && billed > limit {
				billed = limit
			}
		}
		l.Counted += t.Counts.Counted
		l.Billable += t.Counts.Billable
		l.Billed += billed
		l.Overshoot += t.Counts.Billable - billed
	}
	for key, v := range late {
		k, ok := seen[key]
		if !ok {
			// A late window with no total: not possible while the store
			// books both in one transaction, but never dropped.
			k = keyOf(key.Subject, key.Product, nil)
		}
		line(k).Adjustments += v[1]
	}

	out := make([]*quotav1.BillingLine, 0, len(lines))
	for _, l := range lines {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *quotav1.BillingLine) int {
		for _, c := range [...]int{
			strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.AppId, b.AppId),
			strings.Compare(a.Product, b.Product), strings.Compare(a.Plan, b.Plan),
		} {
			if c != 0 {
				return c
			}
		}
		return 0
	})
	return out, nil
}

// Columns are the billing export's fields, in the order of the CSV
// columns; the JSON Lines objects use the same names.
var Columns = []string{"tenant", "app_id", "product", "period", "plan", "counted", "billable", "billed", "overshoot", "adjustments"}

func record(l *quotav1.BillingLine) []string {
	return []string{
		l.GetTenant(), l.GetAppId(), l.GetProduct(), l.GetPeriod(), l.GetPlan(),
		strconv.FormatUint(l.GetCounted(), 10), strconv.FormatUint(l.GetBillable(), 10),
		strconv.FormatUint(l.GetBilled(), 10), strconv.FormatUint(l.GetOvershoot(), 10),
		strconv.FormatInt(l.GetAdjustments(), 10),
	}
}

// WriteCSV writes lines as CSV (RFC 4180: CRLF line ends, a field quoted
// when it holds a comma, a quote or a line end) with a header row of
// Columns.
func WriteCSV(w io.Writer, lines []*quotav1.BillingLine) error {
	cw := csv.NewWriter(w)
	cw.UseCRLF = true
	if err := cw.Write(Columns); err != nil {
		return err
	}
	for _, l := range lines {
		if err := cw.Write(record(l)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// jsonLine is a billing line as WriteJSON writes it: field names and
// order fixed (protojson's output is deliberately not byte-stable), the
// figures as JSON numbers.
type jsonLine struct {
	Tenant      string `json:"tenant"`
	AppID       string `json:"app_id"`
	Product     string `json:"product"`
	Period      string `json:"period"`
	Plan        string `json:"plan"`
	Counted     uint64 `json:"counted"`
	Billable    uint64 `json:"billable"`
	Billed      uint64 `json:"billed"`
	Overshoot   uint64 `json:"overshoot"`
	Adjustments int64  `json:"adjustments"`
}

// WriteJSON writes lines as JSON Lines: one object per line, with the
// fields of Columns in that order.
func WriteJSON(w io.Writer, lines []*quotav1.BillingLine) error {
	enc := json.NewEncoder(w)
	for _, l := range lines {
		if err := enc.Encode(jsonLine{
			Tenant: l.GetTenant(), AppID: l.GetAppId(), Product: l.GetProduct(), Period: l.GetPeriod(), Plan: l.GetPlan(),
			Counted: l.GetCounted(), Billable: l.GetBillable(), Billed: l.GetBilled(), Overshoot: l.GetOvershoot(),
			Adjustments: l.GetAdjustments(),
		}); err != nil {
			return err
		}
	}
	return nil
}

// Media types of the two encodings.
const (
	ContentTypeCSV  = "text/csv; charset=utf-8; header=present"
	ContentTypeJSON = "application/jsonl"
)

// Encode encodes lines in format (unspecified: JSON Lines) and returns
// the bytes and their media type.
func Encode(lines []*quotav1.BillingLine, format quotav1.BillingFormat) (data []byte, contentType string, err error) {
	var b bytes.Buffer
	switch format {
	case quotav1.BillingFormat_BILLING_FORMAT_CSV:
		err, contentType = WriteCSV(&b, lines), ContentTypeCSV
	case quotav1.BillingFormat_BILLING_FORMAT_JSON, quotav1.BillingFormat_BILLING_FORMAT_UNSPECIFIED:
		err, contentType = WriteJSON(&b, lines), ContentTypeJSON
	default:
		return nil, "", fmt.Errorf("reconcile: no billing format %v", format)
	}
	if err != nil {
		return nil, "", err
	}
	return b.Bytes(), contentType, nil
}
