package upstream_test

import (
	"context"
	"errors"
	"net/http"
	"syscall"
	"testing"

	"github.com/portico-gw/portico/gateway/upstream"
)

func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	<-expired.Done()
	live := context.Background()
	resp := func(code int, grpcStatus string) *http.Response {
		r := &http.Response{StatusCode: code, Header: http.Header{}}
		if grpcStatus != "" {
			r.Header.Set("Grpc-Status", grpcStatus)
		}
		return r
	}
	tests := []struct {
		name string
		ctx  context.Context
		resp *http.Response
		err  error
		want upstream.Outcome
	}{
		{"200", live, resp(200, ""), nil, upstream.Success},
		{"404", live, resp(404, ""), nil, upstream.Success},
		{"500 is the application's answer", live, resp(500, ""), nil, upstream.Success},
		{"502", live, resp(502, ""), nil, upstream.Failure},
		{"503", live, resp(503, ""), nil, upstream.Failure},
		{"504", live, resp(504, ""), nil, upstream.Failure},
		{"grpc UNAVAILABLE", live, resp(200, "14"), nil, upstream.Failure},
		{"grpc NOT_FOUND", live, resp(200, "5"), nil, upstream.Success},
		{"connection refused", live, nil, syscall.ECONNREFUSED, upstream.Failure},
		{"route timeout", expired, nil, context.DeadlineExceeded, upstream.Failure},
		{"client went away", canceled, nil, context.Canceled, upstream.Canceled},
		{"reset while the client is gone", canceled, nil, errors.New("connection reset"), upstream.Canceled},
	}
	for _, tt := range tests {
		if got := upstream.OutcomeOf(tt.ctx, tt.resp, tt.err); got != tt.want {
			t.Errorf("%s: OutcomeOf() = %v, want %v", tt.name, got, tt.want)
		}
	}
}
