package proxy

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// outbound is the upstream request and everything it points to, allocated
// together: one allocation instead of four.
type outbound struct {
	req  *http.Request
	url  url.URL
	body limitedBody
	vals [15]string // backing store for the values of headers the gateway sets
}

// newOutbound builds the upstream request. For gRPC, a positive timeout is
// sent as grpc-timeout.
func newOutbound(ctx context.Context, r *http.Request, t *Target, addr string, grpc bool, timeout time.Duration) *outbound {
	o := &outbound{}
	// Opaque carries the already-escaped path verbatim: the backend receives
	// exactly the string the route was matched on.
	o.url = url.URL{Scheme: t.Cluster.Scheme(), Host: addr, Opaque: t.Path, RawQuery: t.RawQuery}
	req := http.Request{
		Method:     r.Method,
		URL:        &o.url,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     o.header(r, t, grpc, timeout),
		Host:       r.Host,
		Body:       http.NoBody,
	}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		o.body = limitedBody{r: r.Body, limit: t.MaxBody}
		req.Body = &o.body
		req.ContentLength = r.ContentLength
	}
	// WithContext is the only way to attach ctx; it copies req to the heap.
	o.req = req.WithContext(ctx)
	return o
}

// header builds the upstream request's header. Values of the client's
// headers are shared, not copied: neither side modifies them.
func (o *outbound) header(r *http.Request, t *Target, grpc bool, timeout time.Duration) http.Header {
	in := r.Header
	h := make(http.Header, len(in)+9)
	var connTokens []string
	if c := in["Connection"]; len(c) > 0 {
		connTokens = c
	}
	for k, vv := range in {
		if dropRequestHeader(k) || (connTokens != nil && listedIn(connTokens, k)) {
			continue
		}
		h[k] = vv
	}
	if t.EditRequest != nil {
		t.EditRequest.Apply(h)
	}

	vals := o.vals[:0]
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}

	proto := "http"
	if t.TLS {
		proto = "https"
	}
	xff := t.ClientIP
	fwd := forwardedElement(t.ClientIP, r.Host, proto)
	if t.TrustForwarded {
		if prior := in["X-Forwarded-For"]; len(prior) > 0 {
			xff = strings.Join(prior, ", ") + ", " + xff
		}
		if prior := in["Forwarded"]; len(prior) > 0 {
			fwd = strings.Join(prior, ", ") + ", " + fwd
		}
	}
	if xff != "" {
		set("X-Forwarded-For", xff)
	}
	set("X-Forwarded-Proto", proto)
	if r.Host != "" {
		set("X-Forwarded-Host", r.Host)
	}
	set("Forwarded", fwd)
	if t.RealIP != "" {
		set("X-Real-Ip", t.RealIP)
	}
	set("X-Request-Id", t.RequestID)
	if t.Traceparent != "" {
		set("Traceparent", t.Traceparent)
	}
	t.Identity.EachHeader(set)
	if grpc {
		// TE: trailers is the one TE value a gRPC server requires.
		set("Te", "trailers")
		if timeout > 0 {
			set("Grpc-Timeout", formatGRPCTimeout(timeout))
		}
	}
	return h
}

// dropRequestHeader reports whether the client's header k must not reach
// the upstream: hop-by-hop headers (RFC 9110 7.6.1), the headers and
// families the gateway owns (x-auth-*, which only the gateway may send;
// x-forwarded-*, Forwarded, X-Request-Id, traceparent, which it sets), the
// credential headers (a credential is never forwarded, even on a public
// route), and client claims of the client's address (X-Real-Ip,
// True-Client-Ip), which the gateway cannot verify.
//
// A name spelled with '_' for '-' (X_Auth_Tenant, X-Request_Id) is dropped
// too: many backends (CGI and its heirs, which make HTTP_X_AUTH_TENANT of
// either spelling, and frameworks that fold '_' into '-') would read it as
// the gateway's own header.
func dropRequestHeader(k string) bool {
	if len(k) >= 7 && (k[0] == 'X' || k[0] == 'x') &&
		(strings.EqualFold(k[:7], "x-auth-") || len(k) >= 12 && strings.EqualFold(k[:12], "x-forwarded-")) {
		return true
	}
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Expect", "Http2-Settings", "Authorization", "X-Api-Key", "Forwarded",
		"X-Request-Id", "Traceparent", "Grpc-Timeout", "X-Real-Ip", "True-Client-Ip":
		return true
	}
	// Only a name that starts like an owned one can be one with '_', and
	// almost none has a '_': only those pay for the comparison that reads
	// it as '-'.
	if k == "" {
		return false
	}
	switch k[0] | 0x20 { // ASCII lowercase
	case 'x', 'p', 'k', 't', 'h', 'g':
		return strings.IndexByte(k, '_') >= 0 && ownedWithUnderscore(k)
	}
	return false
}

