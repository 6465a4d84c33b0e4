package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
)

// fakeKeys stands in for the key service (KeyService and TokenService)
// in porticoctl's tests, which are about flags, requests and printing;
// the key service itself is tested in its own package. It records every
// request with its Authorization header and answers from keys and
// entries, pageSize keys a page.
type fakeKeys struct {
	keysv1connect.UnimplementedTokenServiceHandler

	mu       sync.Mutex
	calls    []fakeCall
	fail     map[string]error // by procedure
	keys     []*keysv1.Key
	entries  []*configv1.DenyEntry
	version  uint64 // the fast-lane version of a change
	pageSize int
	// stuckToken, if set, is every page's next page token.
	stuckToken string
	// hold, if set, makes CreateKey and RotateKey send on it once called
	// and then answer nothing until the caller gives up.
	hold chan struct{}
	// propagation answers a revocation that asks to wait.
	propagation *keysv1.Propagation
}

type fakeCall struct {
	procedure, auth string
	msg             proto.Message
}

// fakeRawKey is every key the fake creates; fakeSecret is its part beyond
// the prefix, which nothing but the one answer may print.
const (
	fakePrefix = "ak_live_Zq3x"
	fakeSecret = "T9vLk2PqWm8RsY4nHc6JdE1fGb7A"
	fakeRawKey = fakePrefix + fakeSecret
)

// keyService starts a fake key service and returns it and its URL.
func keyService(t *testing.T) (*fakeKeys, string) {
	t.Helper()
	f := &fakeKeys{fail: map[string]error{}, version: 42, pageSize: 2}
	mux := http.NewServeMux()
	mux.Handle(keysv1connect.NewKeyServiceHandler(f))
	mux.Handle(keysv1connect.NewTokenServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func record[T any](f *fakeKeys, procedure string, req *connect.Request[T]) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fakeCall{procedure: procedure, auth: req.Header().Get("Authorization"), msg: any(req.Msg).(proto.Message)})
	return f.fail[procedure]
}

// requests returns the recorded requests, each with its Authorization
// header.
func (f *fakeKeys) requests() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.calls...)
}

func (f *fakeKeys) setFail(procedure string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[procedure] = err
}

// holdOn, with hold set, tells the test the call came and waits for the
// caller to give up.
func (f *fakeKeys) holdOn(ctx context.Context) error {
	if f.hold == nil {
		return nil
	}
	f.hold <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

func (f *fakeKeys) CreateKey(ctx context.Context, req *connect.Request[keysv1.CreateKeyRequest]) (*connect.Response[keysv1.CreateKeyResponse], error) {
	if err := record(f, keysv1connect.KeyServiceCreateKeyProcedure, req); err != nil {
		return nil, err
	}
	if err := f.holdOn(ctx); err != nil {
		return nil, err
	}
	m := req.Msg
	return connect.NewResponse(&keysv1.CreateKeyResponse{RawKey: fakeRawKey, Key: &keysv1.Key{
		KeyId: "key_01", Prefix: fakePrefix, AppId: m.GetAppId(), TenantId: m.GetTenantId(), Plan: m.GetPlan(), Scopes: m.GetScopes(),
		Env: m.GetEnv(), Priority: m.GetPriority(), Status: configv1.KeyStatus_KEY_STATUS_ACTIVE,
		Created: timestamppb.New(time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)), NotAfter: m.GetNotAfter(), Rev: 1,
	}}), nil
}

func (f *fakeKeys) RotateKey(ctx context.Context, req *connect.Request[keysv1.RotateKeyRequest]) (*connect.Response[keysv1.RotateKeyResponse], error) {
	if err := record(f, keysv1connect.KeyServiceRotateKeyProcedure, req); err != nil {
		return nil, err
	}
	if err := f.holdOn(ctx); err != nil {
		return nil, err
	}
	stops := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC).Add(req.Msg.GetOverlap().AsDuration())
	return connect.NewResponse(&keysv1.RotateKeyResponse{
		RawKey:   fakeRawKey,
		Key:      &keysv1.Key{KeyId: "key_02", Prefix: fakePrefix, AppId: "shop", TenantId: "acme", Plan: "gold", Env: keysv1.Environment_ENVIRONMENT_LIVE, PredecessorKeyId: req.Msg.GetKeyId()},
		Previous: &keysv1.Key{KeyId: req.Msg.GetKeyId(), Prefix: "ak_live_Old1", AppId: "shop", NotAfter: timestamppb.New(stops), SuccessorKeyId: "key_02"},
	}), nil
}

