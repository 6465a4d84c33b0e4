package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"time"

	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/snapshot"
)

// maxProbeBody bounds what a probe reads of an answer's body: the rest
// is cut off, and the probe judged on the status it got.
const maxProbeBody = 1 << 20

// errProbeBodyCut is what a probe's writer returns past maxProbeBody,
// which makes the proxy stop copying the answer.
var errProbeBodyCut = errors.New("gateway: a probe reads at most 1 MiB of an answer")

// probe sends route r's probe through the request chain of p and counts
// its outcome under the route's id. A probe cut short by the end of its
// set (its duration, a stop, the next set) is not counted, nor one that
// matched another route because a snapshot swapped while it ran (which
// the chain refuses, see exchange.Record.ProbeOf).
func (n *Node) probe(set context.Context, p *pool, r *snapshot.Route) {
	pr := r.Probe
	ctx, cancel := context.WithTimeout(set, min(r.Timeout, MaxProbeTimeout))
	defer cancel()
	req, err := probeRequest(ctx, pr)
	if err != nil {
		n.log.Warn("a route's probe cannot be sent", "route", r.ID, "err", err)
		return
	}
	w := &probeWriter{h: make(http.Header)}
	start := time.Now()
	matched, aborted := p.serveProbe(w, req, r.ID)
	took := time.Since(start)
	if set.Err() != nil || matched != r.ID {
		return
	}
	class, counted := w.outcome(pr.GRPC, aborted, ctx.Err() != nil, r.Timeout <= MaxProbeTimeout)
	if counted {
		n.probes.counts.Route(r.ID).Observe(!pr.Passes(class), took)
	}
}

// outcome is the status class a probe's answer counts as, or counted
// false when it is no evidence either way. aborted says the chain
// aborted the answer; timedOut that the probe's deadline passed first,
// which was the route's own timeout if routeDeadline, else
// MaxProbeTimeout, below the route's.
//
// A probe that ran out of time is judged on what it got by then, since
// answers that stream (server-sent events, a server-streaming gRPC call,
// a long poll) hold their body open past any deadline: an HTTP status,
// once written, is the answer; a gRPC call that sent its headers but no
// grpc-status yet is not counted; no answer at all fails it when the
// route's timeout passed (a client would have got the gateway's 504;
// the probe's deadline, set first, ends its call a moment before the
// proxy's timer would write it) and is not counted below a longer route
// timeout, which the call might still have met.
func (w *probeWriter) outcome(grpc, aborted, timedOut, routeDeadline bool) (class int, counted bool) {
	switch {
	case !timedOut && aborted:
		return 5, true // a cut-off answer
	case !timedOut:
		return w.class(grpc), true
	case w.status == 0:
		return 5, routeDeadline
	case grpc && w.status == http.StatusOK && !w.hasGRPCStatus():
		return 0, false
	}
	return w.class(grpc), true
}

// probeRequest is the request of a probe, bound to ctx.
func probeRequest(ctx context.Context, pr *snapshot.Probe) (*http.Request, error) {
	target := pr.Target()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, err
	}
	h := make(http.Header, len(pr.Header)+1)
	for k, v := range pr.Header {
		h[k] = append([]string(nil), v...)
	}
	if pr.ContentType != "" {
		h["Content-Type"] = []string{pr.ContentType}
	}
	req := &http.Request{
		Method: pr.Method, URL: u, RequestURI: target, Host: pr.Host, Header: h,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Body: http.NoBody,
	}
	if pr.GRPC {
		req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/2.0", 2, 0
	}
	if len(pr.Body) > 0 {
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(pr.Body)), int64(len(pr.Body))
	}
	return req.WithContext(ctx), nil
}

// serveProbe runs one probe through the pool's request chain, as
// ServeHTTP runs a client's request, except that its record is marked
// synthetic (see exchange.Record.Synthetic), the probe of the route with
// id routeID (exchange.Record.ProbeOf), and that it is left out of
// the pool's counts of requests started and finished: those are the
// clients' requests that a drain waits for and cuts, and the node stops
// its probes before it drains. It returns the id of the route the probe
// matched ("" for none) and whether the chain aborted the answer (a
// panic, which the server would have recovered from a client's request;
// one other than http.ErrAbortHandler is logged, as the server logs it).
func (p *pool) serveProbe(w http.ResponseWriter, r *http.Request, routeID string) (matched string, aborted bool) {
	x := records.Get().(*exchange.Record)
	w = x.Reset(w, p.name, time.Now())
	x.Synthetic, x.ProbeOf = true, routeID
	defer func() {
		if x.Route != nil {
			matched = x.Route.ID
		}
		if v := recover(); v != nil {
			aborted = true
			if v != http.ErrAbortHandler {
				p.node.log.Error("a probe's request panicked", "route", matched, "panic", v, "stack", string(debug.Stack()))
			}
		}
		p.node.finish(x)
	}()
	p.serve(x, w, r)
	return matched, aborted
}

// probeWriter takes a probe's answer: its status and headers, trailers
// included, and the size of its body, which it drops.
type probeWriter struct {
	h      http.Header
	status int
	body   int64
	// cut says the body was cut off at maxProbeBody.
	cut bool
}

func (w *probeWriter) Header() http.Header { return w.h }

func (w *probeWriter) WriteHeader(code int) {
	if w.status == 0 || w.status < 200 && code >= 200 {
		w.status = code
	}
}

func (w *probeWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.body+int64(len(b)) > maxProbeBody {
		w.cut = true
		return 0, errProbeBodyCut
	}
	w.body += int64(len(b))
	return len(b), nil
}

// Flush does nothing: nobody reads the answer as it comes.
func (w *probeWriter) Flush() {}

// class is the status class of the answer (2 for 2xx): a gRPC call's
// by its grpc-status (in the trailers, or the headers of a trailers-only
// answer), which config.v1.StatusClass maps as routestats counts
// failures: OK is 2xx, UNKNOWN, DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE
// and DATA_LOSS 5xx, every other code 4xx. A gRPC answer that ends
// without a status failed (5xx), unless the probe cut it off first, which
// leaves its HTTP status. No answer at all is 5xx.
func (w *probeWriter) class(grpc bool) int {
	if w.status < 100 || w.status > 599 {
		return 5
	}
	if !grpc || w.status != http.StatusOK {
		return w.status / 100
	}
	v := w.grpcStatus()
	if len(v) == 0 {
		if w.cut {
			return 2
		}
		return 5
	}
	switch {
	case v[0] == "0":
		return 2
	case problem.IsServerFault(v[0]):
		return 5
	}
	for _, c := range []byte(v[0]) {
		if c < '0' || c > '9' {
			return 5 // not a status: the answer is broken
		}
	}
	return 4
}

// grpcStatus is the answer's grpc-status: in the trailers, or the headers
// of a trailers-only answer.
func (w *probeWriter) grpcStatus() []string { return problem.GRPCStatus(w.h) }

// hasGRPCStatus reports whether the answer has a grpc-status.
func (w *probeWriter) hasGRPCStatus() bool { return len(w.grpcStatus()) > 0 }
