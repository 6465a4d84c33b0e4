package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/gen/portico/demo/v1/demov1connect"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// edgeOrders is a connect-go orders backend (served to the gateway as
// gRPC over h2c) for the edge cases of transcoded streams: connect-go
// checks how many messages a call carries.
type edgeOrders struct{ connectOrders }

// SyncOrders fails at the first request, with a response header, while
// the caller still holds its side of the stream open.
func (edgeOrders) SyncOrders(_ context.Context, s *connect.BidiStream[demov1.SyncOrdersRequest, demov1.SyncOrdersResponse]) error {
	if _, err := s.Receive(); err != nil {
		return err
	}
	s.ResponseHeader().Set("X-Custom-Header", "foo")
	return connect.NewError(connect.CodeInternal, errors.New("sync failed"))
}

// WatchOrders sends two events, then fails with a detail.
func (edgeOrders) WatchOrders(_ context.Context, r *connect.Request[demov1.WatchOrdersRequest], s *connect.ServerStream[demov1.WatchOrdersResponse]) error {
	for i := range 2 {
		if err := s.Send(&demov1.WatchOrdersResponse{Event: &demov1.OrderEvent{OrderId: "o-1", Sequence: uint64(i + 1)}}); err != nil {
			return err
		}
	}
	err := connect.NewError(connect.CodeUnavailable, errors.New("feed lost"))
	if d, derr := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)}); derr == nil {
		err.AddDetail(d)
	}
	return err
}

// ImportOrders reads every message.
func (edgeOrders) ImportOrders(_ context.Context, s *connect.ClientStream[demov1.ImportOrdersRequest]) (*connect.Response[demov1.ImportOrdersResponse], error) {
	for s.Receive() {
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&demov1.ImportOrdersResponse{}), nil
}

// connectBackend serves impl with connect-go (Connect, gRPC and gRPC-Web)
// over HTTP/1.1 and h2c, and returns its address.
func connectBackend(tb testing.TB, impl demov1connect.OrdersServiceHandler) string {
	tb.Helper()
	path, h := demov1connect.NewOrdersServiceHandler(impl)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	backend := httptest.NewUnstartedServer(mux)
	backend.Config.Protocols = new(http.Protocols)
	backend.Config.Protocols.SetHTTP1(true)
	backend.Config.Protocols.SetUnencryptedHTTP2(true)
	backend.Start()
	tb.Cleanup(backend.Close)
	return backend.Listener.Addr().String()
}

func startEdgeGateway(t *testing.T) *gatewaytest.Gateway {
	t.Helper()
	cfg := rpcSnapshot(t, connectBackend(t, edgeOrders{}))
	// The backend checks the messages; the gateway's validation (which
	// would refuse empty ones) stays out of the way.
	cfg.Services[0].DisableValidation = true
	return gatewaytest.Start(t, cfg, nil)
}

// TestRPCFullDuplexUpstreamError: a backend that ends a bidi stream with
// an error while the caller keeps its side open. The caller gets the
// error and the header at once in every protocol; through the transcoder
// the call used to hang until its deadline (its request body's Close
// waited for the caller's next message).
func TestRPCFullDuplexUpstreamError(t *testing.T) {
	t.Parallel()
	g := startEdgeGateway(t)
	for name, opt := range map[string]connect.ClientOption{
		"grpc": connect.WithGRPC(), "grpc-web": connect.WithGRPCWeb(), "connect": connect.WithProtoJSON(),
	} {
		t.Run(name, func(t *testing.T) {
			c := demov1connect.NewOrdersServiceClient(gatewaytest.H2CClient(t), g.URL(), opt)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s := c.SyncOrders(ctx)
			if err := s.Send(&demov1.SyncOrdersRequest{OrderId: "o-1", Status: demov1.OrderStatus_ORDER_STATUS_PAID}); err != nil {
				t.Fatal(err)
			}
			_, err := s.Receive()
			if connect.CodeOf(err) != connect.CodeInternal || !strings.Contains(err.Error(), "sync failed") {
				t.Fatalf("receive: %v, want internal \"sync failed\"", err)
			}
			if got := s.ResponseHeader().Get("X-Custom-Header"); got != "foo" {
				t.Errorf("response header = %q, want foo", got)
			}
			_ = s.CloseRequest()
			_ = s.CloseResponse()
		})
	}
}

