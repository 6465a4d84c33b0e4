package transcode

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"connectrpc.com/vanguard"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/router"
	"github.com/portico-gw/portico/gateway/snapshot"
)

// A REST binding of a server-streaming method streams its answer: one
// JSON value per response message, as newline-delimited JSON
// (application/x-ndjson) or, for a caller that accepts text/event-stream,
// as server-sent events. vanguard transcodes REST streams only for
// google.api.HttpBody responses, and buffers those whole (vanguard issue
// #161), so this path is the gateway's own: it builds the request message
// with grpc-gateway's runtime helpers (path variables, query parameters),
// makes one gRPC call and turns each response frame into a line or an
// event as it arrives. An error before the first message is a Problem
// Details answer; after it, a last line {"error": google.rpc.Status} (an
// "error" event).

// ServeServerStream answers a REST call of a server-streaming method of
// route. params are the route's path variables, rawQuery the query as
// CheckQuery passed it; upstream makes the gRPC call. x, if not nil, is
// the call's record, where the gateway's own refusals are recorded.
func (s *Set) ServeServerStream(w http.ResponseWriter, r *http.Request, route *snapshot.Route, params *router.Params, rawQuery string, x *exchange.Record, upstream http.Handler) {
	rpc := route.RPC
	res := s.resolvers[rpc.Service.Index]
	msg := dynamicpb.NewMessage(rpc.Method.Input())
	if p := buildRequest(r, route, params, rawQuery, msg, res); p != nil {
		x.Refuse(w, r, problem.HTTP, *p)
		return
	}
	payload, err := proto.Marshal(msg)
	if err != nil {
		x.Refuse(w, r, problem.HTTP, problem.Problem{Code: problem.BadRequest, Detail: "encoding the request: " + err.Error()})
		return
	}
	frame := make([]byte, 5+len(payload))
	binary.BigEndian.PutUint32(frame[1:5], uint32(len(payload)))
	copy(frame[5:], payload)

	up := r.Clone(r.Context())
	up.Method = http.MethodPost
	up.URL.Path, up.URL.RawPath, up.URL.RawQuery = rpc.Path, "", ""
	up.Header.Set("Content-Type", "application/grpc+proto")
	up.Header.Set("Te", "trailers")
	up.Header.Del("Accept")
	up.Header.Del("Content-Length")
	up.Header.Del("Accept-Encoding")
	up.Body = io.NopCloser(bytes.NewReader(frame))
	up.ContentLength = int64(len(frame))

	sw := &streamWriter{
		w: w, r: r, x: x, header: http.Header{},
		sse:   strings.Contains(r.Header.Get("Accept"), "text/event-stream"),
		codec: s.codecs[rpc.Service.Index], output: rpc.Method.Output(),
	}
	if rb := rpc.ResponseBody; rb != "" {
		sw.field = rpc.Method.Output().Fields().ByName(protoreflect.Name(rb))
	}
	upstream.ServeHTTP(sw, up)
	sw.finish()
}

// buildRequest fills msg from the call: the body (per the binding's
// body), the path variables and the query parameters.
func buildRequest(r *http.Request, route *snapshot.Route, params *router.Params, rawQuery string, msg *dynamicpb.Message, res vanguard.TypeResolver) *problem.Problem {
	rpc := route.RPC
	bad := func(detail string) *problem.Problem {
		return &problem.Problem{Code: problem.BadRequest, Detail: detail}
	}
	um := protojson.UnmarshalOptions{Resolver: res, DiscardUnknown: rpc.Service.AllowUnknownFields}
	if rpc.Body != "" && r.Body != nil {
		body, err := io.ReadAll(io.LimitReader(r.Body, route.MaxRequestBytes+1))
		if err != nil {
			if p := problem.ReadFailed(r.Context(), err); p != nil {
				return p
			}
			return bad("reading the request body: " + err.Error())
		}
		if int64(len(body)) > route.MaxRequestBytes {
			return &problem.Problem{Code: problem.PayloadTooLarge, Detail: "request body exceeds the route's limit"}
		}
		if len(bytes.TrimSpace(body)) > 0 {
			if rpc.Body == "*" {
				err = um.Unmarshal(body, msg)
			} else {
				fd := msg.Descriptor().Fields().ByName(protoreflect.Name(rpc.Body))
				if fd.Message() == nil || fd.IsList() || fd.IsMap() {
					return bad("the body field " + rpc.Body + " is not a message; the gateway streams only message bodies")
				}
				sub := dynamicpb.NewMessage(fd.Message())
				if err = um.Unmarshal(body, sub); err == nil {
					msg.Set(fd, protoreflect.ValueOfMessage(sub))
				}
			}
			if err != nil {
				return bad("the request body does not decode as " + string(msg.Descriptor().FullName()) + ": " + err.Error())
			}
		}
	}
	var bound [][]string
	for i := range params.Len() {
		name, value := params.At(i)
		v, err := url.PathUnescape(value)
		if err != nil {
			return bad("path variable " + name + " is not validly escaped")
		}
		if err := runtime.PopulateFieldFromPath(msg, name, v); err != nil {
			return bad("path variable " + name + ": " + err.Error())
		}
		bound = append(bound, strings.Split(name, "."))
	}
	if rpc.Body != "" && rpc.Body != "*" {
		bound = append(bound, []string{rpc.Body})
	}
	if rawQuery != "" && rpc.Body != "*" {
		values, err := url.ParseQuery(rawQuery)
		if err != nil {
			return bad("the query does not parse: " + err.Error())
		}
		if err := runtime.PopulateQueryParameters(msg, values, utilities.NewDoubleArray(bound)); err != nil {
			return bad("query parameters: " + err.Error())
		}
	}
	return nil
}

