package snapshot

import (
	"encoding/binary"
	"fmt"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/portico-gw/portico/gateway/apikey"
	"github.com/portico-gw/portico/gateway/internal/cleanpath"
	"github.com/portico-gw/portico/gateway/router"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Probe is a route's synthetic probe: the request a canary node sends to
// the route through its own request chain, as the platform's synthetic
// caller, while a change to the route rolls out. It is compiled from the
// route's config.v1.RouteProbe, or, unset, from the route itself (see
// config.v1.Route.probe), and Compile has checked that the route table of
// Pool sends it to this very route.
type Probe struct {
	// Method, Host (the Host header) and Path (the request path, as sent:
	// the node normalises it, as it does every request's) with RawQuery
	// (without '?', "" for none) make the request line.
	Method, Host, Path, RawQuery string
	// Header holds the headers sent, by canonical name: those the route's
	// header matches ask for, then the probe's own, and TE: trailers for
	// a gRPC call. Content-Type is ContentType, apart.
	Header map[string][]string
	// Body is sent as is, with ContentType ("" for none). A gRPC call's
	// body is its one length-prefixed message.
	Body        []byte
	ContentType string
	// GRPC says the probe is a gRPC call, whose outcome is its grpc-status
	// rather than its HTTP status.
	GRPC bool
	// Expect is the status class a passing probe gets; unspecified means
	// any class but 5xx.
	Expect configv1.StatusClass
	// Pool is the listener pool whose route table the probe goes through
	// (Snapshot.Table): the route's first pool, or "" for a route of every
	// pool, which the table of the routes with no pools serves.
	Pool string
	// Explicit says the route configures its probe; otherwise it is the
	// default.
	Explicit bool
}

// Passes reports whether a probe answered with a status of class (2 for
// 2xx, 5 for 5xx; a gRPC status maps onto one, see config.v1.StatusClass)
// passes.
func (p *Probe) Passes(class int) bool {
	if p.Expect == configv1.StatusClass_STATUS_CLASS_UNSPECIFIED {
		return class != 5
	}
	return class == int(p.Expect)
}

// Target is the probe's request target: the path and, if any, the query.
func (p *Probe) Target() string {
	if p.RawQuery == "" {
		return p.Path
	}
	return p.Path + "?" + p.RawQuery
}

// probeSegment is what a default probe sends for every variable and
// wildcard segment of its route's path, and the start of its host for a
// wildcard host.
const probeSegment = "probe"

// defaultProbeHost is a default probe's host when its route lists none:
// a name that never resolves (RFC 6761).
const defaultProbeHost = "probe.invalid"

// compileProbes compiles every route's probe, once the route tables are
// built, and checks it against the table it goes through: a probe that
// another route answers, or none, is refused when the route configures
// it, and leaves the route without a probe when it is the default (the
// route cannot be probed by default; its team can write one). Routes
// that failed validation, and those whose table did not compile, are
// skipped: their problems are reported already.
func compileProbes(routes []*configv1.Route, labels []string, skip map[int]bool, s *Snapshot, errs *Error) {
	for i, rc := range routes {
		if skip[i] {
			continue
		}
		r := &s.Routes[i]
		at := labels[i] + ".probe"
		p, ok := buildProbe(at, rc, r, errs)
		if !ok {
			continue
		}
		table := s.Table(p.Pool)
		if table == nil {
			continue
		}
		path, err := cleanpath.Clean(p.Path)
		if err != nil {
			errs.add(at+".path", fmt.Sprintf("route %q: probe path %q: %v", r.ID, p.Path, err))
			continue
		}
		header := p.Header
		if p.ContentType != "" {
			header = make(map[string][]string, len(p.Header)+1)
			for k, v := range p.Header {
				header[k] = v
			}
			header["Content-Type"] = []string{p.ContentType}
		}
		req := router.Request{Host: router.CanonicalHost(p.Host), Method: p.Method, Path: path, Header: header}
		got, status := table.Match(req, nil)
		if status == router.Matched && got == r {
			r.Probe = p
			continue
		}
		if !p.Explicit {
			continue
		}
		what := fmt.Sprintf("route %q: probe %s %s", r.ID, p.Method, p.Target())
		if p.Pool != "" {
			what += " in pool " + fmt.Sprintf("%q", p.Pool)
		}
		switch status {
		case router.Matched:
			errs.add(at, fmt.Sprintf("%s matches route %q, not this one", what, got.ID))
		case router.MethodNotAllowed:
			errs.add(at, fmt.Sprintf("%s: method %s not accepted (allowed: %s)", what, p.Method, strings.Join(table.Allowed(req), ", ")))
		default:
			errs.add(at, what+" matches no route")
		}
	}
}

// buildProbe makes the probe of route r from its config rc: the probe rc
// configures, its unset fields given their defaults, or the default
// probe. Problems with the probe's own fields go to errs, at at; ok is
// false then, when the route's path does not parse (reported already),
// or when the route has no default probe (a probe would change data).
func buildProbe(at string, rc *configv1.Route, r *Route, errs *Error) (p *Probe, ok bool) {
	pc := rc.GetProbe()
	p = &Probe{Explicit: pc != nil, Expect: pc.GetExpect()}
	if pools := rc.GetPools(); len(pools) > 0 {
		p.Pool = pools[0]
	}
	grpc := r.RPC != nil && !r.RPC.REST()

	p.Method = pc.GetMethod()
	if p.Method == "" {
		switch {
		case grpc:
			if pc == nil && !safeMethod(r.RPC.Method) {
				return nil, false // a call that may change data: no default
			}
			p.Method = "POST"
		case pc == nil:
			p.Method = safeProbeMethod(rc.GetMethods())
			if p.Method == "" {
				return nil, false // GET nor HEAD: no default
			}
		default:
			p.Method = explicitProbeMethod(rc.GetMethods())
		}
	}
	p.Host = pc.GetHost()
	if p.Host != "" {
		if why := checkProbeHost(p.Host); why != "" {
			errs.add(at+".host", fmt.Sprintf("route %q: probe host %q: %s", r.ID, p.Host, why))
			return nil, false
		}
		p.Host = router.CanonicalHost(p.Host)
	} else {
		p.Host = defaultProbeHost
		if hosts := rc.GetHosts(); len(hosts) > 0 {
			p.Host = hosts[0]
			if rest, wild := strings.CutPrefix(p.Host, "*."); wild {
				p.Host = probeSegment + "." + rest
			}
		}
	}
	if target := pc.GetPath(); target != "" {
		p.Path, p.RawQuery, _ = strings.Cut(target, "?")
		if why := credentialInQuery(p.RawQuery, rc.GetAuth().GetQueryKey()); why != "" {
			errs.add(at+".path", fmt.Sprintf("route %q: probe query %s: a probe carries no credential (it calls as the platform's synthetic caller), and config is no place for one", r.ID, why))
			return nil, false
		}
	} else {
		path, err := router.ExamplePath(rc.GetPath(), probeSegment)
		if err != nil {
			return nil, false // the route's template problem is reported
		}
		p.Path = path
	}

	p.Header = matchHeaders(rc.GetHeaders())
	ok = true
	for j, h := range pc.GetHeaders() {
		name := textproto.CanonicalMIMEHeaderKey(h.GetName())
		if why := reservedProbeHeader(name); why != "" {
			errs.add(fmt.Sprintf("%s.headers[%d].name", at, j), fmt.Sprintf("route %q: probe header %s %s", r.ID, name, why))
			ok = false
			continue
		}
		if looksLikeKey(h.GetValue()) {
			errs.add(fmt.Sprintf("%s.headers[%d].value", at, j), fmt.Sprintf("route %q: probe header %s holds an API key: a probe carries no credential (it calls as the platform's synthetic caller), and config is no place for one", r.ID, name))
			ok = false
			continue
		}
		if p.Header == nil {
			p.Header = map[string][]string{}
		}
		p.Header[name] = append(p.Header[name], h.GetValue())
	}

	p.Body, p.ContentType = slices.Clone(pc.GetBody()), pc.GetContentType()
	if grpc {
		// A gRPC call: one message, uncompressed, after its 5-byte prefix.
		frame := make([]byte, 5+len(p.Body))
		binary.BigEndian.PutUint32(frame[1:5], uint32(len(p.Body)))
		copy(frame[5:], p.Body)
		p.Body = frame
		if p.ContentType == "" {
			p.ContentType = "application/grpc"
		}
		if p.Header == nil {
			p.Header = map[string][]string{}
		}
		p.Header["Te"] = []string{"trailers"}
	}
	p.GRPC = isGRPCContentType(p.ContentType)
	return p, ok
}

// safeProbeMethod is a default probe's method: GET when the route
// accepts it (a route that lists no method accepts every one), else
// HEAD when it does, else "": a route that takes only methods that may
// change data has no default probe, since a probe repeats every interval
// on every canary node while a change rolls out.
func safeProbeMethod(methods []string) string {
	switch {
	case len(methods) == 0 || slices.Contains(methods, "GET"):
		return "GET"
	case slices.Contains(methods, "HEAD"):
		return "HEAD"
	}
	return ""
}

// explicitProbeMethod is the method of a probe the route configures
// without one: GET or HEAD if the route accepts either, else the route's
// first method, which its team asked for by writing the probe.
func explicitProbeMethod(methods []string) string {
	if m := safeProbeMethod(methods); m != "" {
		return m
	}
	return methods[0]
}

// matchHeaders are the headers a probe sends so that the route's header
// matches hold: an exact match's value, a prefix match's prefix, "probe"
// for a presence match. Regex and inverted matches add none: no value is
// sure to satisfy a regex, and an inverted match holds without the
// header (a probe whose route then does not match it has no default).
func matchHeaders(matches []*configv1.HeaderMatch) map[string][]string {
	var h map[string][]string
	for _, m := range matches {
		if m.GetInvert() {
			continue
		}
		var v string
		switch k := m.GetMatch().(type) {
		case *configv1.HeaderMatch_Exact:
			v = k.Exact
		case *configv1.HeaderMatch_Prefix:
			v = k.Prefix
		case *configv1.HeaderMatch_Present:
			v = probeSegment
		default:
			continue
		}
		if h == nil {
			h = map[string][]string{}
		}
		name := textproto.CanonicalMIMEHeaderKey(m.GetName())
		h[name] = append(h[name], v)
	}
	return h
}

// reservedProbeHeader says why a probe may not set the header name
// (canonical), or returns "". The credential and the identity headers
// are the synthetic caller's, which the gateway sets; the host, the
// content type and the body's framing have fields of their own.
func reservedProbeHeader(name string) string {
	lower := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
	switch {
	case strings.HasPrefix(lower, "x-auth-"), lower == "authorization", lower == "proxy-authorization", lower == "x-api-key":
		return "is the gateway's: a probe calls as the platform's synthetic caller, with no credential"
	case lower == "host":
		return "is set by the probe's host"
	case lower == "content-type":
		return "is set by the probe's content_type"
	case lower == "content-length", lower == "transfer-encoding":
		return "is set by the gateway from the probe's body"
	}
	return ""
}

// checkProbeHost says why host is not a probe's Host header, or returns
// "": it must be a hostname, RFC 1123 labels of letters, digits and
// hyphens (no '*': a probe names one host), with an optional :port.
// Anything else would be sent as is, CR and LF included.
func checkProbeHost(host string) string {
	name := host
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		name = host[:i]
		port, err := strconv.ParseUint(host[i+1:], 10, 16)
		if err != nil || port == 0 || host[i+1] == '+' {
			return "the port is not a number from 1 to 65535"
		}
	}
	if name == "" || len(name) > 253 {
		return "a hostname has 1 to 253 characters"
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return "each label of a hostname has 1 to 63 characters"
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "a label may not start or end with '-'"
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return "a hostname has letters, digits, '-' and '.' only, with an optional :port"
			}
		}
	}
	return ""
}

// isGRPCContentType reports whether ct is a gRPC call's (application/grpc,
// with or without a +codec or parameters), not gRPC-Web's.
func isGRPCContentType(ct string) bool {
	rest, ok := strings.CutPrefix(strings.ToLower(ct), "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// credentialInQuery says why a probe's query carries a credential, or "":
// the route's query-key parameter, or a value that is an API key. The
// why never holds the value.
func credentialInQuery(rawQuery, queryKey string) string {
	for part := range strings.SplitSeq(rawQuery, "&") {
		name, value, _ := strings.Cut(part, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if v, err := url.QueryUnescape(value); err == nil {
			value = v
		}
		if queryKey != "" && name == queryKey {
			return fmt.Sprintf("sets %s, the route's API key parameter", queryKey)
		}
		if looksLikeKey(value) {
			return fmt.Sprintf("parameter %q holds an API key", name)
		}
	}
	return ""
}

// looksLikeKey reports whether v is, or ends in, a well-formed API key
// ("Bearer ak_live_...").
func looksLikeKey(v string) bool {
	v = strings.TrimSpace(v)
	if len(v) > apikey.Len {
		v = v[len(v)-apikey.Len:]
	}
	_, err := apikey.Parse(v)
	return err == nil
}
