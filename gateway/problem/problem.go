// Package problem writes the errors the gateway itself generates, in the
// caller's protocol: RFC 9457 Problem Details (application/problem+json) for
// HTTP callers, trailers-only responses with grpc-status and grpc-message
// for gRPC and gRPC-Web callers, and Connect error JSON (unary) or an
// end-of-stream message (streaming) for Connect callers. Every problem
// carries a stable machine-readable code and the request id.
package problem

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Code is a stable, machine-readable error code. Clients may branch on it;
// it never changes meaning once published.
type Code string

// The codes the gateway generates. docs/operations.md lists them with their
// HTTP and gRPC mappings.
const (
	BadRequest          Code = "bad_request"
	InvalidArgument     Code = "invalid_argument"
	Unauthenticated     Code = "unauthenticated"
	InsufficientScope   Code = "insufficient_scope"
	ProductNotInPlan    Code = "product_not_in_plan"
	RateLimited         Code = "rate_limited"
	NoRoute             Code = "no_route"
	MethodNotAllowed    Code = "method_not_allowed"
	PayloadTooLarge     Code = "payload_too_large"
	UnsupportedEncoding Code = "unsupported_encoding"
	UnsupportedMedia    Code = "unsupported_media_type"
	HeadersTooLarge     Code = "headers_too_large"
	UpstreamError       Code = "upstream_error"
	UpstreamUnavailable Code = "upstream_unavailable"
	UpstreamTimeout     Code = "upstream_timeout"
	DeadlineExceeded    Code = "deadline_exceeded"
	Canceled            Code = "canceled"
	Internal            Code = "internal"
)

// TypeBase prefixes a code to form the problem's type URI.
const TypeBase = "https://portico-gw.github.io/errors/"

// gRPC status codes used by the mapping (google.golang.org/grpc/codes values,
// spelled out to keep this package free of grpc-go).
const (
	grpcCanceled          = 1
	grpcUnknown           = 2
	grpcInvalidArgument   = 3
	grpcDeadlineExceeded  = 4
	grpcPermissionDenied  = 7
	grpcResourceExhausted = 8
	grpcUnimplemented     = 12
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcUnauthenticated   = 16
)

type spec struct {
	status int
	title  string
	grpc   int
}

var specs = map[Code]spec{
	BadRequest:          {http.StatusBadRequest, "Bad request", grpcInvalidArgument},
	InvalidArgument:     {http.StatusBadRequest, "Invalid argument", grpcInvalidArgument},
	Unauthenticated:     {http.StatusUnauthorized, "Unauthenticated", grpcUnauthenticated},
	InsufficientScope:   {http.StatusForbidden, "Insufficient scope", grpcPermissionDenied},
	ProductNotInPlan:    {http.StatusForbidden, "Product not in plan", grpcPermissionDenied},
	RateLimited:         {http.StatusTooManyRequests, "Rate limited", grpcResourceExhausted},
	NoRoute:             {http.StatusNotFound, "No route", grpcUnimplemented},
	MethodNotAllowed:    {http.StatusMethodNotAllowed, "Method not allowed", grpcUnimplemented},
	PayloadTooLarge:     {http.StatusRequestEntityTooLarge, "Payload too large", grpcResourceExhausted},
	UnsupportedEncoding: {http.StatusUnsupportedMediaType, "Unsupported encoding", grpcUnimplemented},
	UnsupportedMedia:    {http.StatusUnsupportedMediaType, "Unsupported media type", grpcUnknown},
	HeadersTooLarge:     {http.StatusRequestHeaderFieldsTooLarge, "Request headers too large", grpcResourceExhausted},
	UpstreamError:       {http.StatusBadGateway, "Upstream error", grpcUnavailable},
	UpstreamUnavailable: {http.StatusServiceUnavailable, "Upstream unavailable", grpcUnavailable},
	UpstreamTimeout:     {http.StatusGatewayTimeout, "Upstream timeout", grpcDeadlineExceeded},
	// The HTTP statuses of DEADLINE_EXCEEDED and CANCELLED in the Connect
	// protocol and google.api.http transcoding: 504, and nginx's 499
	// "client closed request".
	DeadlineExceeded: {http.StatusGatewayTimeout, "Deadline exceeded", grpcDeadlineExceeded},
	Canceled:         {499, "Canceled", grpcCanceled},
	Internal:         {http.StatusInternalServerError, "Internal error", grpcInternal},
}

