package problem_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/gateway/problem"
)

// nullWriter is a ResponseWriter that keeps nothing, so the benchmark
// measures the writers.
type nullWriter struct{ h http.Header }

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nullWriter) WriteHeader(int)             {}

// BenchmarkRefusal weighs the gateway's own writer of RPC refusals against
// connect-go's ErrorWriter doing the same job: a rate-limit refusal with
// a RetryInfo detail, to a gRPC and to a Connect unary caller.
// (docs/architecture.md says which the gateway uses, and why.)
func BenchmarkRefusal(b *testing.B) {
	p := problem.Problem{Code: problem.RateLimited, Detail: `rate limit "default" exceeded`, RequestID: "0123456789abcdef", RetryAfter: 1500 * time.Millisecond}
	ew := connect.NewErrorWriter()
	for _, tc := range []struct {
		name   string
		header map[string]string
		proto  problem.Protocol
	}{
		{"grpc", map[string]string{"Content-Type": "application/grpc"}, problem.GRPC},
		{"connect", map[string]string{"Content-Type": "application/json", "Connect-Protocol-Version": "1"}, problem.ConnectUnary},
	} {
		r := httptest.NewRequest("POST", "/portico.demo.v1.OrdersService/GetOrder", nil)
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		b.Run(tc.name+"/problem", func(b *testing.B) {
			b.ReportAllocs()
			w := &nullWriter{h: http.Header{}}
			for b.Loop() {
				clear(w.h)
				problem.WriteAs(w, r, tc.proto, p)
			}
		})
		b.Run(tc.name+"/connect-go", func(b *testing.B) {
			b.ReportAllocs()
			w := &nullWriter{h: http.Header{}}
			for b.Loop() {
				clear(w.h)
				err := connect.NewError(connect.CodeResourceExhausted, errors.New(string(p.Code)+": "+p.Detail+" (request "+p.RequestID+")"))
				if d, derr := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(p.RetryAfter)}); derr == nil {
					err.AddDetail(d)
				}
				w.h.Set("Retry-After", "2")
				_ = ew.Write(w, r, err)
			}
		})
	}
}
