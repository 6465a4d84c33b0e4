package quota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/portico-gw/portico/gen/portico/quota/v1"
	"github.com/portico-gw/portico/quota/reconcile"
	"github.com/portico-gw/portico/quota/store"
)

// api is the QuotaService handler. Requests reach it authenticated and
// validated (authz).
type api struct{ s *Service }

const (
	defaultPageSize = 100
	// allTotals is the page GetUsage reads a subject's totals in.
	allTotals = 10000
)

func (a *api) GetUsage(ctx context.Context, req *connect.Request[quotav1.GetUsageRequest]) (*connect.Response[quotav1.GetUsageResponse], error) {
	m := req.Msg
	what := fmt.Sprintf("reading the usage of %s in %s", m.GetSubject(), m.GetPeriod())
	resp := &quotav1.GetUsageResponse{}
	if m.GetProduct() != "" {
		// A subject that made no call of the product has no total: the
		// answer is no totals, not an error.
		t, err := a.s.store.Total(ctx, store.Key{Subject: m.GetSubject(), Product: m.GetProduct(), Period: m.GetPeriod()})
		switch {
		case err == nil:
			resp.Totals = append(resp.Totals, totalOf(t))
		case !errors.Is(err, store.ErrNotFound):
			return nil, a.s.errorOf(ctx, what, err)
		}
	} else {
		f := store.TotalsFilter{Period: m.GetPeriod(), Subject: m.GetSubject(), Limit: allTotals}
		for {
			ts, more, err := a.s.store.Totals(ctx, f)
			if err != nil {
				return nil, a.s.errorOf(ctx, what, err)
			}
			for _, t := range ts {
				resp.Totals = append(resp.Totals, totalOf(t))
			}
			if !more || len(ts) == 0 {
				break
			}
			f.After = ts[len(ts)-1].Key
		}
	}
	var err error
	if resp.State, err = a.state(ctx, m.GetPeriod()); err != nil {
		return nil, a.s.errorOf(ctx, what, err)
	}
	return connect.NewResponse(resp), nil
}

func (a *api) ListUsage(ctx context.Context, req *connect.Request[quotav1.ListUsageRequest]) (*connect.Response[quotav1.ListUsageResponse], error) {
	m := req.Msg
	what := "listing the usage of " + m.GetPeriod()
	f := store.TotalsFilter{Period: m.GetPeriod(), Tenant: m.GetTenant(), Limit: int(m.GetPageSize())}
	if f.Limit == 0 {
		f.Limit = defaultPageSize
	}
	if m.GetPageToken() != "" {
		after, err := parsePageToken(m.GetPageToken(), m.GetPeriod(), m.GetTenant())
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		f.After = after
	}
	ts, more, err := a.s.store.Totals(ctx, f)
	if err != nil {
		return nil, a.s.errorOf(ctx, what, err)
	}
	resp := &quotav1.ListUsageResponse{}
	for _, t := range ts {
		resp.Totals = append(resp.Totals, totalOf(t))
	}
	if more && len(ts) > 0 {
		resp.NextPageToken = pageToken(m.GetPeriod(), m.GetTenant(), ts[len(ts)-1].Key)
	}
	if resp.State, err = a.state(ctx, m.GetPeriod()); err != nil {
		return nil, a.s.errorOf(ctx, what, err)
	}
	return connect.NewResponse(resp), nil
}

func (a *api) ListNodes(ctx context.Context, _ *connect.Request[quotav1.ListNodesRequest]) (*connect.Response[quotav1.ListNodesResponse], error) {
	seqs, err := a.s.store.Sequences(ctx, 1000)
	if err != nil {
		return nil, a.s.errorOf(ctx, "listing the node sequences", err)
	}
	resp := &quotav1.ListNodesResponse{}
	for _, q := range seqs {
		resp.Nodes = append(resp.Nodes, &quotav1.NodeSequence{
			NodeId: q.NodeID, SpoolId: q.SpoolID, Region: q.Region,
			Contiguous: q.Contiguous, Highest: q.Highest, Missing: q.Missing, LastWindow: timestamp(q.LastWindow),
		})
	}
	return connect.NewResponse(resp), nil
}

func (a *api) Reconcile(ctx context.Context, req *connect.Request[quotav1.ReconcileRequest]) (*connect.Response[quotav1.ReconcileResponse], error) {
	rep, err := a.s.rec.Run(ctx, req.Msg.GetPeriod(), req.Msg.GetFinalise(), req.Msg.GetWriteOff()...)
	if err != nil {
		return nil, a.s.errorOf(ctx, "reconciling "+req.Msg.GetPeriod(), err)
	}
	return connect.NewResponse(&quotav1.ReconcileResponse{Report: rep}), nil
}

func (a *api) ExportBilling(ctx context.Context, req *connect.Request[quotav1.ExportBillingRequest]) (*connect.Response[quotav1.ExportBillingResponse], error) {
	m := req.Msg
	if _, known := quotav1.BillingFormat_name[int32(m.GetFormat())]; !known {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("no billing format %d", m.GetFormat()))
	}
	what := "exporting the billing lines of " + m.GetPeriod()
	lines, err := a.s.rec.Lines(ctx, m.GetPeriod())
	if err != nil {
		return nil, a.s.errorOf(ctx, what, err)
	}
	data, contentType, err := reconcile.Encode(lines, m.GetFormat())
	if err != nil {
		return nil, a.s.errorOf(ctx, what, err)
	}
	return connect.NewResponse(&quotav1.ExportBillingResponse{Lines: lines, Data: data, ContentType: contentType}), nil
}

func (a *api) ListAdjustments(ctx context.Context, req *connect.Request[quotav1.ListAdjustmentsRequest]) (*connect.Response[quotav1.ListAdjustmentsResponse], error) {
	adjs, err := a.s.store.Adjustments(ctx, req.Msg.GetPeriod())
	if err != nil {
		return nil, a.s.errorOf(ctx, "listing the adjustments of "+req.Msg.GetPeriod(), err)
	}
	resp := &quotav1.ListAdjustmentsResponse{}
	for _, j := range adjs {
		resp.Adjustments = append(resp.Adjustments, &quotav1.Adjustment{
			Period: j.Period, Subject: j.Subject, Product: j.Product, Counted: j.Counted, Billable: j.Billable,
			Kind: j.Kind, Source: adjustmentSource(j), Recorded: timestamp(j.Recorded),
		})
	}
	return connect.NewResponse(resp), nil
}

// adjustmentSource is what caused an adjustment, with a correction's
// reason.
func adjustmentSource(j store.Adjustment) string {
	if j.Reason == "" {
		return j.Source
	}
	return j.Source + ": " + j.Reason
}

func (a *api) state(ctx context.Context, period string) (*quotav1.PeriodState, error) {
	st, err := a.s.store.Period(ctx, period)
	if err != nil {
		return nil, err
	}
	return &quotav1.PeriodState{Period: st.Period, Final: st.Final, Finalised: timestamp(st.Finalised), LastReconciled: timestamp(st.LastReconciled)}, nil
}

func totalOf(t store.Total) *quotav1.Total {
	return &quotav1.Total{
		Subject: t.Subject, Caller: t.Caller, Product: t.Product, Period: t.Period,
		Counted: t.Counts.Counted, Billable: t.Counts.Billable, ByClass: t.Counts.ByClass[:],
		Adjusted: t.Adjusted, Updated: timestamp(t.Updated),
	}
}

// timestamp is t as a Timestamp; nil for the zero time (never).
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
