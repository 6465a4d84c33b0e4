package transcode

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/problem"
)

// RPCAnswer is the writer a transcoder's answer to a Connect or gRPC-Web
// caller goes through. It passes the answer on with every error message
// in it redacted (problem.Redact), as the gateway's own problems are: the
// transcoder words errors of its own (protojson's "unknown field
// \"ak_live_…\"" for a body it cannot decode, a timeout header it cannot
// parse, quoted), and the gateway sees them nowhere else. The upstream's
// errors, which the transcoder re-encodes, are redacted alike, as REST
// callers' are (their errors become problems). (gRPC callers' calls are
// not transcoded: they are forwarded, and answered, as they are.) Where
// the message is:
//
//   - Connect unary: the JSON error body of a non-200 answer, held back
//     (the transcoder buffers unary answers whole anyway);
//   - Connect streaming: the error of the end-of-stream message;
//   - gRPC-Web: grpc-message, and the status message inside
//     grpc-status-details-bin, in the headers of a trailers-only answer
//     or in the trailer frame, whose keys are also lower-cased, as the
//     protocol asks (the transcoder writes them as Go canonicalises
//     header names).
//
// A plain-text refusal the transcoder writes before the call is one (a
// timeout header it cannot parse, a protocol it cannot classify) becomes
// the protocol's own error (problem.WriteAs), which the caller's client
// reads, where plain text reached it as an unknown error.
//
// A successful answer passes untouched: nothing is copied but gRPC-Web's
// trailer frame, and a stream's frames are only counted. Use it by Reset,
// as the transcoder's ResponseWriter, then Finish once the transcoder's
// ServeHTTP has returned. It is not safe for concurrent use.
type RPCAnswer struct {
	http.ResponseWriter
	// Record, if set, is the call's record: a plain-text refusal of the
	// transcoder's, rewritten in the caller's protocol, is recorded there
	// as the gateway's refusal. Reset leaves it as it is.
	Record *exchange.Record

	r     *http.Request // the caller's request, its headers as they came
	proto problem.Protocol

	wroteHeader bool
	status      int // an error answer held back until Finish; 0: none
	// header is the held answer's header as it was written: the upstream
	// side of the transcoder shares the header map, and may set its own
	// gRPC status in it after the transcoder wrote the caller's error.
	header http.Header
	held   bytes.Buffer
	frames endFrames
}

// maxHeldText bounds the plain-text refusal RPCAnswer keeps as the error's
// message; the rest is dropped.
const maxHeldText = 4 << 10

// Reset readies a to answer r, a call in protocol proto (Connect unary or
// streaming, or gRPC-Web), on w.
func (a *RPCAnswer) Reset(w http.ResponseWriter, r *http.Request, proto problem.Protocol) {
	a.ResponseWriter, a.r, a.proto = w, r, proto
	a.wroteHeader, a.status, a.header = false, 0, nil
	a.held.Reset()
	switch proto {
	case problem.GRPCWeb:
		a.frames.reset(0x80, webTrailers)
	case problem.ConnectStream:
		a.frames.reset(0x02, connectEndOfStream)
	default:
		a.frames.reset(0, nil)
	}
}