// ownedNames are the names dropRequestHeader drops that have a '-' (a name
// without one has no other spelling), lowercase; ownedPrefixes the
// families it drops. dropRequestHeader knows their first letters.
var (
	ownedNames = [...]string{
		"proxy-connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
		"transfer-encoding", "http2-settings", "x-api-key", "x-request-id", "grpc-timeout",
		"x-real-ip", "true-client-ip",
	}
	ownedPrefixes = [...]string{"x-auth-", "x-forwarded-"}
)

// ownedWithUnderscore reports whether k, read with '_' as '-' and without
// case, is one of the names or families dropRequestHeader drops.
func ownedWithUnderscore(k string) bool {
	for _, p := range ownedPrefixes {
		if len(k) >= len(p) && sameName(k[:len(p)], p) {
			return true
		}
	}
	for _, n := range ownedNames {
		if len(k) == len(n) && sameName(k, n) {
			return true
		}
	}
	return false
}

// sameName reports whether the header name k equals lower, a lowercase
// name of the same length, without case and with '_' read as '-'.
func sameName(k, lower string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '_':
			c = '-'
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// dropResponseHeader reports whether the upstream's header k is hop-by-hop.
func dropResponseHeader(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "X-Request-Id":
		return true
	}
	return false
}

// listedIn reports whether header k is named in a Connection header, which
// makes it hop-by-hop too.
func listedIn(connection []string, k string) bool {
	for _, v := range connection {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(tok), k) {
				return true
			}
		}
	}
	return false
}

// forwardedElement is one RFC 7239 Forwarded element.
func forwardedElement(ip, host, proto string) string {
	var b strings.Builder
	b.Grow(len(ip) + len(host) + 32)
	b.WriteString("for=")
	if strings.IndexByte(ip, ':') >= 0 {
		b.WriteString(`"[`)
		b.WriteString(ip)
		b.WriteString(`]"`)
	} else if ip == "" {
		b.WriteString("unknown")
	} else {
		b.WriteString(ip)
	}
	if host != "" {
		b.WriteString(";host=")
		if isToken(host) {
			b.WriteString(host)
		} else {
			b.WriteString(strconv.Quote(host))
		}
	}
	b.WriteString(";proto=")
	b.WriteString(proto)
	return b.String()
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// limitedBody is the request body sent upstream. It counts bytes as they
// stream and fails the upstream request once the route's limit is passed,
// and it remembers whether a failure was the client's.
//
// The transport reads the body on a goroutine of its own, which may still
// be reading when RoundTrip returns an error: what it found out is guarded
// by mu, which only those failures and Close take.
type limitedBody struct {
	r     io.ReadCloser
	limit int64
	// n is written by the transport's goroutine alone, and read by Serve
	// for the request's record.
	n atomic.Int64

	mu       sync.Mutex
	tooLarge bool
	err      error // a read error from the client other than EOF
	// closed is set once the transport has closed the body: a read
	// failing after that failed because of the close, not the client.
	closed bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.n.Load() > b.limit {
		return 0, errBodyTooLarge
	}
	n, err := b.r.Read(p)
	if b.n.Add(int64(n)) > b.limit {
		b.mu.Lock()
		b.tooLarge = true
		b.mu.Unlock()
		return 0, errBodyTooLarge
	}
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if !b.closed {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// failure returns what went wrong reading the client's body, if anything.
func (b *limitedBody) failure() (tooLarge bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tooLarge, b.err
}

// Close closes the client's request body. The transport calls it when it is
// done sending, including when the upstream ends a stream before the client
// has, or the call's deadline passes: closing unblocks the transport's body
// writer, which would otherwise wait for a client that may never send
// again. The read it unblocks fails, and that failure is not the client's.
func (b *limitedBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return b.r.Close()
}

// parseGRPCTimeout parses a grpc-timeout header value: up to 8 digits and a
// unit (H, M, S, m, u, n).
func parseGRPCTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v)-1; i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	const maxDuration = time.Duration(1<<63 - 1)
	if n > int64(maxDuration/unit) {
		return maxDuration, true
	}
	return time.Duration(n) * unit, true
}

// formatGRPCTimeout encodes d for grpc-timeout with at most 8 digits,
// rounding down so the upstream never gets more time than remains.
func formatGRPCTimeout(d time.Duration) string {
	switch {
	case d <= 0:
		return "0n"
	case d < time.Millisecond:
		return strconv.FormatInt(int64(d), 10) + "n"
	case d < 1e8*time.Millisecond:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "m"
	default:
		return strconv.FormatInt(int64(d/time.Second), 10) + "S"
	}
}