// envelopes frames msgs as a gRPC, gRPC-Web or Connect stream body.
func envelopes(msgs ...[]byte) []byte {
	var b bytes.Buffer
	for _, m := range msgs {
		var hdr [5]byte
		binary.BigEndian.PutUint32(hdr[1:], uint32(len(m)))
		b.Write(hdr[:])
		b.Write(m)
	}
	return b.Bytes()
}

// TestRPCMessageCount: a unary or server-streaming call must carry exactly
// one request message, and the backend says so when it does not. Empty
// messages (zero-length frames) included: the transcoder's reader used to
// end the request after the first empty message, so two became one.
func TestRPCMessageCount(t *testing.T) {
	t.Parallel()
	g := startEdgeGateway(t)
	hc := gatewaytest.H2CClient(t)
	call := func(path, contentType string, body []byte) (int, http.Header, []byte) {
		req, _ := http.NewRequest("POST", g.URL()+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for k, v := range resp.Trailer {
			resp.Header[k] = v
		}
		return resp.StatusCode, resp.Header, b
	}
	const getOrder, watch = "/portico.demo.v1.OrdersService/GetOrder", "/portico.demo.v1.OrdersService/WatchOrders"
	for _, tc := range []struct {
		name, path, contentType string
		body                    []byte
	}{
		{"grpc-web unary, two empty", getOrder, "application/grpc-web+proto", envelopes(nil, nil)},
		{"grpc-web unary, none", getOrder, "application/grpc-web+proto", nil},
		{"grpc unary, two empty", getOrder, "application/grpc", envelopes(nil, nil)},
		{"connect server stream, two empty", watch, "application/connect+proto", envelopes(nil, nil)},
		{"grpc-web server stream, two empty", watch, "application/grpc-web+proto", envelopes(nil, nil)},
	} {
		status, h, body := call(tc.path, tc.contentType, tc.body)
		var code string
		switch {
		case strings.HasPrefix(tc.contentType, "application/connect"):
			if i := bytes.Index(body, []byte(`"code":"`)); i >= 0 {
				code = string(body[i+8:])
				code = code[:strings.IndexByte(code, '"')]
			}
		case h.Get("Grpc-Status") != "":
			code = h.Get("Grpc-Status")
		default: // gRPC-Web trailers in the body
			if i := bytes.Index(body, []byte("grpc-status: ")); i >= 0 {
				code = strings.TrimSpace(strings.SplitN(string(body[i+13:]), "\r\n", 2)[0])
			}
		}
		if status != 200 || (code != "12" && code != "unimplemented") {
			t.Errorf("%s: %d code %q %q, want unimplemented (one request message required)", tc.name, status, code, body)
		}
	}
}

// TestRPCRefusalsByProtocol: what the gateway itself refuses of an RPC
// call is answered as the caller's protocol expects it (the Connect
// conformance suite's "unexpected requests"): an unknown compression is
// unimplemented, with the encodings the gateway takes; a body neither JSON
// nor proto 415; an unknown procedure a Connect 404; a Connect call with another method than POST
// or GET an HTTP 405 Problem, which Connect clients read as unknown.
func TestRPCRefusalsByProtocol(t *testing.T) {
	t.Parallel()
	g := startEdgeGateway(t)
	hc := gatewaytest.H2CClient(t)
	do := func(method, path string, header map[string]string, body []byte) (*http.Response, []byte) {
		req, _ := http.NewRequest(method, g.URL()+path, bytes.NewReader(body))
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	const getOrder, watch = "/portico.demo.v1.OrdersService/GetOrder", "/portico.demo.v1.OrdersService/WatchOrders"

	// Compression the gateway cannot read.
	resp, b := do("POST", getOrder, map[string]string{"Content-Type": "application/proto", "Connect-Protocol-Version": "1", "Content-Encoding": "zstd"}, []byte{})
	if resp.StatusCode != 501 || !strings.Contains(string(b), `"code":"unimplemented"`) || resp.Header.Get("Accept-Encoding") != "gzip" {
		t.Errorf("Connect unary zstd: %d %s accept %q, want 501 unimplemented, Accept-Encoding gzip", resp.StatusCode, b, resp.Header.Get("Accept-Encoding"))
	}
	resp, b = do("POST", watch, map[string]string{"Content-Type": "application/connect+proto", "Connect-Content-Encoding": "br"}, envelopes(nil))
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"code":"unimplemented"`) || resp.Header.Get("Connect-Accept-Encoding") != "gzip" {
		t.Errorf("Connect stream br: %d %q, want an unimplemented end of stream", resp.StatusCode, b)
	}
	resp, _ = do("POST", getOrder, map[string]string{"Content-Type": "application/grpc-web+proto", "Grpc-Encoding": "snappy"}, envelopes(nil))
	if resp.Header.Get("Grpc-Status") != "12" || resp.Header.Get("Grpc-Accept-Encoding") != "gzip" {
		t.Errorf("gRPC-Web snappy: grpc-status %q, want 12 with grpc-accept-encoding gzip", resp.Header.Get("Grpc-Status"))
	}
	// gzip is served.
	resp, _ = do("POST", getOrder, map[string]string{"Content-Type": "application/grpc-web+proto", "Grpc-Encoding": "gzip"}, envelopes([]byte{10, 6, 'o', '-', '1', '0', '0', '1'}))
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "" {
		t.Errorf("gRPC-Web gzip (uncompressed frame): %d grpc-status %q, want an answer", resp.StatusCode, resp.Header.Get("Grpc-Status"))
	}

	// A body that is neither JSON nor proto.
	resp, b = do("POST", getOrder, map[string]string{"Content-Type": "image/jpeg"}, []byte("12345678"))
	if resp.StatusCode != 415 || !strings.Contains(string(b), "unsupported_media_type") {
		t.Errorf("image/jpeg: %d %s, want a 415 problem", resp.StatusCode, b)
	}
	resp, b = do("POST", getOrder, map[string]string{"Content-Type": "application/foo", "Connect-Protocol-Version": "1"}, []byte("12345678"))
	if resp.StatusCode != 415 || !strings.Contains(string(b), `"code":"unknown"`) {
		t.Errorf("Connect application/foo: %d %s, want 415 and a Connect error unknown", resp.StatusCode, b)
	}

	// An unknown procedure, and a method Connect does not use.
	resp, b = do("POST", "/portico.demo.v1.UnknownService/Nothing", map[string]string{"Content-Type": "application/proto", "Connect-Protocol-Version": "1"}, nil)
	if resp.StatusCode != 404 || !strings.Contains(string(b), `"code":"unimplemented"`) {
		t.Errorf("Connect unknown procedure: %d %s, want 404 unimplemented", resp.StatusCode, b)
	}
	resp, b = do("DELETE", getOrder, map[string]string{"Content-Type": "application/proto", "Connect-Protocol-Version": "1"}, nil)
	if resp.StatusCode != 405 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(b), "method_not_allowed") {
		t.Errorf("Connect DELETE: %d %s %s, want a 405 problem", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
}

// TestRPCBadBodyKeepsHTTP2Connection: a request body that breaks off
// inside a message is a bad request, and on HTTP/2 only that stream ends:
// "Connection: close" (right for HTTP/1.1) used to send the whole
// connection a GOAWAY, failing the caller's other calls on it.
func TestRPCBadBodyKeepsHTTP2Connection(t *testing.T) {
	t.Parallel()
	g := startEdgeGateway(t)
	// One connection, framed by hand: Go's client may dial a second
	// connection on its own while it cleans up the first call's stream,
	// so counting its dials would blame the gateway for the client.
	fr := h2cConn(t, g.Addr)
	// call sends one request on stream id and reads its answer: the
	// :status and the body. A GOAWAY or a reset fails the test.
	call := func(id uint32, path, contentType string, body []byte) (string, string) {
		t.Helper()
		writeHeaders(t, fr, id, []hpack.HeaderField{
			{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":authority", Value: g.Addr},
			{Name: ":path", Value: path}, {Name: "content-type", Value: contentType},
		}, false)
		if err := fr.WriteData(id, true, body); err != nil {
			t.Fatal(err)
		}
		var status string
		var got bytes.Buffer
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("stream %d: reading the answer: %v", id, err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					_ = fr.WritePing(true, f.Data)
				}
			case *http2.GoAwayFrame:
				t.Fatalf("stream %d: the gateway sent GOAWAY %v: the bad body closed the connection", id, f.ErrCode)
			case *http2.RSTStreamFrame:
				if f.StreamID == id {
					t.Fatalf("stream %d reset: %v", id, f.ErrCode)
				}
			case *http2.MetaHeadersFrame:
				if f.StreamID == id && status == "" {
					status = f.PseudoValue("status")
				}
				if f.StreamID == id && f.StreamEnded() {
					return status, got.String()
				}
			case *http2.DataFrame:
				if f.StreamID == id {
					got.Write(f.Data())
					if n := len(f.Data()); n > 0 {
						_ = fr.WriteWindowUpdate(0, uint32(n))
					}
					if f.StreamEnded() {
						return status, got.String()
					}
				}
			}
		}
	}
	// The prefix promises ten bytes; four follow. (JSON: the transcoder
	// decodes the message and finds the body short.)
	_, b := call(1, "/portico.demo.v1.OrdersService/ImportOrders", "application/connect+json", append([]byte{0, 0, 0, 0, 10}, `{"a"`...))
	if !strings.Contains(b, `"code":"invalid_argument"`) && !strings.Contains(b, `"code":"internal"`) {
		t.Errorf("incomplete message: %q, want invalid_argument or internal", b)
	}
	// The same connection serves the next call.
	if st, b := call(3, "/portico.demo.v1.OrdersService/GetOrder", "application/json", []byte(`{"order_id":"o-1"}`)); st != "200" {
		t.Errorf("the next call on the connection: %s %q, want 200", st, b)
	}
}

// TestRPCRESTStreamErrorMidway: a REST server stream whose call fails
// after events were sent ends with a last line (NDJSON) or an "error"
// event (SSE) holding the google.rpc.Status, details included: the status
// line is gone by then.
func TestRPCRESTStreamErrorMidway(t *testing.T) {
	t.Parallel()
	g := startEdgeGateway(t)
	hc := gatewaytest.H2CClient(t)
	resp, body := gatewaytest.Do(t, hc, "GET", g.URL()+"/v1/customers/c-1/orders:watch", "", nil)
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if resp.StatusCode != 200 || len(lines) != 3 {
		t.Fatalf("NDJSON: %d %q", resp.StatusCode, body)
	}
	var last struct {
		Error struct {
			Code    int
			Message string
			Details []map[string]any
		}
	}
	if err := json.Unmarshal([]byte(lines[2]), &last); err != nil || last.Error.Code != 14 || last.Error.Message != "feed lost" ||
		len(last.Error.Details) != 1 || last.Error.Details[0]["@type"] != "type.googleapis.com/google.rpc.RetryInfo" || last.Error.Details[0]["retryDelay"] != "3s" {
		t.Errorf("last line %s (%v), want the status with its RetryInfo", lines[2], err)
	}
	resp, body = gatewaytest.Do(t, hc, "GET", g.URL()+"/v1/customers/c-1/orders:watch", "", map[string]string{"Accept": "text/event-stream"})
	if resp.StatusCode != 200 || strings.Count(string(body), "data: ") != 3 || !strings.Contains(string(body), "event: error\ndata: {\"error\":{\"code\":14") {
		t.Errorf("SSE: %d %q", resp.StatusCode, body)
	}
}

// TestRPCRequestMessageDeadline: the gateway reads and checks the first
// request message before it calls the upstream. A caller that sends part
// of it and stops is answered DEADLINE_EXCEEDED (504 for Connect and REST)
// when the call's deadline passes (the caller's, or the route's timeout),
// in every protocol, instead of being waited for until it gives up.
func TestRPCRequestMessageDeadline(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	cfg := rpcSnapshot(t, d.OrdersAddr())
	cfg.Services[0].Timeout = durationpb.New(time.Second)
	g := gatewaytest.Start(t, cfg, nil)
	const method = "/portico.demo.v1.OrdersService/CreateOrder"
	// A gRPC message prefix announcing 100 bytes, and 10 of them.
	partial := append([]byte{0, 0, 0, 0, 100}, bytes.Repeat([]byte{0x0a}, 10)...)

	t.Run("grpc", func(t *testing.T) {
		t.Parallel()
		for _, timeout := range []string{"300m", ""} { // the caller's, then the route's
			fields := []hpack.HeaderField{
				{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
				{Name: ":authority", Value: "x"}, {Name: ":path", Value: method},
				{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
			}
			if timeout != "" {
				fields = append(fields, hpack.HeaderField{Name: "grpc-timeout", Value: timeout})
			}
			if got := rawH2GRPCStatus(t, g.Addr, fields, partial); got != "4" {
				t.Errorf("grpc-timeout %q: grpc-status %s, want 4 (DEADLINE_EXCEEDED)", timeout, got)
			}
		}
	})
	http1 := func(t *testing.T, head string, body []byte) (*http.Response, string) {
		t.Helper()
		c, err := net.Dial("tcp", g.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(append([]byte(head), body...)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	t.Run("grpc-web", func(t *testing.T) {
		t.Parallel()
		resp, body := http1(t, "POST "+method+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/grpc-web+proto\r\n"+
			"Grpc-Timeout: 300m\r\nContent-Length: 105\r\n\r\n", partial)
		if got := resp.Header.Get("Grpc-Status"); got != "4" && !strings.Contains(body, "grpc-status:4") {
			t.Errorf("gRPC-Web: %d %v %q, want grpc-status 4", resp.StatusCode, resp.Header, body)
		}
	})
	t.Run("connect", func(t *testing.T) {
		t.Parallel()
		resp, body := http1(t, "POST "+method+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"Connect-Protocol-Version: 1\r\nConnect-Timeout-Ms: 300\r\nContent-Length: 100\r\n\r\n", []byte(`{"order":`))
		if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(body, `"deadline_exceeded"`) {
			t.Errorf("Connect: %d %q, want 504 deadline_exceeded", resp.StatusCode, body)
		}
	})
	t.Run("rest", func(t *testing.T) {
		t.Parallel()
		resp, body := http1(t, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", []byte(`{"customerId":`))
		if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(body, `"deadline_exceeded"`) {
			t.Errorf("REST: %d %q, want 504 deadline_exceeded", resp.StatusCode, body)
		}
	})
}

// feedProto is a service with a server-streaming method whose REST
// binding takes a body.
const feedProto = `syntax = "proto3";
package portico.test.v1;
import "google/api/annotations.proto";
service Feed {
  rpc Follow(FollowRequest) returns (stream FollowEvent) {
    option (google.api.http) = {post: "/v1/feed:follow" body: "*"};
  }
}
message FollowRequest { string topic = 1; }
message FollowEvent { string text = 1; }
`

// TestRESTStreamRequestDeadline: a REST server stream's request message is
// built from the body before the upstream is called, within the route's
// timeout: a caller that sends part of the body and stops gets 504
// deadline_exceeded.
func TestRESTStreamRequestDeadline(t *testing.T) {
	t.Parallel()
	never := gatewaytest.Listen(t) // the call must not get this far
	g := gatewaytest.Start(t, &configv1.Snapshot{
		Clusters: []*configv1.Cluster{{Name: "feed", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: never.Addr().String()}}}},
		Services: []*configv1.Service{{
			Id: "feed", Team: "t", Name: "portico.test.v1.Feed", Cluster: "feed", Auth: gatewaytest.Public,
			Timeout: durationpb.New(300 * time.Millisecond),
			Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_Sources{Sources: &configv1.ProtoSources{
				Files: []*configv1.ProtoFile{{Name: "feed.proto", Content: feedProto}},
			}}},
		}},
	}, nil)
	resp, body, _, _ := rawRequest(t, g.Addr, "POST /v1/feed:follow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: 40\r\n\r\n{\"topic\":")
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(body, `"deadline_exceeded"`) {
		t.Errorf("partial body: %d %s, want 504 deadline_exceeded", resp.StatusCode, body)
	}
}

// rawH2GRPCStatus opens an h2c stream with fields, sends data without
// ending the stream, and returns the grpc-status the gateway answers with.
func rawH2GRPCStatus(t *testing.T, addr string, fields []hpack.HeaderField, data []byte) string {
	t.Helper()
	fr := h2cConn(t, addr)
	writeHeaders(t, fr, 1, fields, false)
	if err := fr.WriteData(1, false, data); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading response frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					return hf.Value
				}
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v", f.ErrCode)
		case *http2.RSTStreamFrame:
			t.Fatalf("RST_STREAM %v", f.ErrCode)
		}
	}
}