func (f *fakeKeys) RevokeKey(_ context.Context, req *connect.Request[keysv1.RevokeKeyRequest]) (*connect.Response[keysv1.RevokeKeyResponse], error) {
	if err := record(f, keysv1connect.KeyServiceRevokeKeyProcedure, req); err != nil {
		return nil, err
	}
	resp := &keysv1.RevokeKeyResponse{Version: f.version, Key: &keysv1.Key{
		KeyId: req.Msg.GetKeyId(), Prefix: "ak_live_Old1", AppId: "shop", Status: configv1.KeyStatus_KEY_STATUS_REVOKED, RevokeReason: req.Msg.GetReason(),
	}}
	if req.Msg.GetWaitForNodes() != nil {
		resp.Propagation = f.propagation
	}
	return connect.NewResponse(resp), nil
}

func (f *fakeKeys) RevokeApp(_ context.Context, req *connect.Request[keysv1.RevokeAppRequest]) (*connect.Response[keysv1.RevokeAppResponse], error) {
	if err := record(f, keysv1connect.KeyServiceRevokeAppProcedure, req); err != nil {
		return nil, err
	}
	resp := &keysv1.RevokeAppResponse{Version: f.version}
	if req.Msg.GetWaitForNodes() != nil {
		resp.Propagation = f.propagation
	}
	for _, k := range f.keys {
		if k.GetAppId() == req.Msg.GetAppId() && k.GetStatus() == configv1.KeyStatus_KEY_STATUS_ACTIVE {
			resp.Keys = append(resp.Keys, k)
		}
	}
	return connect.NewResponse(resp), nil
}

func (f *fakeKeys) GetKey(_ context.Context, req *connect.Request[keysv1.GetKeyRequest]) (*connect.Response[keysv1.GetKeyResponse], error) {
	if err := record(f, keysv1connect.KeyServiceGetKeyProcedure, req); err != nil {
		return nil, err
	}
	for _, k := range f.keys {
		if k.GetKeyId() == req.Msg.GetKeyId() {
			return connect.NewResponse(&keysv1.GetKeyResponse{Key: k}), nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no key %s", req.Msg.GetKeyId()))
}

// ListKeys answers pageSize keys a page whatever the request asks, so a
// handful of keys takes several pages; the page token is the offset.
func (f *fakeKeys) ListKeys(_ context.Context, req *connect.Request[keysv1.ListKeysRequest]) (*connect.Response[keysv1.ListKeysResponse], error) {
	if err := record(f, keysv1connect.KeyServiceListKeysProcedure, req); err != nil {
		return nil, err
	}
	var match []*keysv1.Key
	for _, k := range f.keys {
		if (req.Msg.GetAppId() == "" || k.GetAppId() == req.Msg.GetAppId()) && (req.Msg.GetTenantId() == "" || k.GetTenantId() == req.Msg.GetTenantId()) {
			match = append(match, k)
		}
	}
	from := 0
	if tok := req.Msg.GetPageToken(); tok != "" {
		n, err := strconv.Atoi(tok)
		if err != nil || n > len(match) {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("bad page token %q", tok))
		}
		from = n
	}
	to := min(from+f.pageSize, len(match))
	resp := &keysv1.ListKeysResponse{Keys: match[from:to]}
	if to < len(match) {
		resp.NextPageToken = strconv.Itoa(to)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stuckToken != "" {
		resp.NextPageToken = f.stuckToken
	}
	return connect.NewResponse(resp), nil
}

func (f *fakeKeys) Deny(_ context.Context, req *connect.Request[keysv1.DenyRequest]) (*connect.Response[keysv1.DenyResponse], error) {
	if err := record(f, keysv1connect.TokenServiceDenyProcedure, req); err != nil {
		return nil, err
	}
	return connect.NewResponse(&keysv1.DenyResponse{Rev: 7, Version: f.version}), nil
}

func (f *fakeKeys) ListDenyEntries(_ context.Context, req *connect.Request[keysv1.ListDenyEntriesRequest]) (*connect.Response[keysv1.ListDenyEntriesResponse], error) {
	if err := record(f, keysv1connect.TokenServiceListDenyEntriesProcedure, req); err != nil {
		return nil, err
	}
	return connect.NewResponse(&keysv1.ListDenyEntriesResponse{Entries: f.entries}), nil
}
