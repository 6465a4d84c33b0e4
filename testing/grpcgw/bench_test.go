package grpcgw_test

import (
	"io"
	"strings"
	"testing"

	"github.com/portico-gw/portico/testing/gatewaytest"
)

// BenchmarkRESTUnary is one REST→gRPC unary call, GET and POST, through
// the gateway (descriptors at run time) and through grpc-gateway's
// generated proxy, to the same backend, in the same run. The goal
// is the gateway at least as fast.
func BenchmarkRESTUnary(b *testing.B) {
	gateway, grpcGateway := servers(b)
	hc1 := gatewaytest.HTTP1Client(b)
	for _, bc := range []struct{ name, base string }{{"grpc-gateway", grpcGateway}, {"gateway", gateway}} {
		b.Run("get/"+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := hc1.Get(bc.base + "/v1/orders/o-1001")
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
		b.Run("search/"+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := hc1.Post(bc.base+"/v1/customers/c-42/orders:search?page_size=5", "application/json",
						strings.NewReader(`{"sku":"WIDGET-1","createdAfter":"2020-01-01T00:00:00Z"}`))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
