package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/proxy"
	"github.com/portico-gw/portico/gateway/router"
	"github.com/portico-gw/portico/gateway/snapshot"
	"github.com/portico-gw/portico/gateway/transcode"
)

// rpcCall is what serveRPC needs of a transcoded call: the route it
// matched and where to forward it.
type rpcCall struct {
	route  *snapshot.Route
	target *proxy.Target
	st     *state
	// refused is the gateway's own refusal of the call (validation), kept
	// for REST callers: gRPC has no 413, and the problem says it best.
	refused *problem.Problem
	// body is the caller's request body, which the transcoder reads.
	body io.ReadCloser
	// answer is the writer of an RPC caller's answer, kept here so that
	// it costs no allocation of its own.
	answer transcode.RPCAnswer
	// in is the caller's body as the transcoder reads it, counted.
	in countedBody
}

// countedBody counts what is read of a body. The transport may read it
// on a goroutine of its own.
type countedBody struct {
	io.ReadCloser
	n atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

type rpcCallKey struct{}

// transcode hands a gRPC-Web, Connect or REST call of a service route to
// the service's transcoder, which calls serveRPC with the gRPC request.
// proto is the caller's protocol as its headers say, t.Record.Protocol
// the one the call is served in (see servedAs).
func (n *Node) transcode(w http.ResponseWriter, r *http.Request, st *state, route *snapshot.Route, t *proxy.Target, params *router.Params, proto problem.Protocol) {
	x := t.Record
	q, p := transcode.CheckQuery(route, t.RawQuery)
	if p != nil {
		p.Instance, p.RequestID = t.Path, t.RequestID
		x.Refuse(w, r, proto, *p)
		return
	}
	t.RawQuery = q
	served := x.Protocol
	p = transcode.CheckEncoding(w.Header(), r, served)
	if p == nil && !route.RPC.REST() {
		p = transcode.CheckMediaType(r, served)
	}
	if p != nil {
		p.Instance, p.RequestID = t.Path, t.RequestID
		x.Refuse(w, r, served, *p)
		return
	}
	if route.RPC.REST() && route.RPC.Method.IsStreamingServer() {
		// A REST stream: the transcoder's REST streams are for HttpBody
		// only; the gateway streams JSON lines or events itself.
		up := *t
		up.Path, up.RawQuery = route.RPC.Path, ""
		// The request message is built from the body first.
		var rc *http.ResponseController
		if route.RPC.Body != "" {
			rc = boundReads(w, t.Timeout)
		}
		st.rpc.ServeServerStream(w, r, route, params, t.RawQuery, x, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			releaseReads(rc)
			_ = n.forwardRPC(w, r, st, route, &up)
		}))
		return
	}
	call := &rpcCall{route: route, target: t, st: st, body: r.Body}
	ctx := context.WithValue(r.Context(), rpcCallKey{}, call)
	r2 := r.WithContext(ctx)
	// The caller's body, counted as the transcoder reads it (the proxy
	// counts the transcoded one).
	call.in.ReadCloser = r.Body
	r2.Body = &call.in
	defer func() { x.BytesIn = call.in.n.Load() }()
	// The transcoder routes by path again: give it the normalised path and
	// the query the upstream may see (an API key in it removed).
	u := *r.URL
	u.Path, u.RawPath, u.RawQuery = t.Path, "", t.RawQuery
	r2.URL = &u
	// The transcoder rewrites the request's headers for the upstream; the
	// caller's stay as they came, for the answer.
	r2.Header = r.Header.Clone()
	if !route.RPC.REST() && proto == problem.HTTP && r2.Header.Get("Connect-Protocol-Version") == "" {
		// A plain POST (or GET) of JSON or proto to a method's path is a
		// Connect unary call, which may leave the header out; the route
		// says so, where the transcoder would take it for REST.
		r2.Header.Set("Connect-Protocol-Version", "1")
		proto = problem.ProtocolOf(r2)
	}
	// RPC callers get the transcoder's answer with its error messages
	// redacted, like the gateway's own.
	call.answer.Record = x
	if ct := headerValue(r.Header, "Content-Type"); transcode.IsGRPCWebText(ct) {
		transcode.FromGRPCWebText(st.rpc.For(route.RPC.Service), &call.answer, w, r2)
		return
	}
	if proto != problem.HTTP {
		call.answer.Reset(w, r, proto)
		st.rpc.For(route.RPC.Service).ServeHTTP(&call.answer, r2)
		call.answer.Finish()
		return
	}
	// REST callers get errors as Problem Details, like the gateway's own.
	ew := &restErrors{ResponseWriter: w, r: r, rid: t.RequestID, instance: t.Path, call: call}
	st.rpc.For(route.RPC.Service).ServeHTTP(ew, r2)
	ew.finish()
}

