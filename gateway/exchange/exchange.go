// Package exchange holds the record of one request through a gateway
// node: what the request chain found and decided as it ran (the pool, the
// route, the caller's identity, the protocol), who answered and how (a
// refusal of the gateway's own, with its code, or the upstream's answer),
// the bytes each way, and the upstream attempt (when it started and ended,
// the endpoint, whether the server side failed).
//
// The node starts a Record when a request arrives and hands it, once the
// request is over whatever its exit, to the one place that reads it
// (gateway's finish), which feeds route statistics and, later, usage,
// metrics, access logs and spans. Everything that answers a request for
// the gateway itself does so through Record.Refuse, which writes the
// refusal in the caller's protocol and records its code; the proxy records
// the upstream attempt.
//
// A Record belongs to one request and is used by the goroutine serving it
// (and, for streams, the goroutines the proxy runs for it while the
// handler waits); it is not safe for use after the handler returns.
package exchange

import (
	"net/http"
	"time"

	"github.com/portico-gw/portico/gateway/auth"
	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/routestats"
	"github.com/portico-gw/portico/gateway/snapshot"
)

// Writer is who answered a request.
type Writer uint8

const (
	// Nobody: the request ended before anything was written (the caller
	// went away, or a handler panicked).
	Nobody Writer = iota
	// Gateway: the gateway refused the request, or answered for an
	// upstream that failed; Record.Code says why.
	Gateway
	// Upstream: the upstream's answer, passed on.
	Upstream
)

func (w Writer) String() string {
	switch w {
	case Gateway:
		return "gateway"
	case Upstream:
		return "upstream"
	}
	return "nobody"
}

// Record is one request's record. The zero value is ready to use; Reset
// readies a used one for the next request.
type Record struct {
	// Start is when the request reached the chain.
	Start time.Time
	// Pool is the listener pool's name; RequestID the request's id (the
	// caller's X-Request-Id, or the gateway's).
	Pool      string
	RequestID string
	// Route is the route the request matched, nil before (or without) a
	// match; Stats is its counters in the request's snapshot.
	Route *snapshot.Route
	Stats *routestats.Route
	// Identity is the caller's, once authenticated (Kind Anonymous on
	// public routes).
	Identity auth.Identity
	// Protocol is the protocol the request is served in, once the chain
	// has read it.
	Protocol problem.Protocol
	// Synthetic marks a probe the node sends through its own request
	// chain (gateway.Node.ProbeRoutes), never a client's request: the
	// node sets it after Reset, and nothing a client sends can. On a
	// synthetic record the chain runs no authentication (Identity is
	// auth.SyntheticCaller's) and takes no rate limit, and finish leaves
	// the route's counters (Stats) alone: probes are counted apart. Every
	// sink must skip a synthetic record in what it counts as calls:
	// usage windows, quotas and billing count only real callers. (Its
	// Pool is the pool whose route table it went through: "" for the
	// table of the routes every pool serves.)
	Synthetic bool
	// ProbeOf is the id of the route a synthetic record is the probe of,
	// set with Synthetic. The chain refuses the probe, before it grants
	// the synthetic caller anything, if it matches another route: the
	// snapshot swapped between the probe's tick and its call.
	ProbeOf string

	// By is who answered, and Code the gateway's reason when By is
	// Gateway. Status is the HTTP status written to the caller (0 while
	// none is); for gRPC it is 200 whatever the call's status.
	By     Writer
	Code   problem.Code
	Status int
	// BytesIn is the request body the caller sent (as far as it was
	// read), BytesOut the response body written to it.
	BytesIn, BytesOut int64

	// Forwarded says the request reached the proxy: an upstream attempt
	// was made, or refused there (no endpoint, the cluster's concurrency
	// limit). UpstreamStart and UpstreamEnd bound it, Endpoint is the
	// address chosen, and UpstreamFailed says whether the server side
	// failed it (an HTTP 5xx, a cut-off answer, or a gRPC status UNKNOWN,
	// DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE or DATA_LOSS): what the
	// rollout judge counts.
	Forwarded                  bool
	UpstreamStart, UpstreamEnd time.Time
	Endpoint                   string
	UpstreamFailed             bool

	// Room for the decisions of the protection and canary layers: how
	// often the call was retried, whether it was shed, and which variant
	// of a canary split served it.
	Retries int
	Shed    bool
	Canary  string

	// w is the caller's ResponseWriter as Writer wraps it.
	w responseWriter
}

// Reset readies x for a new request, arriving now on pool, answered
// through w. It returns the ResponseWriter the chain must write to, which
// counts what is written.
func (x *Record) Reset(w http.ResponseWriter, pool string, now time.Time) http.ResponseWriter {
	*x = Record{Start: now, Pool: pool}
	x.w = responseWriter{ResponseWriter: w, x: x}
	return &x.w
}

// Refuse answers r for the gateway: p in the protocol as (problem.WriteAs),
// recorded as the gateway's answer with p's code. A nil x writes without
// recording (code that runs without a node, such as unit tests).
func (x *Record) Refuse(w http.ResponseWriter, r *http.Request, as problem.Protocol, p problem.Problem) {
	if x != nil {
		x.By, x.Code = Gateway, p.Code
	}
	problem.WriteAs(w, r, as, p)
}

// EndedByGateway records that the gateway ended an answer already under
// way with a gRPC status of its own, in its trailers: a request message
// refused mid-stream, or an upstream that failed mid-stream. The caller
// sets the trailers.
func (x *Record) EndedByGateway(code problem.Code) {
	if x != nil {
		x.By, x.Code = Gateway, code
	}
}

// Answered records that the upstream's answer is being passed on.
func (x *Record) Answered() {
	if x != nil {
		x.By, x.Code = Upstream, ""
	}
}

// UpstreamTime is how long the upstream attempt took: zero when there was
// none.
func (x *Record) UpstreamTime() time.Duration {
	if !x.Forwarded {
		return 0
	}
	return x.UpstreamEnd.Sub(x.UpstreamStart)
}

// responseWriter counts what the chain writes to the caller. It passes
// Flush through, and Unwrap gives http.ResponseController the writer
// underneath (read deadlines, full duplex).
type responseWriter struct {
	http.ResponseWriter
	x *Record
}

func (w *responseWriter) WriteHeader(code int) {
	if w.x.Status == 0 || w.x.Status < 200 && code >= 200 {
		w.x.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if w.x.Status == 0 {
		w.x.Status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.x.BytesOut += int64(n)
	return n, err
}

func (w *responseWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if w.x.Status == 0 {
			w.x.Status = http.StatusOK
		}
		f.Flush()
	}
}

func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
