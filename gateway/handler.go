package gateway

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/portico-gw/portico/gateway/auth"
	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/internal/cleanpath"
	"github.com/portico-gw/portico/gateway/internal/framing"
	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/proxy"
	"github.com/portico-gw/portico/gateway/router"
	"github.com/portico-gw/portico/gateway/snapshot"
	"github.com/portico-gw/portico/gateway/telemetry"
	"github.com/portico-gw/portico/gateway/transcode"
)

// records recycles the requests' records: one per request in flight.
var records = sync.Pool{New: func() any { return new(exchange.Record) }}

// ServeHTTP runs the request chain for one pool. Every request, whatever
// its exit, ends in finish, which hands its record to the sinks.
func (p *pool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.started.Add(1)
	if p.node.draining.Load() {
		// HTTP/1.1 closes the connection after this answer, HTTP/2 sends
		// GOAWAY: busy connections wind down before the drain closes
		// idle ones (see Node.shutdown).
		w.Header()["Connection"] = closeValue
	}
	x := records.Get().(*exchange.Record)
	w = x.Reset(w, p.name, time.Now())
	defer p.finish(x)
	p.serve(x, w, r)
}

// finish ends one request of the pool: the node's finish, then the
// count of requests the pool has finished, which the drain reads.
func (p *pool) finish(x *exchange.Record) {
	p.node.finish(x)
	p.finished.Add(1)
}