// servedAs is the protocol the gateway serves r in, which its refusals
// must speak: proto, the one r's headers say (problem.ProtocolOf), except
// that a plain POST of JSON or proto to a method's path, without the
// Connect-Protocol-Version header a Connect client may leave out, is a
// Connect unary call by the route it matched, for its errors as for its
// answer. (A body of another type is no Connect call: its refusals stay
// Problem Details.)
func servedAs(proto problem.Protocol, r *http.Request, route *snapshot.Route) problem.Protocol {
	if proto == problem.HTTP && route.RPC != nil && !route.RPC.REST() && r.Method == http.MethodPost &&
		transcode.IsUnaryMediaType(headerValue(r.Header, "Content-Type")) {
		return problem.ConnectUnary
	}
	return proto
}

// restErrors passes a transcoded REST response through, except an error:
// the transcoder writes a google.rpc.Status as JSON (or, for a call it
// cannot decode, plain text), which finish turns into Problem Details.
// The transcoder buffers REST responses whole, so holding an error back
// costs nothing.
type restErrors struct {
	http.ResponseWriter
	r             *http.Request
	rid, instance string
	call          *rpcCall
	status        int // held back; 0 if the response passes through
	held          bytes.Buffer
}

func (e *restErrors) WriteHeader(code int) {
	if code >= 400 && e.status == 0 {
		ct := e.Header().Get("Content-Type")
		if strings.HasPrefix(ct, "application/json") || strings.HasPrefix(ct, "text/plain") {
			e.status = code
			return
		}
	}
	e.ResponseWriter.WriteHeader(code)
}

func (e *restErrors) Write(b []byte) (int, error) {
	if e.status != 0 {
		return e.held.Write(b)
	}
	return e.ResponseWriter.Write(b)
}

// Flush does nothing: the transcoder serves REST unary calls only (REST
// streams are the gateway's own), and flushing their one buffered message
// made HTTP/1.1 answers chunked, in two writes, instead of one with a
// Content-Length.
func (e *restErrors) Flush() {}

func (e *restErrors) Unwrap() http.ResponseWriter { return e.ResponseWriter }

// finish writes the held-back error as a problem.
func (e *restErrors) finish() {
	if e.status == 0 {
		return
	}
	h := e.Header()
	p, ok := problem.FromStatusJSON(e.held.Bytes(), e.status)
	if e.call.refused != nil {
		p, ok = *e.call.refused, true
	}
	if !ok {
		// A plain-text refusal (415, 405, ...): named after its status.
		p = problem.Problem{
			Code:       problem.Code(strings.ReplaceAll(strings.ToLower(http.StatusText(e.status)), " ", "_")),
			Detail:     strings.TrimSpace(e.held.String()),
			HTTPStatus: e.status,
		}
	}
	// The upstream side's gRPC status may share the header map.
	for _, k := range []string{"Content-Length", "Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin"} {
		h.Del(k)
	}
	p.Instance, p.RequestID = e.instance, e.rid
	if x := e.call.target.Record; x != nil && x.By == exchange.Nobody {
		// Neither the upstream nor the gateway answered the call: the
		// transcoder refused it (a body it cannot decode, a media type
		// it does not take).
		x.Refuse(e.ResponseWriter, e.r, problem.HTTP, p)
		return
	}
	// The upstream's error, or the gateway's refusal of the gRPC call
	// (recorded then), now in Problem Details.
	problem.Write(e.ResponseWriter, e.r, p)
}

// serveRPC forwards the gRPC request the transcoder made of a call.
func (n *Node) serveRPC(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(rpcCallKey{}).(*rpcCall)
	if c == nil || r.URL.Path != c.route.RPC.Path {
		// The transcoder resolved the call to another method than the
		// route the gateway authorised: never forward that.
		var x *exchange.Record
		if c != nil {
			x = c.target.Record
		}
		x.Refuse(w, r, problem.ProtocolOf(r), problem.Problem{Code: problem.Internal, Detail: "the call resolved to another method than its route"})
		return
	}
	t := *c.target
	t.Path, t.RawQuery = r.URL.Path, ""
	r.Body = transcode.UpstreamBody(r.Body, c.body)
	if p := n.forwardRPC(w, r, c.st, c.route, &t); p != nil && (len(p.Violations) > 0 || p.Code == problem.PayloadTooLarge) {
		// Kept for REST callers. (A call without a message is one the
		// transcoder could not decode; its own error says why.)
		c.refused = p
	}
}

// forwardRPC forwards a gRPC call of a service route once its request
// passes the service's validation rules. It returns the refusal it
// answered instead, if the request did not pass.
func (n *Node) forwardRPC(w http.ResponseWriter, r *http.Request, st *state, route *snapshot.Route, t *proxy.Target) *problem.Problem {
	if st.rpc.Validates(route) {
		// The first request message is read here, before the upstream
		// is called: within the call's deadline, as the rest will be.
		rc := boundReads(w, proxy.Timeout(r, t))
		if p := st.rpc.Validate(r, route); p != nil {
			p.Instance, p.RequestID = route.RPC.Path, t.RequestID
			t.Record.Refuse(w, r, problem.ProtocolOf(r), *p)
			return p
		}
		releaseReads(rc)
	}
	n.fwd.Serve(w, r, t)
	return nil
}