// streamWriter receives the upstream's gRPC answer and writes it to the
// REST caller as it comes.
type streamWriter struct {
	w      http.ResponseWriter
	r      *http.Request
	x      *exchange.Record
	header http.Header // the upstream's headers and trailers, never the caller's
	sse    bool
	codec  *vanguard.JSONCodec
	output protoreflect.MessageDescriptor
	field  protoreflect.FieldDescriptor // response_body; nil for the whole message

	buf     []byte // a partial frame
	started bool   // the caller's headers are out
	failed  bool   // a frame could not be turned into JSON
}

func (s *streamWriter) Header() http.Header { return s.header }

func (s *streamWriter) WriteHeader(int) {}

func (s *streamWriter) Flush() {}

func (s *streamWriter) Write(p []byte) (int, error) {
	if s.failed {
		return 0, errors.New("stream abandoned")
	}
	s.buf = append(s.buf, p...)
	for len(s.buf) >= 5 {
		n := int(binary.BigEndian.Uint32(s.buf[1:5]))
		if len(s.buf) < 5+n {
			break
		}
		flags, payload := s.buf[0], s.buf[5:5+n]
		if flags&1 != 0 {
			s.fail("a compressed response message")
			return 0, errors.New("compressed response message")
		}
		m := dynamicpb.NewMessage(s.output)
		var out []byte
		err := proto.Unmarshal(payload, m)
		if err == nil {
			if s.field != nil {
				out, err = s.codec.MarshalAppendField(nil, m, s.field)
			} else {
				out, err = s.codec.MarshalAppend(nil, m)
			}
		}
		if err != nil {
			s.fail("a response message does not convert to JSON: " + err.Error())
			return 0, err
		}
		s.start()
		s.emit("", out)
		s.buf = s.buf[5+n:]
	}
	return len(p), nil
}

// start sends the caller's headers, once.
func (s *streamWriter) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	if s.sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	s.w.WriteHeader(http.StatusOK)
}

// emit writes one JSON value as a line or an event, and flushes it.
func (s *streamWriter) emit(event string, v []byte) {
	var b []byte
	if s.sse {
		if event != "" {
			b = append(b, "event: "+event+"\n"...)
		}
		b = append(b, "data: "...)
		b = append(b, v...)
		b = append(b, "\n\n"...)
	} else {
		b = append(append(b, v...), '\n')
	}
	_, _ = s.w.Write(b)
	_ = http.NewResponseController(s.w).Flush()
}

// fail ends the stream for a reason of the gateway's own.
func (s *streamWriter) fail(detail string) {
	s.failed = true
	s.x.EndedByGateway(problem.Internal)
	s.end(&spb.Status{Code: int32(problem.Internal.GRPCCode()), Message: detail})
}

// finish ends the stream with the call's status.
func (s *streamWriter) finish() {
	if s.failed {
		return
	}
	st := s.status()
	if st.GetCode() == 0 {
		s.start()
		return
	}
	s.end(st)
}

// end reports a failed call: as Problem Details if nothing was sent yet,
// else as a last line or event.
func (s *streamWriter) end(st *spb.Status) {
	if !s.started {
		b, err := protojson.MarshalOptions{Resolver: s.codec.MarshalOptions.Resolver}.Marshal(st)
		p, ok := problem.FromStatusJSON(b, problem.HTTPStatusOfGRPC(int(st.GetCode())))
		if err != nil || !ok {
			p = problem.Problem{Code: problem.UpstreamError, Detail: st.GetMessage()}
		}
		problem.Write(s.w, s.r, p)
		s.started = true
		return
	}
	b, err := protojson.MarshalOptions{Resolver: s.codec.MarshalOptions.Resolver}.Marshal(st)
	if err != nil {
		b = []byte(`{"code":` + strconv.Itoa(int(st.GetCode())) + `}`)
	}
	s.emit("error", append(append([]byte(`{"error":`), b...), '}'))
}

// status is the call's gRPC status, from the trailers (or, for a
// trailers-only answer, the headers).
func (s *streamWriter) status() *spb.Status {
	get := func(k string) string {
		if v := s.header.Get(http.TrailerPrefix + k); v != "" {
			return v
		}
		return s.header.Get(k)
	}
	code := get("Grpc-Status")
	if code == "" {
		return &spb.Status{Code: int32(problem.UpstreamError.GRPCCode()), Message: "the upstream ended the call without a status"}
	}
	c, err := strconv.Atoi(code)
	if err != nil || c < 0 || c > 16 {
		return &spb.Status{Code: 2, Message: "the upstream answered status " + strconv.Quote(code)}
	}
	st := &spb.Status{Code: int32(c)}
	if msg, err := url.PathUnescape(get("Grpc-Message")); err == nil {
		st.Message = msg
	}
	if d := get("Grpc-Status-Details-Bin"); d != "" {
		if raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d, "=")); err == nil {
			var full spb.Status
			if proto.Unmarshal(raw, &full) == nil {
				st.Details = full.GetDetails()
			}
		}
	}
	return st
}