// serve is the request chain. The order is fixed (DESIGN.md, the request
// path): framing, request id, path normalisation, route match, size limit,
// authentication and authorisation, rate limits, trace context, then the
// proxy, which counts the body while it streams, strips credentials and
// client identity headers, and adds the verified identity. Each step
// notes what it found in x; a refusal goes through x.Refuse.
func (p *pool) serve(x *exchange.Record, w http.ResponseWriter, r *http.Request) {
	n := p.node
	st := n.state.Load()

	rid := telemetry.RequestID(headerValue(r.Header, "X-Request-Id"))
	w.Header()["X-Request-Id"] = []string{rid}
	x.RequestID, x.Protocol = rid, problem.ProtocolOf(r)

	// 1. Framing that net/http accepted but a gateway must refuse. Only a
	// head with Transfer-Encoding is ever flagged, but net/http drops the
	// field from an HTTP/1.0 request before the handler runs, so every
	// HTTP/1.0 request is checked too.
	if len(r.TransferEncoding) > 0 || (r.ProtoMajor == 1 && r.ProtoMinor == 0) {
		if c, ok := framing.FromContext(r.Context()); ok {
			if err := c.Flagged(); err != nil {
				w.Header()["Connection"] = closeValue
				x.Refuse(w, r, x.Protocol, problem.Problem{Code: problem.BadRequest, Detail: "ambiguous message framing: " + err.Error(), RequestID: rid})
				return
			}
		}
	}
	if r.Method == http.MethodConnect {
		x.Refuse(w, r, x.Protocol, problem.Problem{Code: problem.MethodNotAllowed, Detail: "CONNECT is not supported", RequestID: rid})
		return
	}

	// 3. Normalise the path; the backend receives the normalised form.
	rawPath, rawQuery := splitRequestURI(r)
	path, err := cleanpath.Clean(rawPath)
	if err != nil {
		x.Refuse(w, r, x.Protocol, problem.Problem{Code: problem.BadRequest, Detail: err.Error(), RequestID: rid})
		return
	}

	// Match the route in this request's snapshot.
	var table *router.Table[*snapshot.Route]
	if p.index >= 0 {
		table = st.tables[p.index]
	} else {
		table = st.snap.Table(p.name)
	}
	var params router.Params
	req := router.Request{Host: router.CanonicalHost(r.Host), Method: r.Method, Path: path, Header: r.Header}
	route, status := table.Match(req, &params)
	switch status {
	case router.NotFound:
		x.Refuse(w, r, x.Protocol, problem.Problem{Code: problem.NoRoute, Detail: "no route matches " + r.Method + " " + path, Instance: path, RequestID: rid})
		return
	case router.MethodNotAllowed:
		w.Header()["Allow"] = []string{strings.Join(table.Allowed(req), ", ")}
		x.Refuse(w, r, x.Protocol, problem.Problem{Code: problem.MethodNotAllowed, Detail: "the route does not accept " + r.Method, Instance: path, RequestID: rid})
		return
	}
	x.Route, x.Stats = route, st.stats[route.Index]
	// Refusals from here on speak the protocol the route serves the
	// request in.
	proto := x.Protocol // as its headers say
	x.Protocol = servedAs(proto, r, route)
	if x.Synthetic && route.ID != x.ProbeOf {
		// A probe made from an older snapshot that now reaches another
		// route: it must not call that route as the synthetic caller,
		// with that route's scopes.
		x.Refuse(w, r, x.Protocol, problem.Problem{Code: problem.NoRoute, Detail: "the probe's route " + x.ProbeOf + " no longer answers " + r.Method + " " + path, Instance: path, RequestID: rid})
		return
	}

	// Size limit by the declared length; the proxy also counts while the
	// body streams.
	if r.ContentLength > route.MaxRequestBytes {
		x.Refuse(w, r, x.Protocol, problem.Problem{Code: problem.PayloadTooLarge, Detail: "request body exceeds the route's limit", Instance: path, RequestID: rid})
		return
	}

	// Authenticate and authorise. The node's own probes call as the
	// platform's synthetic caller, with the scopes the route requires.
	switch {
	case x.Synthetic:
		x.Identity = auth.SyntheticCaller(route.Auth.RequiredScopes(r.Method, path))
		rawQuery = auth.WithoutQueryKey(rawQuery, route.Auth.QueryKey)
	case !route.Auth.Public:
		ident, fail := n.auth.Check(r, route, st.creds, st.snap, path, rawQuery)
		// A caller refused what its good credential does not allow is
		// still known: usage counts its refusals to it.
		x.Identity = ident
		if fail != nil {
			if fail.Challenge != "" {
				w.Header()["Www-Authenticate"] = []string{fail.Challenge}
			}
			x.Refuse(w, r, x.Protocol, problem.Problem{Code: fail.Code, Detail: fail.Detail, Instance: path, RequestID: rid})
			return
		}
		rawQuery = auth.WithoutQueryKey(rawQuery, route.Auth.QueryKey)
	}

	// Rate limits: in-memory buckets, per caller (or per client IP on
	// public routes). Probes take none: they are no one's calls.
	clientIP, trusted := p.peer(r)
	realIP := p.clientAddr(r, clientIP, trusted)
	if !x.Synthetic {
		var limitIP string // only public routes limit by address
		if route.Auth.Public {
			limitIP = realIP
		}
		v := n.rateLimit(st.limits, route, &x.Identity, limitIP)
		v.writeHeaders(w.Header())
		if v.limited {
			x.Refuse(w, r, x.Protocol, problem.Problem{
				Code: problem.RateLimited, Detail: "rate limit \"" + v.by.spec.Name + "\" exceeded",
				Instance: path, RequestID: rid, RetryAfter: v.res.RetryAfter,
			})
			return
		}
	}

	// The team's OpenAPI document, for routes that have one.
	if route.OpenAPI != nil {
		if p := checkOpenAPI(route.OpenAPI, w, r, path, rawQuery, route.Timeout); p != nil {
			p.Instance, p.RequestID = path, rid
			x.Refuse(w, r, x.Protocol, *p)
			return
		}
	}

	// Trace context: continue the caller's trace or start one.
	tc, ok := telemetry.ParseTraceparent(headerValue(r.Header, "Traceparent"))
	if ok {
		tc = tc.Child()
	} else {
		tc = telemetry.NewTrace(false)
	}

	upPath := path
	if route.Rewrite != nil {
		upPath = route.Rewrite.Path(path, &params)
	}
	t := proxy.Target{
		Cluster:        st.clusters[route.Index],
		Path:           upPath,
		RawQuery:       rawQuery,
		Timeout:        route.Timeout,
		MaxBody:        route.MaxRequestBytes,
		RequestID:      rid,
		Traceparent:    tc.String(),
		ClientIP:       clientIP,
		RealIP:         realIP,
		TLS:            p.tls,
		TrustForwarded: trusted,
		Identity:       x.Identity,
		Record:         x,
	}
	if route.RequestHeaders != nil {
		t.EditRequest = route.RequestHeaders
	}
	if route.ResponseHeaders != nil {
		t.EditResponse = route.ResponseHeaders
	}
	if route.RPC != nil {
		if ct := headerValue(r.Header, "Content-Type"); problem.IsGRPC(ct) && (transcode.IsGRPCProto(ct) || !st.rpc.Validates(route)) {
			// gRPC in proto: the frames are checked as they pass. (gRPC
			// in JSON to a validated method goes through the transcoder,
			// which hands the upstream proto frames to check.)
			_ = n.forwardRPC(w, r, st, route, &t)
			return
		}
		// gRPC-Web, Connect or REST: transcoded to a gRPC call, which
		// serveRPC forwards.
		// A copy: the transcoder keeps it in the request's context, which
		// would otherwise move every request's Target to the heap.
		rt := t
		n.transcode(w, r, st, route, &rt, &params, proto)
		return
	}
	n.fwd.Serve(w, r, &t)
}

