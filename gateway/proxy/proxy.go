// Package proxy forwards one request to an upstream cluster and streams the
// answer back: it rewrites headers (hop-by-hop removed, client identity
// headers stripped, forwarding and trace headers set), streams both bodies
// without buffering them, enforces the body size limit as the body streams,
// keeps HTTP/2 trailers (grpc-status) intact, and turns upstream failures
// into gateway errors in the caller's protocol.
//
// The per-request cost is the point of this package: one outbound request
// allocation, a header map sized once, pooled copy buffers, no reflection.
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/portico-gw/portico/gateway/auth"
	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/upstream"
)

// Target is where and how one request goes. The node fills it in after
// routing; Serve does not keep it.
type Target struct {
	Cluster *upstream.Cluster
	// Path is the normalised, still-escaped path to send, and RawQuery the
	// query without '?'.
	Path     string
	RawQuery string
	// Timeout bounds the upstream exchange, response body included. For gRPC
	// a smaller grpc-timeout from the client wins.
	Timeout time.Duration
	// MaxBody caps the request body; larger is answered 413.
	MaxBody int64
	// RequestID is sent as X-Request-Id.
	RequestID string
	// Traceparent is the trace context to send (the gateway's child span).
	// Tracestate from the client is passed through unchanged.
	Traceparent string
	// ClientIP is the peer address of the client, without port.
	ClientIP string
	// TLS says the client reached the gateway over TLS.
	TLS bool
	// RealIP is the client's address as far as the gateway can vouch for
	// it: the peer, or behind trusted proxies the nearest X-Forwarded-For
	// address that is not one of them. It is sent as X-Real-Ip.
	RealIP string
	// TrustForwarded appends to the client's X-Forwarded-For and Forwarded
	// instead of replacing them: set only when the peer is a trusted proxy.
	TrustForwarded bool
	// Identity is sent as the x-auth-* headers (none for Anonymous).
	Identity auth.Identity
	// EditRequest edits the outbound headers after the client's credential
	// and identity headers are dropped and before the gateway's own are
	// set; EditResponse edits the upstream's response headers. Nil: none.
	EditRequest, EditResponse HeaderEditor
	// Record, if set, is the request's record: Serve notes the upstream
	// attempt in it (its start and end, to the end of the response, the
	// endpoint, whether the server side failed it), who answered, and the
	// code of a refusal of its own.
	Record *exchange.Record

	// status is the HTTP status Serve wrote (0 until it writes one).
	status int
}

// HeaderEditor edits a header map (an http.Header) in place.
type HeaderEditor interface {
	Apply(map[string][]string)
}

// Forwarder forwards requests. The zero value is not usable; call New. It is
// safe for concurrent use.
type Forwarder struct {
	log  *slog.Logger
	bufs sync.Pool
}

// New returns a Forwarder logging upstream failures to log (nil means
// slog.Default()).
func New(log *slog.Logger) *Forwarder {
	if log == nil {
		log = slog.Default()
	}
	f := &Forwarder{log: log}
	f.bufs.New = func() any {
		b := make([]byte, copyBufferSize)
		return &b
	}
	return f
}

const copyBufferSize = 32 << 10

var errBodyTooLarge = errors.New("request body exceeds the route's limit")

// Serve forwards r to t and writes the answer to w. It writes a problem
// itself when the request fails before the upstream's response headers
// arrive. w's X-Request-Id is expected to be set by the caller.
func (f *Forwarder) Serve(w http.ResponseWriter, r *http.Request, t *Target) {
	var out *outbound
	if x := t.Record; x != nil {
		x.Forwarded, x.UpstreamStart = true, time.Now()
		defer func() {
			x.UpstreamEnd, x.UpstreamFailed = time.Now(), serverFailed(t.status, w.Header())
			if out != nil {
				// The body as far as the transport has read it (it may
				// go on a moment after a failure).
				x.BytesIn = out.body.n.Load()
			}
		}()
	}
	grpc := problem.IsGRPC(headerValue(r.Header, "Content-Type"))
	if r.ContentLength > t.MaxBody {
		f.fail(w, r, t, problem.PayloadTooLarge, "request body exceeds the route's limit", nil)
		return
	}

	ep, err := t.Cluster.Pick()
	if err == nil && t.Record != nil {
		t.Record.Endpoint = ep.Address()
	}
	if err != nil {
		detail := "no healthy endpoint in the upstream cluster"
		if errors.Is(err, upstream.ErrOverloaded) {
			detail = "the upstream cluster is at its concurrency limit"
		}
		w.Header()["Retry-After"] = retryAfterOne
		f.fail(w, r, t, problem.UpstreamUnavailable, detail, nil)
		return
	}

	timeout, sendTimeout := timeouts(r, t, grpc)
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()

	out = newOutbound(ctx, r, t, ep.Address(), grpc, sendTimeout)
	resp, err := t.Cluster.Transport().RoundTrip(out.req)
	if err != nil {
		ep.Done(f.roundTripFailed(w, r, t, ctx, out, err))
		return
	}
	// respond panics with http.ErrAbortHandler when the upstream fails
	// mid-body; the endpoint's slot must be released then too, as a failure.
	outcome := upstream.Failure
	defer func() { ep.Done(outcome) }()
	outcome = f.respond(w, r, t, ctx, out, resp, grpc, upstream.OutcomeOf(ctx, resp, nil))
}

