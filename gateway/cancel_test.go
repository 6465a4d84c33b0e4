package gateway_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// TestRequestBodyCanceled: a caller that resets its stream while the
// gateway is still reading the request message has cancelled the call,
// on every protocol: the record says canceled, not a malformed body (the
// caller is gone, so the record is all there is to see).
func TestRequestBodyCanceled(t *testing.T) {
	t.Parallel()
	d := gatewaytest.Demo(t)
	g := gatewaytest.Start(t, rpcSnapshot(t, d.OrdersAddr()), nil)
	var (
		mu      sync.Mutex
		records = map[string]exchange.Record{}
	)
	gateway.OnFinish(g.Node, func(x exchange.Record) {
		mu.Lock()
		defer mu.Unlock()
		records[x.RequestID] = x
	})
	const method = "/portico.demo.v1.OrdersService/CreateOrder"
	grpcPartial := append([]byte{0, 0, 0, 0, 100}, bytes.Repeat([]byte{0x0a}, 10)...)
	for _, tc := range []struct {
		name, path, contentType string
		extra                   []hpack.HeaderField
		partial                 []byte
	}{
		{"grpc", method, "application/grpc", []hpack.HeaderField{{Name: "te", Value: "trailers"}}, grpcPartial},
		{"grpc-web", method, "application/grpc-web+proto", nil, grpcPartial},
		{"connect", method, "application/json", []hpack.HeaderField{{Name: "connect-protocol-version", Value: "1"}}, []byte(`{"order":`)},
		{"rest", "/v1/orders", "application/json", nil, []byte(`{"customerId":`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := "cancel-" + tc.name
			fr := h2cConn(t, g.Addr)
			writeHeaders(t, fr, 1, append([]hpack.HeaderField{
				{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":authority", Value: "x"},
				{Name: ":path", Value: tc.path}, {Name: "content-type", Value: tc.contentType}, {Name: "x-request-id", Value: id},
			}, tc.extra...), false)
			if err := fr.WriteData(1, false, tc.partial); err != nil {
				t.Fatal(err)
			}
			if err := fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
				t.Fatal(err)
			}
			var x exchange.Record
			gatewaytest.WaitFor(t, 10*time.Second, "the record of "+id, func() bool {
				mu.Lock()
				defer mu.Unlock()
				var ok bool
				x, ok = records[id]
				return ok
			})
			if x.By != exchange.Gateway || x.Code != problem.Canceled {
				t.Errorf("a call reset while its message was read: by %v, code %q, want the gateway's %q", x.By, x.Code, problem.Canceled)
			}
		})
	}
}