// finish is where every request ends, once, whatever its exit: it hands
// the request's record to the sinks, then recycles it. It runs deferred,
// so a request the proxy aborts (http.ErrAbortHandler) passes through it
// too. So does every probe the node sends itself (ProbeRoutes): the sinks
// see x.Synthetic and leave it out of what they count as calls.
func (n *Node) finish(x *exchange.Record) {
	if x.By == exchange.Nobody && x.Status != 0 {
		// An answer no one claimed: the transcoder's own error for a call
		// it could not make. (The rest of the chain records its answers.)
		x.By = exchange.Gateway
	}
	if s := x.Stats; s != nil && !x.Synthetic {
		// The rollout judge counts what reached the proxy, as it always
		// has; the gateway's refusals before it are counted apart. The
		// node's own probes are counted apart too, by the prober.
		if x.Forwarded {
			s.Observe(x.UpstreamFailed, x.UpstreamTime())
		} else {
			s.Refused(time.Since(x.Start))
		}
	}
	if u := n.usage; u != nil {
		// Counted for quotas and billing; the recorder leaves out
		// x.Synthetic itself.
		u.rec.Record(x)
	}
	if f := n.onFinish.Load(); f != nil {
		(*f)(x)
	}
	records.Put(x)
}

// clientAddr is the client's address as far as the gateway can vouch for
// it, which per-IP limits count and X-Real-Ip carries: the peer, or behind
// trusted proxies the nearest X-Forwarded-For address that is not one of
// them (a client can prepend anything, so the list is read from the right).
func (p *pool) clientAddr(r *http.Request, peer string, trusted bool) string {
	if !trusted {
		return peer
	}
	xff := r.Header["X-Forwarded-For"]
	for i := len(xff) - 1; i >= 0; i-- {
		list := xff[i]
		for list != "" {
			var hop string
			if j := strings.LastIndexByte(list, ','); j >= 0 {
				hop, list = list[j+1:], list[:j]
			} else {
				hop, list = list, ""
			}
			addr, err := netip.ParseAddr(strings.TrimSpace(hop))
			if err != nil {
				return peer // malformed: count the proxy's own address
			}
			if !p.node.isTrusted(addr.Unmap()) {
				return addr.Unmap().String()
			}
		}
	}
	return peer
}

// isTrusted reports whether addr is inside a trusted proxy prefix.
func (n *Node) isTrusted(addr netip.Addr) bool {
	for _, pfx := range n.trusted {
		if pfx.Contains(addr) {
			return true
		}
	}
	return false
}

// peer returns the client's IP and whether it is a trusted proxy.
func (p *pool) peer(r *http.Request) (string, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if len(p.node.trusted) == 0 {
		return host, false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host, false
	}
	return host, p.node.isTrusted(addr.Unmap())
}

// splitRequestURI returns the raw, still-escaped path and query of r as the
// client sent them. Origin-form ("/p?q") is the common case; absolute-form
// ("http://h/p?q") is reduced to its path; anything else ("*", authority
// form) yields a path that cleanpath rejects.
func splitRequestURI(r *http.Request) (path, query string) {
	uri := r.RequestURI
	if uri == "" { // a request not from a server (Handler used directly)
		uri = r.URL.RequestURI()
	}
	if len(uri) > 0 && uri[0] != '/' {
		if i := strings.Index(uri, "://"); i >= 0 {
			rest := uri[i+3:]
			if j := strings.IndexAny(rest, "/?"); j >= 0 {
				uri = rest[j:]
				if uri[0] == '?' {
					uri = "/" + uri
				}
			} else {
				uri = "/"
			}
		}
	}
	path, query, _ = strings.Cut(uri, "?")
	return path, query
}

func headerValue(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

var closeValue = []string{"close"}
