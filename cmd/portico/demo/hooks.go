package demo

import (
	"context"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
)

// The request metadata keys of the test hooks; the package comment says what
// each does.
const (
	hookFail       = "x-demo-fail"
	hookDelay      = "x-demo-delay-ms"
	hookTrailer    = "x-demo-trailer"
	hookEchoMD     = "x-demo-echo-md"
	hookCloseFirst = "x-demo-close-first"

	echoPrefix = "x-demo-echo-"
)

// maxDelay bounds x-demo-delay-ms, so a typo cannot park a call for days.
const maxDelay = 10 * time.Minute

// failMessage is the status message of a call failed by x-demo-fail, so a
// test can tell a requested failure from a real one.
const failMessage = "demo: failure requested by " + hookFail

// ordersMethodPrefix starts the full method name of every OrdersService
// method; the hooks apply only to those.
var ordersMethodPrefix = "/" + demov1.OrdersService_ServiceDesc.ServiceName + "/"

// hooks is what the hook metadata of one call asks for.
type hooks struct {
	header  metadata.MD // x-demo-echo-md
	trailer metadata.MD // x-demo-trailer
	delay   time.Duration
	fail    codes.Code // codes.OK: do not fail
}

// parseHooks reads the hook metadata of a call. Its errors are InvalidArgument
// statuses, ready to return to the client.
func parseHooks(md metadata.MD) (hooks, error) {
	var h hooks
	for _, list := range md.Get(hookEchoMD) {
		for name := range strings.SplitSeq(list, ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			key := echoPrefix + strings.TrimPrefix(name, ":")
			if name == "" || !validMetadataKey(key) {
				continue
			}
			if vals := md.Get(name); len(vals) > 0 {
				if h.header == nil {
					h.header = metadata.MD{}
				}
				h.header.Append(key, vals...)
			}
		}
	}
	if vals := md.Get(hookTrailer); len(vals) > 0 {
		h.trailer = metadata.MD{hookTrailer: vals}
	}
	if vals := md.Get(hookDelay); len(vals) > 0 {
		ms, err := strconv.ParseUint(strings.TrimSpace(vals[0]), 10, 32)
		if err != nil || time.Duration(ms)*time.Millisecond > maxDelay {
			return hooks{}, status.Errorf(codes.InvalidArgument, "%s: %q is not a number of milliseconds in 0..%d", hookDelay, vals[0], maxDelay.Milliseconds())
		}
		h.delay = time.Duration(ms) * time.Millisecond
	}
	if vals := md.Get(hookFail); len(vals) > 0 {
		c, ok := parseCode(vals[0])
		if !ok {
			return hooks{}, status.Errorf(codes.InvalidArgument, "%s: %q is not a gRPC status code other than OK, by number (14) or name (UNAVAILABLE)", hookFail, vals[0])
		}
		h.fail = c
	}
	return h, nil
}

// run applies the hooks before a method runs: it sets the echo header and the
// trailer, waits, and fails if asked to. A call cancelled while waiting ends
// with the status of its context error.
func (h hooks) run(ctx context.Context, setHeader, setTrailer func(metadata.MD) error) error {
	if h.header != nil {
		if err := setHeader(h.header); err != nil {
			return status.Errorf(codes.Internal, "demo: set header: %v", err)
		}
	}
	if h.trailer != nil {
		if err := setTrailer(h.trailer); err != nil {
			return status.Errorf(codes.Internal, "demo: set trailer: %v", err)
		}
	}
	if h.delay > 0 {
		if err := sleep(ctx, h.delay); err != nil {
			return status.FromContextError(err).Err()
		}
	}
	if h.fail != codes.OK {
		return status.Error(h.fail, failMessage)
	}
	return nil
}

// closeFirst reports whether a SyncOrders call asks to be ended after its
// first answer.
func closeFirst(md metadata.MD) (bool, error) {
	vals := md.Get(hookCloseFirst)
	if len(vals) == 0 {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(vals[0]))
	if err != nil {
		return false, status.Errorf(codes.InvalidArgument, "%s: %q is not 1 or 0", hookCloseFirst, vals[0])
	}
	return b, nil
}

// unaryHooks applies the hooks to unary OrdersService calls.
func unaryHooks(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !strings.HasPrefix(info.FullMethod, ordersMethodPrefix) {
		return handler(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	h, err := parseHooks(md)
	if err != nil {
		return nil, err
	}
	setHeader := func(md metadata.MD) error { return grpc.SetHeader(ctx, md) }
	setTrailer := func(md metadata.MD) error { return grpc.SetTrailer(ctx, md) }
	if err := h.run(ctx, setHeader, setTrailer); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// streamHooks applies the hooks to streaming OrdersService calls.
func streamHooks(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !strings.HasPrefix(info.FullMethod, ordersMethodPrefix) {
		return handler(srv, ss)
	}
	ctx := ss.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	h, err := parseHooks(md)
	if err != nil {
		return err
	}
	setTrailer := func(md metadata.MD) error { ss.SetTrailer(md); return nil }
	if err := h.run(ctx, ss.SetHeader, setTrailer); err != nil {
		return err
	}
	return handler(srv, ss)
}

// parseCode reads a status code other than OK by number or by name in any
// case, with or without underscores: "14", "UNAVAILABLE", "Unavailable".
func parseCode(s string) (codes.Code, bool) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		if n == 0 || n > uint64(codes.Unauthenticated) {
			return 0, false
		}
		return codes.Code(n), true
	}
	name := strings.ReplaceAll(s, "_", "")
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		if strings.EqualFold(name, c.String()) {
			return c, true
		}
	}
	return 0, false
}

// validMetadataKey reports whether grpc accepts k as a metadata key: lower
// case letters, digits, '-', '_' and '.'.
func validMetadataKey(k string) bool {
	for _, r := range k {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return k != ""
}

// sleep waits for d or until ctx is done, whichever comes first, and returns
// ctx.Err() in the second case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