// ReadFailed returns the problem for a request body that could not be read
// to its end because the call ran out of time or its caller went away: a
// read deadline passed (DeadlineExceeded), or ctx, the request's context,
// is done because the caller cancelled or reset the call (Canceled). It
// returns nil when err is the body's own fault, which the caller words
// (usually as BadRequest). The deadline is looked at first: on HTTP/1 a
// read deadline that passes also ends the connection's context.
func ReadFailed(ctx context.Context, err error) *Problem {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return &Problem{Code: DeadlineExceeded, Detail: "the call's deadline passed while its request was being read"}
	case ctx.Err() != nil:
		return &Problem{Code: Canceled, Detail: "the caller cancelled the call while its request was being read"}
	}
	return nil
}

// Status is the HTTP status of code.
func (c Code) Status() int {
	if s, ok := specs[c]; ok {
		return s.status
	}
	return http.StatusInternalServerError
}

// GRPCCode is the gRPC status code a gRPC caller receives for code.
func (c Code) GRPCCode() int {
	if s, ok := specs[c]; ok {
		return s.grpc
	}
	return grpcInternal
}

// Title is the short human-readable summary of code.
func (c Code) Title() string {
	if s, ok := specs[c]; ok {
		return s.title
	}
	return "Error"
}

// Problem is one gateway-generated error.
type Problem struct {
	Code Code
	// Detail explains this occurrence to a human. It must not contain
	// credentials or internal addresses.
	Detail string
	// Instance identifies the occurrence; the gateway uses the request path.
	Instance string
	// RequestID is echoed so callers can quote it to support.
	RequestID string
	// RetryAfter, when positive, tells the caller when to try again: the
	// Retry-After header (whole seconds, rounded up) and, for gRPC, a
	// google.rpc.RetryInfo detail.
	RetryAfter time.Duration
	// Violations list what is wrong with the request's fields: a
	// "violations" member of the problem JSON, a google.rpc.BadRequest
	// detail for RPC callers.
	Violations []Violation

	// HTTPStatus, when set, replaces the code's HTTP status, and Details
	// are JSON values listed as "details": for an upstream's error passed
	// on as a problem (see FromStatusJSON).
	HTTPStatus int
	Details    []json.RawMessage
}

// redact replaces what looks like a credential in the parts of p that can
// echo the request: the detail, the instance and the violations (a copy of
// them, when one changes: the caller's slice is left alone).
func (p *Problem) redact() {
	p.Detail, p.Instance = Redact(p.Detail), Redact(p.Instance)
	cloned := false
	for i, v := range p.Violations {
		f, m := Redact(v.Field), Redact(v.Message)
		if f == v.Field && m == v.Message {
			continue
		}
		if !cloned {
			p.Violations, cloned = slices.Clone(p.Violations), true
		}
		p.Violations[i].Field, p.Violations[i].Message = f, m
	}
}

// Violation is one field of a request that breaks a rule.
type Violation struct {
	// Field is the field's path in the request message ("order.items[0].sku").
	Field string
	// Rule identifies the broken rule ("string.pattern").
	Rule string
	// Message explains it to a human.
	Message string
}

// IsGRPC reports whether contentType is a gRPC content type
// (application/grpc or application/grpc+subtype, not gRPC-Web).
func IsGRPC(contentType string) bool {
	const p = "application/grpc"
	if len(contentType) < len(p) || !strings.EqualFold(contentType[:len(p)], p) {
		return false
	}
	rest := contentType[len(p):]
	return rest == "" || rest[0] == '+' || rest[0] == ';'
}

// Write sends p in the protocol of r (see ProtocolOf): a trailers-only
// response for gRPC and gRPC-Web, a Connect error for Connect, otherwise
// application/problem+json. Headers already set on
// w (request id, Allow, Retry-After, Connection) are kept. Write must be
// called before anything else has been written to w. Whatever in p looks
// like a credential is redacted (see Redact).
func Write(w http.ResponseWriter, r *http.Request, p Problem) {
	WriteAs(w, r, ProtocolOf(r), p)
}

// WriteAs is Write in protocol proto, for a request whose protocol is not
// what its headers alone say: a plain JSON POST to a method's path is a
// Connect unary call by the route it matched.
func WriteAs(w http.ResponseWriter, r *http.Request, proto Protocol, p Problem) {
	p.redact()
	switch proto {
	case GRPC, GRPCWeb:
		writeGRPC(w, r, p)
	case ConnectUnary:
		writeConnectUnary(w, r, p)
	case ConnectStream:
		writeConnectStream(w, r, p)
	default:
		writeJSON(w, r, p)
	}
}

