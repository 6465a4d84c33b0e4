package problem_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/problem"
)

func TestWriteJSON(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("GET", "/v1/x", nil)
	w := httptest.NewRecorder()
	problem.Write(w, r, problem.Problem{Code: problem.NoRoute, Detail: "no route matches \"GET\" <x>\n\u2028\xff", Instance: "/v1/x", RequestID: "rid-1"})
	if w.Code != 404 || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d, content type %q", w.Code, w.Header().Get("Content-Type"))
	}
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("body %q is not JSON: %v", w.Body.String(), err)
	}
	want := map[string]any{
		"type": "https://portico-gw.github.io/errors/no_route", "title": "No route", "status": float64(404),
		"detail": "no route matches \"GET\" <x>\n\u2028\uFFFD", "instance": "/v1/x", "error": "no_route", "request_id": "rid-1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
}

func TestWriteHEADHasNoBody(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	problem.Write(w, httptest.NewRequest("HEAD", "/", nil), problem.Problem{Code: problem.BadRequest})
	if w.Code != 400 || w.Body.Len() != 0 {
		t.Errorf("HEAD: %d with %d body bytes, want 400 and none", w.Code, w.Body.Len())
	}
}

func TestWriteGRPC(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code problem.Code
		grpc string
		http int
	}{
		{problem.NoRoute, "12", 404},
		{problem.PayloadTooLarge, "8", 413},
		{problem.UpstreamUnavailable, "14", 503},
		{problem.UpstreamTimeout, "4", 504},
		{problem.DeadlineExceeded, "4", 504},
		{problem.Canceled, "1", 499},
		{problem.BadRequest, "3", 400},
	} {
		r := httptest.NewRequest("POST", "/pkg.S/M", nil)
		r.Header.Set("Content-Type", "application/grpc+proto")
		w := httptest.NewRecorder()
		problem.Write(w, r, problem.Problem{Code: tc.code, Detail: "50% done é"})
		if w.Code != 200 || w.Body.Len() != 0 {
			t.Errorf("%s: HTTP %d with %d body bytes, want a trailers-only 200", tc.code, w.Code, w.Body.Len())
		}
		h := w.Header()
		if h.Get("Grpc-Status") != tc.grpc || h.Get("Content-Type") != "application/grpc+proto" {
			t.Errorf("%s: grpc-status %q content-type %q, want %s", tc.code, h.Get("Grpc-Status"), h.Get("Content-Type"), tc.grpc)
		}
		if got, want := h.Get("Grpc-Message"), string(tc.code)+": 50%25 done %C3%A9"; got != want {
			t.Errorf("%s: grpc-message %q, want %q", tc.code, got, want)
		}
		if tc.code.Status() != tc.http {
			t.Errorf("%s.Status() = %d, want %d", tc.code, tc.code.Status(), tc.http)
		}
	}
}

func TestIsGRPC(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]bool{
		"application/grpc": true, "application/grpc+proto": true, "application/GRPC+json": true, "application/grpc;charset=x": true,
		"application/grpc-web": false, "application/grpc-web+proto": false, "application/json": false, "": false, "application/grpcx": false,
	} {
		if got := problem.IsGRPC(ct); got != want {
			t.Errorf("IsGRPC(%q) = %v, want %v", ct, got, want)
		}
	}
}

func TestWriteRetryAfter(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	problem.Write(w, httptest.NewRequest("GET", "/", nil), problem.Problem{Code: problem.RateLimited, RetryAfter: 1200 * time.Millisecond})
	if w.Code != 429 || w.Header().Get("Retry-After") != "2" {
		t.Errorf("HTTP: %d, Retry-After %q; want 429 and 2", w.Code, w.Header().Get("Retry-After"))
	}

	r := httptest.NewRequest("POST", "/pkg.S/M", nil)
	r.Header.Set("Content-Type", "application/grpc")
	w = httptest.NewRecorder()
	problem.Write(w, r, problem.Problem{Code: problem.RateLimited, Detail: "slow down", RetryAfter: 250 * time.Millisecond})
	h := w.Header()
	if h.Get("Grpc-Status") != "8" {
		t.Fatalf("grpc-status %q, want 8", h.Get("Grpc-Status"))
	}
	// The details decode as grpc-go's client would: a google.rpc.Status
	// holding a RetryInfo.
	raw, err := base64.RawStdEncoding.DecodeString(h.Get("Grpc-Status-Details-Bin"))
	if err != nil {
		t.Fatal(err)
	}
	var st spb.Status
	if err := proto.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	s := status.FromProto(&st)
	if s.Code() != codes.ResourceExhausted || s.Message() != "rate_limited: slow down" || len(s.Details()) != 1 {
		t.Fatalf("status = %v %q, %d details", s.Code(), s.Message(), len(s.Details()))
	}
	ri, ok := s.Details()[0].(*errdetails.RetryInfo)
	if !ok || ri.GetRetryDelay().AsDuration() != 250*time.Millisecond {
		t.Errorf("detail = %#v, want RetryInfo of 250ms", s.Details()[0])
	}
}

func TestProtocolOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method, target, ct, cpv string
		want                    problem.Protocol
	}{
		{"POST", "/pkg.S/M", "application/grpc", "", problem.GRPC},
		{"POST", "/pkg.S/M", "application/grpc-web+proto", "", problem.GRPCWeb},
		{"POST", "/pkg.S/M", "application/grpc-web-text", "", problem.GRPCWeb},
		{"POST", "/pkg.S/M", "application/connect+json", "", problem.ConnectStream},
		{"POST", "/pkg.S/M", "application/json", "1", problem.ConnectUnary},
		{"POST", "/pkg.S/M", "application/proto", "1", problem.ConnectUnary},
		{"GET", "/pkg.S/M?connect=v1&encoding=json&message=%7B%7D", "", "", problem.ConnectUnary},
		{"GET", "/pkg.S/M?xconnect=v1", "", "", problem.HTTP},
		{"POST", "/v1/orders", "application/json", "", problem.HTTP},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		if tc.ct != "" {
			r.Header.Set("Content-Type", tc.ct)
		}
		if tc.cpv != "" {
			r.Header.Set("Connect-Protocol-Version", tc.cpv)
		}
		if got := problem.ProtocolOf(r); got != tc.want {
			t.Errorf("%s %s %q: ProtocolOf = %d, want %d", tc.method, tc.target, tc.ct, got, tc.want)
		}
	}
}

func TestWriteConnect(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("POST", "/pkg.S/M", nil)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Connect-Protocol-Version", "1")
	w := httptest.NewRecorder()
	problem.Write(w, r, problem.Problem{Code: problem.Unauthenticated, Detail: "no credential"})
	if w.Code != 401 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("unary: %d %q, want 401 application/json", w.Code, w.Header().Get("Content-Type"))
	}
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["code"] != "unauthenticated" || got["message"] != "unauthenticated: no credential" || got["details"] != nil {
		t.Errorf("unary body %s", w.Body)
	}

	r = httptest.NewRequest("POST", "/pkg.S/M", nil)
	r.Header.Set("Content-Type", "application/connect+proto")
	w = httptest.NewRecorder()
	problem.Write(w, r, problem.Problem{Code: problem.RateLimited, RetryAfter: 1500 * time.Millisecond})
	b := w.Body.Bytes()
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/connect+proto" || w.Header().Get("Retry-After") != "2" || len(b) < 5 || b[0] != 2 {
		t.Fatalf("stream: %d %v %q", w.Code, w.Header(), b)
	}
	if n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4]); n != len(b)-5 {
		t.Fatalf("stream: envelope length %d, body %d", n, len(b)-5)
	}
	var end struct {
		Error struct {
			Code    string
			Details []struct{ Type, Value string }
		}
	}
	if err := json.Unmarshal(b[5:], &end); err != nil {
		t.Fatal(err)
	}
	if end.Error.Code != "resource_exhausted" || len(end.Error.Details) != 1 || end.Error.Details[0].Type != "google.rpc.RetryInfo" {
		t.Fatalf("stream end %s", b[5:])
	}
	raw, err := base64.RawStdEncoding.DecodeString(end.Error.Details[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	var ri errdetails.RetryInfo
	if err := proto.Unmarshal(raw, &ri); err != nil || ri.GetRetryDelay().AsDuration() != 1500*time.Millisecond {
		t.Errorf("RetryInfo %v, %v; want 1.5s", &ri, err)
	}
}

// TestReadFailed: a body read cut short by a deadline or by the caller
// going away is DeadlineExceeded or Canceled (the deadline first: on HTTP/1
// it also ends the connection's context); any other read error is the
// body's own, for the caller to word.
func TestReadFailed(t *testing.T) {
	t.Parallel()
	live := context.Background()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want problem.Code // "" for nil
	}{
		{"read deadline", live, timeout, problem.DeadlineExceeded},
		{"read deadline, connection context ended", gone, fmt.Errorf("reading: %w", timeout), problem.DeadlineExceeded},
		{"context deadline", live, context.DeadlineExceeded, problem.DeadlineExceeded},
		{"caller gone", gone, errors.New("stream reset"), problem.Canceled},
		{"caller gone mid-message", gone, io.ErrUnexpectedEOF, problem.Canceled},
		{"malformed body", live, errors.New("invalid chunked encoding"), ""},
	} {
		p := problem.ReadFailed(tc.ctx, tc.err)
		var got problem.Code
		if p != nil {
			got = p.Code
		}
		if got != tc.want {
			t.Errorf("%s: ReadFailed = %q, want %q", tc.name, got, tc.want)
		}
	}
}