// Timeout is how long the gateway lets the call r to t run: t.Timeout, or
// the shorter deadline a gRPC caller set (see timeouts). Serve holds the
// upstream exchange to it; the node holds the reads of the request it does
// itself, before it calls Serve, to it too.
func Timeout(r *http.Request, t *Target) time.Duration {
	d, _ := timeouts(r, t, problem.IsGRPC(headerValue(r.Header, "Content-Type")))
	return d
}

// timeouts returns the gateway's own timeout for the call r to t and the
// grpc-timeout to send upstream (zero: none).
//
// The route's timeout bounds the call; the upstream hears of a deadline
// only when the caller set one (as grpc-timeout, the smaller of the
// caller's and the route's), as it would without a gateway. The gateway's
// own timer gives a caller's deadline callerSlack more: the header is
// rounded down to its unit and reaches the gateway a moment after the
// caller started its clock, so cutting the call at the header's value
// could answer just before the caller's own deadline, while the caller
// tears its side down (a Connect client then read a cut-off error body).
func timeouts(r *http.Request, t *Target, grpc bool) (timeout, send time.Duration) {
	timeout = t.Timeout
	if grpc {
		if d, ok := parseGRPCTimeout(headerValue(r.Header, "Grpc-Timeout")); ok {
			send = min(timeout, d)
			timeout = min(timeout, d+callerSlack)
		}
	}
	return timeout, send
}

// roundTripFailed answers a request whose upstream exchange failed before
// response headers and says what the failure means for the endpoint.
func (f *Forwarder) roundTripFailed(w http.ResponseWriter, r *http.Request, t *Target, ctx context.Context, out *outbound, err error) upstream.Outcome {
	tooLarge, bodyErr := out.body.failure()
	switch {
	case tooLarge:
		f.fail(w, r, t, problem.PayloadTooLarge, "request body exceeds the route's limit", nil)
		return upstream.Canceled
	case r.Context().Err() != nil:
		// The client is gone; nobody is listening for an answer. (499,
		// "client closed request": not the server's failure.)
		t.status = 499
		return upstream.Canceled
	case bodyErr != nil && refusal(bodyErr) != nil:
		// The gateway refused a message of the body (validation).
		p := refusal(bodyErr)
		p.Instance, p.RequestID = t.Path, t.RequestID
		t.status = p.Code.Status()
		t.Record.Refuse(w, r, problem.ProtocolOf(r), *p)
		return upstream.Canceled
	case bodyErr != nil:
		// Reading the client's body failed: bad chunking, a reset stream.
		// An HTTP/1 connection cannot be reused after a broken body; on
		// HTTP/2, "close" would send the whole connection a GOAWAY.
		if r.ProtoMajor == 1 {
			w.Header()["Connection"] = closeValue
		}
		f.fail(w, r, t, problem.BadRequest, "malformed request body", nil)
		return upstream.Canceled
	case timedOut(ctx):
		f.fail(w, r, t, problem.UpstreamTimeout, "the upstream did not answer within the route's timeout", err)
		return upstream.Failure
	case isDialError(err):
		w.Header()["Retry-After"] = retryAfterOne
		f.fail(w, r, t, problem.UpstreamUnavailable, "could not connect to the upstream", err)
		return upstream.Failure
	default:
		f.fail(w, r, t, problem.UpstreamError, "the upstream connection failed", err)
		return upstream.Failure
	}
}

func (f *Forwarder) fail(w http.ResponseWriter, r *http.Request, t *Target, code problem.Code, detail string, cause error) {
	if cause != nil {
		cluster := ""
		if t.Cluster != nil {
			cluster = t.Cluster.Name()
		}
		f.log.Warn("upstream request failed", "request_id", t.RequestID, "cluster", cluster, "code", string(code), "err", cause)
	}
	t.status = code.Status()
	t.Record.Refuse(w, r, problem.ProtocolOf(r), problem.Problem{Code: code, Detail: detail, Instance: t.Path, RequestID: t.RequestID})
}

// serverFailed reports whether an answer is a server-side failure: an
// HTTP 5xx (or none written: the handler was aborted), or a gRPC status
// UNKNOWN, DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE or DATA_LOSS, in the
// trailers or the headers of a trailers-only answer.
func serverFailed(status int, h http.Header) bool {
	if status == 0 || status >= 500 {
		return true
	}
	v := problem.GRPCStatus(h)
	return len(v) > 0 && problem.IsServerFault(v[0])
}

// refusal is the Problem a request body's error carries, if the gateway
// refused part of the body (a message that breaks the service's rules).
func refusal(err error) *problem.Problem {
	var pe *problem.Error
	if errors.As(err, &pe) {
		p := pe.Problem
		return &p
	}
	return nil
}

// timedOut reports whether ctx's deadline has passed or is about to. A gRPC
// backend that got grpc-timeout resets the stream when its own timer fires,
// which can be a moment before the gateway's: that is a timeout too.
func timedOut(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) < deadlineSlack
}

// callerSlack is how much longer than a caller's deadline the gateway
// lets a call run: more than the rounding of a timeout header (1 ms for
// Connect) and the time the request takes to arrive.
const callerSlack = 5 * time.Millisecond

// deadlineSlack is how close to the deadline an upstream failure counts as a
// timeout.
const deadlineSlack = 20 * time.Millisecond

var (
	retryAfterOne = []string{"1"}
	closeValue    = []string{"close"}
)

func headerValue(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}