func writeGRPC(w http.ResponseWriter, r *http.Request, p Problem) {
	h := w.Header()
	ct := r.Header.Get("Content-Type")
	h.Set("Content-Type", ct)
	h.Set("Grpc-Status", strconv.Itoa(p.Code.GRPCCode()))
	h.Set("Grpc-Message", EncodeGRPCMessage(p.message()))
	if p.RetryAfter > 0 {
		setRetryAfter(h, p.RetryAfter)
	}
	if d := p.statusDetails(); d != nil {
		h.Set("Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(d))
	}
	// A trailers-only response: status 200 and a single HEADERS frame
	// (gRPC-Web: the status in the headers, and no body).
	w.WriteHeader(http.StatusOK)
}

// message is the status message of p for RPC callers: its code, then the
// detail or the code's title.
func (p *Problem) message() string {
	msg := p.Detail
	if msg == "" {
		msg = p.Code.Title()
	}
	return string(p.Code) + ": " + msg
}

func writeJSON(w http.ResponseWriter, r *http.Request, p Problem) {
	status := p.Code.Status()
	if p.HTTPStatus != 0 {
		status = p.HTTPStatus
	}
	title := p.Code.Title()
	if _, known := specs[p.Code]; !known && http.StatusText(status) != "" {
		title = http.StatusText(status)
	}
	var b strings.Builder
	b.Grow(256 + len(p.Detail) + len(p.Instance))
	b.WriteString(`{"type":`)
	writeJSONString(&b, TypeBase+string(p.Code))
	b.WriteString(`,"title":`)
	writeJSONString(&b, title)
	b.WriteString(`,"status":`)
	b.WriteString(strconv.Itoa(status))
	if p.Detail != "" {
		b.WriteString(`,"detail":`)
		writeJSONString(&b, p.Detail)
	}
	if p.Instance != "" {
		b.WriteString(`,"instance":`)
		writeJSONString(&b, p.Instance)
	}
	b.WriteString(`,"error":`)
	writeJSONString(&b, string(p.Code))
	if len(p.Violations) > 0 {
		b.WriteString(`,"violations":[`)
		for i, v := range p.Violations {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"field":`)
			writeJSONString(&b, v.Field)
			b.WriteString(`,"rule":`)
			writeJSONString(&b, v.Rule)
			b.WriteString(`,"message":`)
			writeJSONString(&b, v.Message)
			b.WriteByte('}')
		}
		b.WriteByte(']')
	}
	if len(p.Details) > 0 {
		b.WriteString(`,"details":[`)
		for i, d := range p.Details {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(d)
		}
		b.WriteByte(']')
	}
	if p.RequestID != "" {
		b.WriteString(`,"request_id":`)
		writeJSONString(&b, p.RequestID)
	}
	b.WriteString("}\n")

	h := w.Header()
	if p.RetryAfter > 0 {
		setRetryAfter(h, p.RetryAfter)
	}
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(b.String()))
	}
}

const hexDigits = "0123456789ABCDEF"

// writeJSONString writes s as a JSON string literal. Invalid UTF-8 is replaced
// with U+FFFD, and <, >, & are escaped so the body is safe to embed.
func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == 0x2028 || r == 0x2029:
			b.WriteString(`\u`)
			b.WriteByte(hexDigits[(r>>12)&0xF])
			b.WriteByte(hexDigits[(r>>8)&0xF])
			b.WriteByte(hexDigits[(r>>4)&0xF])
			b.WriteByte(hexDigits[r&0xF])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// EncodeGRPCMessage percent-encodes msg for the grpc-message header as the
// gRPC over HTTP/2 spec requires: printable ASCII except '%' is kept, every
// other byte of the UTF-8 encoding becomes %XX.
func EncodeGRPCMessage(msg string) string {
	clean := true
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < 0x20 || c > 0x7E || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	var b strings.Builder
	b.Grow(len(msg) * 2)
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= 0x20 && c <= 0x7E && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xF])
	}
	return b.String()
}

// setRetryAfter sets Retry-After to d in whole seconds, rounded up.
func setRetryAfter(h http.Header, d time.Duration) {
	h.Set("Retry-After", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
}

// details returns p's google.rpc details: a RetryInfo for a RetryAfter, a
// BadRequest for Violations.
func (p *Problem) details() []*anypb.Any {
	var out []*anypb.Any
	if p.RetryAfter > 0 {
		if a, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(p.RetryAfter)}); err == nil {
			out = append(out, a)
		}
	}
	if len(p.Violations) > 0 {
		br := &errdetails.BadRequest{}
		for _, v := range p.Violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Reason: v.Rule, Description: v.Message})
		}
		if a, err := anypb.New(br); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// statusDetails returns the grpc-status-details-bin bytes of p: a
// google.rpc.Status with its details; nil if p has none.
func (p *Problem) statusDetails() []byte {
	d := p.details()
	if d == nil {
		return nil
	}
	b, err := proto.Marshal(&spb.Status{Code: int32(p.Code.GRPCCode()), Message: p.message(), Details: d})
	if err != nil {
		return nil
	}
	return b
}
