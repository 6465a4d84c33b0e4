package transcode_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/transcode"
)

const testKey = "ak_live_4eC39HqLyjWDarjtT1zdp7dcXYZ0aB"

func frame(flag byte, payload string) []byte {
	b := make([]byte, 5, 5+len(payload))
	b[0] = flag
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// frames splits an enveloped body into its frames' flags and payloads.
func frames(t *testing.T, b []byte) (flags []byte, payloads []string) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("a frame prefix cut short: %q", b)
		}
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+n {
			t.Fatalf("a frame of %d bytes with %d left: %q", n, len(b)-5, b)
		}
		flags, payloads = append(flags, b[0]), append(payloads, string(b[5:5+n]))
		b = b[5+n:]
	}
	return flags, payloads
}

// writeIn writes p to w in writes of size bytes.
func writeIn(t *testing.T, w http.ResponseWriter, p []byte, size int) {
	t.Helper()
	for len(p) > 0 {
		n := min(size, len(p))
		if m, err := w.Write(p[:n]); err != nil || m != n {
			t.Fatalf("write %d: %d, %v", n, m, err)
		}
		p = p[n:]
	}
}

func statusBin(t *testing.T, msg string) string {
	t.Helper()
	b, err := proto.Marshal(&spb.Status{Code: 3, Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	return connect.EncodeBinaryHeader(b)
}

func statusMessage(t *testing.T, bin string) string {
	t.Helper()
	b, err := connect.DecodeBinaryHeader(bin)
	if err != nil {
		t.Fatal(err)
	}
	var st spb.Status
	if err := proto.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st.GetMessage()
}

func answer(rec http.ResponseWriter, proto problem.Protocol) *transcode.RPCAnswer {
	var a transcode.RPCAnswer
	a.Reset(rec, httptest.NewRequest("POST", "/s/M", nil), proto)
	return &a
}

// TestRPCAnswerWebTrailers: however a gRPC-Web answer is cut into
// writes, message frames pass as they are and the trailer frame's keys
// come out lower case.
func TestRPCAnswerWebTrailers(t *testing.T) {
	t.Parallel()
	in := append(append(frame(0, "Hello: Message"), frame(0, "")...), frame(0x80, "Grpc-Status: 0\r\nX-Custom-Trailer: A-Value\r\n")...)
	want := append(append(frame(0, "Hello: Message"), frame(0, "")...), frame(0x80, "grpc-status: 0\r\nx-custom-trailer: A-Value\r\n")...)
	for _, size := range []int{1, 2, 3, 5, 7, len(in)} {
		rec := httptest.NewRecorder()
		w := answer(rec, problem.GRPCWeb)
		writeIn(t, w, in, size)
		w.Finish()
		if got := rec.Body.Bytes(); !bytes.Equal(got, want) {
			t.Errorf("writes of %d: %q, want %q", size, got, want)
		}
	}
}

// TestRPCAnswerConnectUnary: a Connect unary error answer is held back and
// written with its message redacted, its details kept, its length right
// and its headers as they were when it was written (the upstream side of
// the transcoder shares the header map and sets its own status later).
func TestRPCAnswerConnectUnary(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	w := answer(rec, problem.ConnectUnary)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(400)
	w.Header().Set("Content-Type", "application/grpc+proto")
	w.Header().Set("Grpc-Message", "bad_request: the call has no request message")
	writeIn(t, w, []byte(`{"code":"invalid_argument","message":"proto: (line 1:2): unknown field \"`+testKey+`\"","details":[{"type":"google.rpc.BadRequest","value":"AAAA"}]}`), 7)
	w.Flush() // held: nothing goes out yet
	if rec.Code != 200 || rec.Body.Len() != 0 || rec.Flushed {
		t.Fatalf("before Finish: %d %q flushed %v, want nothing written", rec.Code, rec.Body, rec.Flushed)
	}
	w.Finish()
	var e struct {
		Code, Message string
		Details       []map[string]string
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("%q: %v", rec.Body, err)
	}
	if rec.Code != 400 || e.Code != "invalid_argument" || e.Message != `proto: (line 1:2): unknown field "[redacted]"` ||
		len(e.Details) != 1 || e.Details[0]["value"] != "AAAA" {
		t.Errorf("answer %d %q, want 400 with the message redacted and the detail kept", rec.Code, rec.Body)
	}
	if ct, n := rec.Header().Get("Content-Type"), rec.Header().Get("Content-Length"); ct != "application/json" || n != strconv.Itoa(rec.Body.Len()) || rec.Header().Get("Grpc-Message") != "" {
		t.Errorf("headers %v, want the error's own (application/json, its length)", rec.Header())
	}
}

// TestRPCAnswerConnectStream: the end-of-stream message's error is
// redacted, its metadata kept; message frames pass as they came.
func TestRPCAnswerConnectStream(t *testing.T) {
	t.Parallel()
	end := `{"error":{"code":"invalid_argument","message":"unknown field \"` + testKey + `\""},"metadata":{"X-Trailer":["v"]}}`
	in := append(frame(0, `{"orderId":"o-1"}`), frame(0x02, end)...)
	for _, size := range []int{1, 3, len(in)} {
		rec := httptest.NewRecorder()
		w := answer(rec, problem.ConnectStream)
		w.Header().Set("Content-Type", "application/connect+json")
		writeIn(t, w, in, size)
		w.Finish()
		flags, payloads := frames(t, rec.Body.Bytes())
		if len(flags) != 2 || flags[0] != 0 || payloads[0] != `{"orderId":"o-1"}` || flags[1] != 0x02 {
			t.Fatalf("writes of %d: %q, want the message frame, then the end", size, rec.Body)
		}
		if strings.Contains(payloads[1], testKey[8:]) || !strings.Contains(payloads[1], `unknown field \"[redacted]\"`) ||
			!strings.Contains(payloads[1], `"metadata":{"X-Trailer":["v"]}`) {
			t.Errorf("writes of %d: end of stream %s, want the message redacted and the metadata kept", size, payloads[1])
		}
	}
}

// TestRPCAnswerGRPCStatus: a gRPC-Web status message is redacted wherever
// the protocol puts it, the headers of a trailers-only answer or the
// trailer frame, and grpc-status-details-bin's copy of the message too.
func TestRPCAnswerGRPCStatus(t *testing.T) {
	t.Parallel()
	msg := "unknown%20field%20%22" + testKey + "%22"
	check := func(name, gotMsg, gotBin string) {
		t.Helper()
		if gotMsg != "unknown%20field%20%22[redacted]%22" {
			t.Errorf("%s: grpc-message %q, want the key redacted", name, gotMsg)
		}
		if m := statusMessage(t, gotBin); m != `unknown field "[redacted]"` {
			t.Errorf("%s: grpc-status-details-bin message %q, want the key redacted", name, m)
		}
	}
	rec := httptest.NewRecorder()
	w := answer(rec, problem.GRPCWeb)
	h := w.Header()
	h.Set("Grpc-Status", "3")
	h.Set("Grpc-Message", msg)
	h.Set("Grpc-Status-Details-Bin", statusBin(t, `unknown field "`+testKey+`"`))
	w.WriteHeader(200)
	w.Finish()
	check("trailers-only", rec.Header().Get("Grpc-Message"), rec.Header().Get("Grpc-Status-Details-Bin"))

	rec = httptest.NewRecorder()
	w = answer(rec, problem.GRPCWeb)
	trailer := "Grpc-Status: 3\r\nGrpc-Message: " + msg + "\r\nGrpc-Status-Details-Bin: " + statusBin(t, `unknown field "`+testKey+`"`) + "\r\n"
	writeIn(t, w, append(frame(0, "\n\x03o-1"), frame(0x80, trailer)...), 4)
	w.Finish()
	flags, payloads := frames(t, rec.Body.Bytes())
	if len(flags) != 2 || flags[1] != 0x80 || !strings.HasPrefix(payloads[1], "grpc-status: 3\r\n") || !strings.HasSuffix(payloads[1], "\r\n") {
		t.Fatalf("gRPC-Web answer %q, want a message and a trailer frame", rec.Body)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(strings.TrimSuffix(payloads[1], "\r\n"), "\r\n") {
		k, v, _ := strings.Cut(l, ": ")
		fields[k] = v
	}
	check("gRPC-Web trailer frame", fields["grpc-message"], fields["grpc-status-details-bin"])
}

// TestRPCAnswerPlainText: a plain-text refusal (what the transcoder
// writes before a call is one, as for a timeout header it cannot parse)
// becomes the caller's protocol's error, its message redacted.
func TestRPCAnswerPlainText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		proto problem.Protocol
		check func(rec *httptest.ResponseRecorder) bool
	}{
		{problem.ConnectUnary, func(rec *httptest.ResponseRecorder) bool {
			return rec.Code == 400 && rec.Header().Get("Content-Type") == "application/json" &&
				strings.Contains(rec.Body.String(), `"code":"invalid_argument"`)
		}},
		{problem.ConnectStream, func(rec *httptest.ResponseRecorder) bool {
			return rec.Code == 200 && strings.Contains(rec.Body.String(), `{"error":{"code":"invalid_argument"`)
		}},
		{problem.GRPCWeb, func(rec *httptest.ResponseRecorder) bool {
			return rec.Code == 200 && rec.Header().Get("Grpc-Status") == "3"
		}},
	} {
		rec := httptest.NewRecorder()
		w := answer(rec, tc.proto)
		http.Error(w, `protocol error: invalid timeout "`+testKey+`"`, http.StatusBadRequest)
		w.Finish()
		all := rec.Body.String() + rec.Header().Get("Grpc-Message")
		if !tc.check(rec) || strings.Contains(all, testKey[8:]) || !strings.Contains(all, problem.Redacted) ||
			strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
			t.Errorf("protocol %d: %d %v %q, want the protocol's invalid_argument, the key redacted", tc.proto, rec.Code, rec.Header(), rec.Body)
		}
	}
}

