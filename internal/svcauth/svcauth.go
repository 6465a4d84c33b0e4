// Package svcauth is how Portico's services authenticate each other's
// calls: a bearer token in the Authorization header, which the called
// service holds only as its SHA-256 and compares in constant time. The
// control plane's node and publisher tokens, the admin tokens, the key
// service's tokens and the signed snapshot's token all work this way.
package svcauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// Hash is the form a service holds a token in: its hex SHA-256.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Matches reports whether token hashes to hash, in time that does not
// depend on where they differ.
func Matches(token, hash string) bool {
	return subtle.ConstantTimeCompare([]byte(Hash(token)), []byte(hash)) == 1
}

// Token returns the bearer token of h's Authorization header, and whether
// there is one.
func Token(h http.Header) (string, bool) {
	t, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	return t, ok && t != ""
}

// Check returns nil when h carries a bearer token whose hash is hash, or
// hash is empty (no token is required), and otherwise an Unauthenticated
// error saying msg.
func Check(h http.Header, hash, msg string) error {
	if hash == "" {
		return nil
	}
	if t, ok := Token(h); !ok || !Matches(t, hash) {
		return connect.NewError(connect.CodeUnauthenticated, errors.New(msg))
	}
	return nil
}

// Interceptor is a Connect client interceptor that sends token as a
// bearer on every call, unary and streaming. An empty token sends none.
func Interceptor(token string) connect.Interceptor { return interceptor(token) }

type interceptor string

func (t interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	if t == "" {
		return next
	}
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(t))
		return next(ctx, req)
	}
}

func (t interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	if t == "" {
		return next
	}
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(t))
		return conn
	}
}

func (t interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Transport is an http.RoundTripper that sends token as a bearer on every
// request through next (nil: http.DefaultTransport). An empty token sends
// none.
func Transport(token string, next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return transport{token: token, next: next}
}

type transport struct {
	token string
	next  http.RoundTripper
}

func (b transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}
