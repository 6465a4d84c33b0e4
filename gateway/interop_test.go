package gateway_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// TestGRPCInterop runs grpc-go's interop client cases (the ones that need
// no cloud credentials, load balancer or ORCA) through the gateway to
// grpc-go's interop server, the service exposed from its descriptor: the
// gateway must be invisible to gRPC, streams, metadata, deadlines,
// cancellation and status included. A failing case ends the test binary
// (the interop helpers call log.Fatal), which fails the run.
func TestGRPCInterop(t *testing.T) {
	t.Parallel()
	ln := gatewaytest.Listen(t)
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, interop.NewTestServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	set, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(testgrpc.File_grpc_testing_test_proto),
	}})
	if err != nil {
		t.Fatal(err)
	}
	g := gatewaytest.Start(t, &configv1.Snapshot{
		Clusters: []*configv1.Cluster{{Name: "interop", Protocol: configv1.Protocol_PROTOCOL_GRPC, Endpoints: []*configv1.Endpoint{{Address: ln.Addr().String()}}}},
		Services: []*configv1.Service{{
			Id: "interop", Team: "t", Name: "grpc.testing.TestService", Cluster: "interop", Auth: gatewaytest.Public,
			Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: set}},
		}},
	}, nil)
	conn, err := grpc.NewClient(g.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	tc := testgrpc.NewTestServiceClient(conn)
	for name, run := range map[string]func(ctx context.Context){
		"empty_unary":                 func(ctx context.Context) { interop.DoEmptyUnaryCall(ctx, tc) },
		"large_unary":                 func(ctx context.Context) { interop.DoLargeUnaryCall(ctx, tc) },
		"client_streaming":            func(ctx context.Context) { interop.DoClientStreaming(ctx, tc) },
		"server_streaming":            func(ctx context.Context) { interop.DoServerStreaming(ctx, tc) },
		"ping_pong":                   func(ctx context.Context) { interop.DoPingPong(ctx, tc) },
		"empty_stream":                func(ctx context.Context) { interop.DoEmptyStream(ctx, tc) },
		"timeout_on_sleeping_server":  func(ctx context.Context) { interop.DoTimeoutOnSleepingServer(ctx, tc) },
		"cancel_after_begin":          func(ctx context.Context) { interop.DoCancelAfterBegin(ctx, tc) },
		"cancel_after_first_response": func(ctx context.Context) { interop.DoCancelAfterFirstResponse(ctx, tc) },
		"custom_metadata":             func(ctx context.Context) { interop.DoCustomMetadata(ctx, tc) },
		"status_code_and_message":     func(ctx context.Context) { interop.DoStatusCodeAndMessage(ctx, tc) },
		"special_status_message":      func(ctx context.Context) { interop.DoSpecialStatusMessage(ctx, tc) },
		"unimplemented_method":        func(ctx context.Context) { interop.DoUnimplementedMethod(ctx, conn) },
		"unimplemented_service": func(ctx context.Context) {
			interop.DoUnimplementedService(ctx, testgrpc.NewUnimplementedServiceClient(conn))
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		run(ctx)
		cancel()
		t.Logf("%s: passed", name)
	}
}