// discard is a ResponseWriter that keeps nothing, for allocation counts.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}

// TestRPCAnswerSuccessAllocates nothing: a successful answer in any
// protocol passes through as it is. (Not parallel: AllocsPerRun.)
func TestRPCAnswerSuccessAllocates(t *testing.T) {
	msg := frame(0, "\n\x03o-1")
	for _, tc := range []struct {
		proto problem.Protocol
		body  []byte
	}{
		{problem.ConnectUnary, []byte("\n\x03o-1")},
		{problem.ConnectStream, append(append([]byte(nil), msg...), frame(0x02, "{}")...)},
		{problem.GRPCWeb, append(append([]byte(nil), msg...), frame(0x80, "grpc-status: 0\r\ngrpc-message: \r\n")...)},
	} {
		d := &discard{h: http.Header{}}
		r := httptest.NewRequest("POST", "/s/M", nil)
		var a transcode.RPCAnswer
		n := testing.AllocsPerRun(100, func() {
			a.Reset(d, r, tc.proto)
			a.WriteHeader(200)
			_, _ = a.Write(tc.body)
			a.Flush()
			a.Finish()
		})
		if n != 0 {
			t.Errorf("protocol %d: a successful answer allocates %v times, want 0", tc.proto, n)
		}
	}
}
