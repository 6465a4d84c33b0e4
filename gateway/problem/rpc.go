package problem

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// Protocol is the wire protocol of a request, as far as errors go.
type Protocol int

// The protocols ProtocolOf tells apart.
const (
	// HTTP is any other request: errors are Problem Details.
	HTTP Protocol = iota
	// GRPC is application/grpc[+codec].
	GRPC
	// GRPCWeb is application/grpc-web[-text][+codec].
	GRPCWeb
	// ConnectUnary is a Connect unary call: a POST with a
	// Connect-Protocol-Version header, or a GET with connect=v1 in its
	// query.
	ConnectUnary
	// ConnectStream is a Connect streaming call:
	// application/connect+codec.
	ConnectStream
)

// ProtocolOf returns the protocol r speaks, from its Content-Type and, for
// Connect unary calls, the Connect-Protocol-Version header or the GET
// query's connect parameter.
func ProtocolOf(r *http.Request) Protocol {
	ct := r.Header.Get("Content-Type")
	switch {
	case IsGRPC(ct):
		return GRPC
	case hasPrefixFold(ct, "application/grpc-web"):
		return GRPCWeb
	case hasPrefixFold(ct, "application/connect+"):
		return ConnectStream
	case r.Header.Get("Connect-Protocol-Version") != "" && (r.Method == http.MethodPost || r.Method == http.MethodGet):
		return ConnectUnary
	case r.Method == http.MethodGet && strings.Contains(r.URL.RawQuery, "connect=v1") && r.URL.Query().Get("connect") == "v1":
		return ConnectUnary
	}
	return HTTP
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// connectCodes are the Connect names of the gRPC codes, by number.
var connectCodes = [...]string{
	"ok", "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
	"already_exists", "permission_denied", "resource_exhausted", "failed_precondition",
	"aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss",
	"unauthenticated",
}

// connectHTTPStatus is the HTTP status of a Connect unary error, by gRPC
// code number, as the Connect protocol specifies.
var connectHTTPStatus = [...]int{
	200, 499, 500, 400, 504, 404, 409, 403, 429, 400, 409, 400, 501, 500, 503, 500, 401,
}

// HTTPStatusOfGRPC is the HTTP status of a gRPC status code, as the
// Connect protocol (and google.api.http transcoding) map it.
func HTTPStatusOfGRPC(code int) int {
	if code < 0 || code >= len(connectHTTPStatus) {
		return http.StatusInternalServerError
	}
	return connectHTTPStatus[code]
}

// connectError writes p's Connect error object: code, message and p's
// details (RetryInfo, BadRequest).
func (p *Problem) connectError(b *strings.Builder) {
	b.WriteString(`{"code":"`)
	b.WriteString(connectCodes[p.Code.GRPCCode()])
	b.WriteString(`","message":`)
	writeJSONString(b, p.message())
	if d := p.details(); len(d) > 0 {
		b.WriteString(`,"details":[`)
		for i, a := range d {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"type":`)
			writeJSONString(b, strings.TrimPrefix(a.GetTypeUrl(), "type.googleapis.com/"))
			b.WriteString(`,"value":"`)
			b.WriteString(base64.RawStdEncoding.EncodeToString(a.GetValue()))
			b.WriteString(`"}`)
		}
		b.WriteString(`]`)
	}
	b.WriteString("}")
}

// writeConnectUnary answers a Connect unary call: the code's HTTP status
// and the error as JSON.
func writeConnectUnary(w http.ResponseWriter, r *http.Request, p Problem) {
	var b strings.Builder
	p.connectError(&b)
	h := w.Header()
	if p.RetryAfter > 0 {
		setRetryAfter(h, p.RetryAfter)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	h.Set("Cache-Control", "no-store")
	status := connectHTTPStatus[p.Code.GRPCCode()]
	if p.Code == NoRoute || p.Code == UnsupportedMedia {
		// Refusals before the call is one keep their HTTP status, as
		// connect-go answers them: an unknown procedure is a 404 (which
		// Connect clients read as unimplemented, like the body's code), a
		// body that is neither JSON nor proto a 415 (unknown).
		status = p.Code.Status()
	}
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(b.String()))
	}
}

