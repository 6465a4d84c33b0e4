package gateway_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// interopLog is grpc-go's logger in this test binary. The interop helpers
// report a failed check with grpclog's Fatal, after which grpclog exits the
// process: one failed case would end the whole binary and hide every other
// test's result. This logger fails the interop case that is running
// instead, with t.Fatal, which ends the case's goroutine before grpclog can
// exit. Every other message goes where grpc-go's default logger sends it
// (errors to stderr). Outside an interop case, Fatal exits as it always did.
var interopLog = &caseLogger{LoggerV2: grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr)}

// SetLoggerV2 must come before any gRPC use, and the test binary has
// nothing earlier than its package's init.
func init() { grpclog.SetLoggerV2(interopLog) }

// caseLogger is a grpclog.LoggerV2 whose Fatal fails the running case.
type caseLogger struct {
	grpclog.LoggerV2
	// running is the subtest of the running interop case, or nil. The
	// helpers call Fatal on the case's own goroutine, as t.Fatal needs.
	running atomic.Pointer[testing.T]
}

func (l *caseLogger) Fatal(args ...any)                 { l.fatal(fmt.Sprint(args...)) }
func (l *caseLogger) Fatalln(args ...any)               { l.fatal(strings.TrimSuffix(fmt.Sprintln(args...), "\n")) }
func (l *caseLogger) Fatalf(format string, args ...any) { l.fatal(fmt.Sprintf(format, args...)) }

func (l *caseLogger) fatal(msg string) {
	if t := l.running.Load(); t != nil {
		t.Fatal(msg)
	}
	l.Error(msg)
}

// TestGRPCInterop runs grpc-go's interop client cases (the ones that need
// no cloud credentials, load balancer or ORCA) through the gateway to
// grpc-go's interop server, the service exposed from its descriptor: the
// gateway must be invisible to gRPC, streams, metadata, deadlines,
// cancellation and status included. Each case is a subtest, which a failed
// check fails (see interopLog).
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
	// The case being run, for the soak's channel factory.
	var running *testing.T
	cases := map[string]func(ctx context.Context, o ...grpc.CallOption){
		"empty_unary":                 func(ctx context.Context, o ...grpc.CallOption) { interop.DoEmptyUnaryCall(ctx, tc, o...) },
		"large_unary":                 func(ctx context.Context, o ...grpc.CallOption) { interop.DoLargeUnaryCall(ctx, tc, o...) },
		"client_streaming":            func(ctx context.Context, o ...grpc.CallOption) { interop.DoClientStreaming(ctx, tc, o...) },
		"server_streaming":            func(ctx context.Context, o ...grpc.CallOption) { interop.DoServerStreaming(ctx, tc, o...) },
		"ping_pong":                   func(ctx context.Context, o ...grpc.CallOption) { interop.DoPingPong(ctx, tc, o...) },
		"empty_stream":                func(ctx context.Context, o ...grpc.CallOption) { interop.DoEmptyStream(ctx, tc, o...) },
		"timeout_on_sleeping_server":  func(ctx context.Context, o ...grpc.CallOption) { interop.DoTimeoutOnSleepingServer(ctx, tc, o...) },
		"cancel_after_begin":          func(ctx context.Context, o ...grpc.CallOption) { cancelAfterBegin(ctx, running, tc, o...) },
		"cancel_after_first_response": func(ctx context.Context, o ...grpc.CallOption) { interop.DoCancelAfterFirstResponse(ctx, tc, o...) },
		"custom_metadata":             func(ctx context.Context, o ...grpc.CallOption) { interop.DoCustomMetadata(ctx, tc, o...) },
		"status_code_and_message":     func(ctx context.Context, o ...grpc.CallOption) { interop.DoStatusCodeAndMessage(ctx, tc, o...) },
		"special_status_message":      func(ctx context.Context, o ...grpc.CallOption) { interop.DoSpecialStatusMessage(ctx, tc, o...) },
		"unimplemented_method":        func(ctx context.Context, _ ...grpc.CallOption) { interop.DoUnimplementedMethod(ctx, conn) },
		"unimplemented_service": func(ctx context.Context, _ ...grpc.CallOption) {
			interop.DoUnimplementedService(ctx, testgrpc.NewUnimplementedServiceClient(conn))
		},
		// The soak cases, short: large unary calls (271,828 bytes up,
		// 314,159 down) from two workers, on the shared channel and on a
		// fresh channel per call.
		"rpc_soak": func(ctx context.Context, _ ...grpc.CallOption) {
			interop.DoSoakTest(ctx, soakConfig(g.Addr, func() (*grpc.ClientConn, func()) { return conn, func() {} }))
		},
		"channel_soak": func(ctx context.Context, _ ...grpc.CallOption) {
			interop.DoSoakTest(ctx, soakConfig(g.Addr, func() (*grpc.ClientConn, func()) {
				cc, err := grpc.NewClient(g.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					running.Error(err) // on a soak worker's goroutine: no Fatal
					return conn, func() {}
				}
				return cc, func() { _ = cc.Close() }
			}))
		},
	}
	// Every case plain, then the message cases again with gzip-compressed
	// requests (the interop client's compressed variants). The cases run
	// one after the other: interopLog knows one running case.
	names := slices.Sorted(maps.Keys(cases))
	for _, compressed := range []bool{false, true} {
		for _, name := range names {
			var opts []grpc.CallOption
			if compressed {
				if strings.HasPrefix(name, "unimplemented") || strings.HasSuffix(name, "soak") {
					continue
				}
				opts = append(opts, grpc.UseCompressor(gzip.Name))
				name += "/gzip"
			}
			run := cases[strings.TrimSuffix(name, "/gzip")]
			t.Run(name, func(t *testing.T) {
				running = t
				interopLog.running.Store(t)
				defer interopLog.running.Store(nil)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				run(ctx, opts...)
			})
		}
	}
}

// soakConfig is a short soak: 20 large unary calls from two workers, none
// allowed to fail or to take longer than 5 s (the race detector's pace).
func soakConfig(addr string, channel func() (*grpc.ClientConn, func())) interop.SoakTestConfig {
	return interop.SoakTestConfig{
		RequestSize: 271828, ResponseSize: 314159,
		PerIterationMaxAcceptableLatency: 5 * time.Second,
		OverallTimeout:                   25 * time.Second,
		ServerAddr:                       addr,
		NumWorkers:                       2, Iterations: 20, MaxFailures: 0,
		ChannelForTest: channel,
	}
}

// cancelAfterBegin is the interop case cancel_after_begin without the race
// in grpc-go's version of it: interop.DoCancelAfterBegin cancels, then
// calls CloseAndRecv, and grpc-go acts on a cancellation on another
// goroutine, so on a loaded machine the half-close can go first and the
// interop server answer OK (it does so 2 times in 1,500 with no gateway at
// all). Without the half-close the server cannot end the call, and the
// only outcome is the cancellation: the client stream, opened through the
// gateway and cancelled, must end CANCELLED.
func cancelAfterBegin(ctx context.Context, t *testing.T, tc testgrpc.TestServiceClient, o ...grpc.CallOption) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := tc.StreamingInputCall(ctx, o...)
	if err != nil {
		t.Fatalf("StreamingInputCall: %v", err)
	}
	cancel()
	var resp testgrpc.StreamingInputCallResponse
	if err := stream.RecvMsg(&resp); status.Code(err) != codes.Canceled {
		t.Errorf("RecvMsg after cancel: %v, want code Canceled", err)
	}
}