func (a *RPCAnswer) WriteHeader(code int) {
	if a.wroteHeader || code < 200 {
		if a.status == 0 {
			a.ResponseWriter.WriteHeader(code)
		}
		return
	}
	a.wroteHeader = true
	h := a.Header()
	if code >= 400 {
		if ct := firstValue(h, "Content-Type"); strings.HasPrefix(ct, "text/plain") ||
			a.proto == problem.ConnectUnary && strings.HasPrefix(ct, "application/json") {
			a.status, a.header = code, h.Clone()
			return
		}
	}
	if a.proto == problem.GRPCWeb {
		// A trailers-only answer: the status is in the headers.
		redactGRPCStatus(h)
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *RPCAnswer) Write(p []byte) (int, error) {
	if !a.wroteHeader {
		a.WriteHeader(http.StatusOK)
	}
	switch {
	case a.status != 0:
		n := len(p)
		if a.heldText() {
			// Only so much of a refusal's text becomes its message.
			p = p[:min(n, max(maxHeldText-a.held.Len(), 0))]
		}
		a.held.Write(p)
		return n, nil
	case a.frames.end != 0:
		return a.frames.write(a.ResponseWriter, p)
	}
	return a.ResponseWriter.Write(p)
}

// Flush flushes what has passed through; an answer held back waits for
// Finish.
func (a *RPCAnswer) Flush() {
	if a.status != 0 {
		return
	}
	if f, ok := a.ResponseWriter.(http.Flusher); ok {
		f.Flush()
		return
	}
	_ = http.NewResponseController(a.ResponseWriter).Flush()
}

func (a *RPCAnswer) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// Finish writes an error answer held back, redacted.
func (a *RPCAnswer) Finish() {
	if a.status != 0 {
		a.writeHeld()
	}
}

func (a *RPCAnswer) heldText() bool {
	return strings.HasPrefix(firstValue(a.header, "Content-Type"), "text/plain")
}

func (a *RPCAnswer) writeHeld() {
	h := a.Header()
	clear(h)
	maps.Copy(h, a.header)
	w := a.ResponseWriter
	if a.heldText() {
		// http.Error's headers, for its text.
		for _, k := range []string{"Content-Type", "Content-Length", "X-Content-Type-Options"} {
			delete(h, k)
		}
		p := problem.Problem{Code: codeOfStatus(a.status), Detail: strings.TrimSpace(a.held.String())}
		a.Record.Refuse(w, a.r, a.proto, p)
		return
	}
	if x := a.Record; x != nil && x.By == exchange.Nobody {
		// A Connect error no upstream answered: the transcoder's own (a
		// body it cannot decode).
		x.EndedByGateway(codeOfStatus(a.status))
	}
	body := redactConnectError(a.held.Bytes())
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(a.status)
	if a.r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// codeOfStatus is the problem code of a plain-text refusal's HTTP status.
func codeOfStatus(status int) problem.Code {
	switch status {
	case http.StatusNotFound:
		return problem.NoRoute
	case http.StatusMethodNotAllowed:
		return problem.MethodNotAllowed
	case http.StatusRequestEntityTooLarge:
		return problem.PayloadTooLarge
	case http.StatusUnsupportedMediaType:
		return problem.UnsupportedMedia
	case http.StatusBadGateway:
		return problem.UpstreamError
	case http.StatusServiceUnavailable:
		return problem.UpstreamUnavailable
	case http.StatusGatewayTimeout:
		return problem.UpstreamTimeout
	}
	if status < 500 {
		return problem.BadRequest
	}
	return problem.Internal
}

func firstValue(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// connectError is the Connect protocol's error object.
type connectError struct {
	Code    string          `json:"code"`
	Message string          `json:"message,omitempty"`
	Details json.RawMessage `json:"details,omitempty"`
}

// redact reports whether e's message had something to redact, which it
// now has not.
func (e *connectError) redact() bool {
	m := problem.Redact(e.Message)
	changed := m != e.Message
	e.Message = m
	return changed
}

// redactConnectError returns a Connect unary error body with its message
// redacted: body itself if there was nothing to redact (or it is no
// Connect error).
func redactConnectError(body []byte) []byte {
	var e connectError
	if json.Unmarshal(body, &e) != nil || !e.redact() {
		return body
	}
	b, err := json.Marshal(&e)
	if err != nil {
		return body
	}
	return b
}

// connectEndOfStream rewrites the payload of a Connect end-of-stream
// message with its error's message redacted.
func connectEndOfStream(b []byte) []byte {
	if !bytes.Contains(b, []byte(`"error"`)) {
		return b // the end of a call that succeeded
	}
	var end struct {
		Error    *connectError   `json:"error,omitempty"`
		Metadata json.RawMessage `json:"metadata,omitempty"`
	}
	if json.Unmarshal(b, &end) != nil || end.Error == nil || !end.Error.redact() {
		return b
	}
	out, err := json.Marshal(&end)
	if err != nil {
		return b
	}
	return out
}

// webTrailers rewrites a gRPC-Web trailer frame's payload (HTTP/1-style
// header lines): keys lower-cased, grpc-message and the status message in
// grpc-status-details-bin redacted.
func webTrailers(b []byte) []byte {
	changed := false
	for rest := b; len(rest) > 0; {
		line, after, _ := bytes.Cut(rest, []byte("\r\n"))
		rest = after
		i := bytes.IndexByte(line, ':')
		if i <= 0 {
			continue
		}
		lowerASCII(line[:i])
		if !changed && isGRPCStatusField(line[:i]) {
			v := string(bytes.TrimSpace(line[i+1:]))
			changed = redactGRPCField(string(line[:i]), v) != v
		}
	}
	if !changed {
		return b
	}
	var out bytes.Buffer
	for rest := b; len(rest) > 0; {
		line, after, found := bytes.Cut(rest, []byte("\r\n"))
		rest = after
		if i := bytes.IndexByte(line, ':'); i > 0 && isGRPCStatusField(line[:i]) {
			out.Write(line[:i])
			out.WriteString(": ")
			out.WriteString(redactGRPCField(string(line[:i]), string(bytes.TrimSpace(line[i+1:]))))
		} else {
			out.Write(line)
		}
		if found {
			out.WriteString("\r\n")
		}
	}
	return out.Bytes()
}

// isGRPCStatusField reports whether a lower-case field name is one whose
// value can carry a status message.
func isGRPCStatusField(name []byte) bool {
	return string(name) == "grpc-message" || string(name) == "grpc-status-details-bin"
}

func lowerASCII(b []byte) {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
}

// redactGRPCStatus redacts the gRPC status in the headers h, in place.
func redactGRPCStatus(h http.Header) {
	for i, v := range h["Grpc-Message"] {
		h["Grpc-Message"][i] = redactGRPCField("grpc-message", v)
	}
	for i, v := range h["Grpc-Status-Details-Bin"] {
		h["Grpc-Status-Details-Bin"][i] = redactGRPCField("grpc-status-details-bin", v)
	}
}

// redactGRPCField returns v, the value of a grpc-message (percent-encoded,
// which Redact reads through) or grpc-status-details-bin (a
// google.rpc.Status, whose message is the same one) field, redacted: v
// itself if there was nothing to redact.
func redactGRPCField(lowerName, v string) string {
	if lowerName == "grpc-message" {
		return problem.Redact(v)
	}
	bin, err := connect.DecodeBinaryHeader(v)
	if err != nil {
		return v
	}
	var st spb.Status
	if proto.Unmarshal(bin, &st) != nil {
		return v
	}
	m := problem.Redact(st.GetMessage())
	if m == st.GetMessage() {
		return v
	}
	st.Message = m
	if bin, err = proto.Marshal(&st); err != nil {
		return v
	}
	return connect.EncodeBinaryHeader(bin)
}