// endStreamFlag marks a Connect streaming envelope as the end of the
// stream, whose JSON carries the error.
const endStreamFlag = 0x02

// writeConnectStream answers a Connect streaming call: status 200 and a
// single end-of-stream message holding the error.
func writeConnectStream(w http.ResponseWriter, r *http.Request, p Problem) {
	var b strings.Builder
	b.WriteString(`{"error":`)
	p.connectError(&b)
	b.WriteString("}")
	msg := make([]byte, 5+b.Len())
	msg[0] = endStreamFlag
	binary.BigEndian.PutUint32(msg[1:5], uint32(b.Len()))
	copy(msg[5:], b.String())
	h := w.Header()
	if p.RetryAfter > 0 {
		setRetryAfter(h, p.RetryAfter)
	}
	h.Set("Content-Type", r.Header.Get("Content-Type"))
	h.Set("Content-Length", strconv.Itoa(len(msg)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(msg)
}

// FromStatusJSON is the Problem of an upstream's error that a transcoder
// rendered as a google.rpc.Status in proto3 JSON, answered with HTTP
// status httpStatus: its code's Connect name ("not_found") as the problem
// code, its message as the detail, the field violations of a
// google.rpc.BadRequest as violations, and every detail kept. ok is false
// if body is not such a status.
func FromStatusJSON(body []byte, httpStatus int) (p Problem, ok bool) {
	var st struct {
		Code    *int              `json:"code"`
		Message string            `json:"message"`
		Details []json.RawMessage `json:"details"`
	}
	if err := json.Unmarshal(body, &st); err != nil || st.Code == nil || *st.Code <= 0 || *st.Code >= len(connectCodes) {
		return Problem{}, false
	}
	p = Problem{Code: Code(connectCodes[*st.Code]), Detail: st.Message, HTTPStatus: httpStatus, Details: st.Details}
	for _, d := range st.Details {
		var br struct {
			Type       string `json:"@type"`
			Violations []struct {
				Field, Description, Reason string
			} `json:"fieldViolations"`
		}
		if json.Unmarshal(d, &br) != nil || !strings.HasSuffix(br.Type, "/google.rpc.BadRequest") {
			continue
		}
		for _, v := range br.Violations {
			p.Violations = append(p.Violations, Violation{Field: v.Field, Rule: v.Reason, Message: v.Description})
		}
	}
	return p, true
}

// Error is a Problem as an error: what a request body returns when the
// gateway refuses a message in the middle of a stream (one that breaks
// the service's rules), so that whoever forwards the body answers with
// the Problem rather than a generic failure.
type Error struct{ Problem Problem }

func (e *Error) Error() string {
	p := e.Problem
	p.redact()
	return p.message()
}

// SetGRPCTrailers sets p as the gRPC status in the trailers of a response
// that has started: grpc-status, grpc-message and, with details,
// grpc-status-details-bin, each under http.TrailerPrefix. Like Write, it
// redacts what looks like a credential.
func SetGRPCTrailers(h http.Header, p Problem) {
	p.redact()
	h[http.TrailerPrefix+"Grpc-Status"] = []string{strconv.Itoa(p.Code.GRPCCode())}
	h[http.TrailerPrefix+"Grpc-Message"] = []string{EncodeGRPCMessage(p.message())}
	if d := p.statusDetails(); d != nil {
		h[http.TrailerPrefix+"Grpc-Status-Details-Bin"] = []string{base64.RawStdEncoding.EncodeToString(d)}
	}
}

// GRPCStatus returns an answer's grpc-status values, from its headers as
// a handler's ResponseWriter holds them: the trailers (declared with
// http.TrailerPrefix), else the headers of a trailers-only answer; nil
// if it has none yet.
func GRPCStatus(h http.Header) []string {
	if v := h[http.TrailerPrefix+"Grpc-Status"]; len(v) > 0 {
		return v
	}
	return h["Grpc-Status"]
}

// IsServerFault reports whether a grpc-status value is a server-side
// failure: UNKNOWN, DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE or
// DATA_LOSS, what the rollout judge counts as a backend's fault.
func IsServerFault(grpcStatus string) bool {
	switch grpcStatus {
	case "2", "4", "13", "14", "15":
		return true
	}
	return false
}
