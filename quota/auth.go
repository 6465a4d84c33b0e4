package quota

import (
	"context"
	"errors"

	"buf.build/go/protovalidate"
	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/internal/svcauth"
)

// authz authenticates every call and validates its request message
// before the handler runs.
type authz struct{ s *Service }

func (a *authz) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		token, ok := svcauth.Token(req.Header())
		if !ok {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("a quota service token is required (Authorization: Bearer …)"))
		}
		// By the hash, as keysvc does: the hash of a guess tells nothing
		// of a token.
		if !a.s.tokens[svcauth.Hash(token)] {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown token"))
		}
		if m, ok := req.Any().(proto.Message); ok {
			if err := protovalidate.Validate(m); err != nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, err)
			}
		}
		return next(ctx, req)
	}
}

func (a *authz) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a *authz) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return connect.NewError(connect.CodeUnimplemented, errors.New("no streaming calls"))
	}
}
