package keysvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
)

// tokenAPI serves portico.keys.v1.TokenService.
type tokenAPI struct{ s *Service }

func (a *tokenAPI) Deny(ctx context.Context, req *connect.Request[keysv1.DenyRequest]) (*connect.Response[keysv1.DenyResponse], error) {
	s := a.s
	e := req.Msg.GetEntry()
	if c := callerOf(ctx); !c.mayActFor(e.GetIssuer()) {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("token %s may deny tokens of issuers %v only", c.Name, c.Issuers))
	}
	now := s.now()
	if !e.GetExpires().AsTime().After(now) {
		return nil, connect.NewError(connect.CodeInvalidArgument, errExpired)
	}
	// A jti entry gets the time of the denial as its issued_before, unless
	// it names a later one: its token was issued before now, so with iat
	// it is dead by now plus its issuer's max_token_lifetime, which is how
	// long the nodes then keep the entry at least (gateway/denyentry).
	// What the caller says of the token (token_expires, an earlier
	// issued_before) and the expires it asks for only ever lengthen that:
	// an early token_expires with a short expires would otherwise make
	// the entry lapse while the token still works.
	if ib := e.GetIssuedBefore(); e.GetJti() != "" && (ib == nil || ib.AsTime().Before(now)) {
		e = proto.CloneOf(e)
		e.IssuedBefore = timestamppb.New(now)
	}
	d, err := s.store.PutDeny(ctx, e)
	if err != nil {
		return nil, s.internal("storing the deny entry failed", err)
	}
	s.log.Info("token deny entry added", "id", d.ID, "by", callerOf(ctx).Name, "expires", e.GetExpires().AsTime(), "kept_until", d.KeepUntil, "rev", d.Rev)
	return connect.NewResponse(&keysv1.DenyResponse{Rev: d.Rev, Version: s.publishNow(ctx)}), nil
}

func (a *tokenAPI) ListDenyEntries(ctx context.Context, _ *connect.Request[keysv1.ListDenyEntriesRequest]) (*connect.Response[keysv1.ListDenyEntriesResponse], error) {
	entries, err := a.s.store.DenyEntries(ctx, a.s.now())
	if err != nil {
		return nil, a.s.internal("listing deny entries failed", err)
	}
	resp := &keysv1.ListDenyEntriesResponse{Entries: make([]*configv1.DenyEntry, len(entries))}
	for i, d := range entries {
		resp.Entries[i] = d.Entry
	}
	return connect.NewResponse(resp), nil
}

func (a *tokenAPI) PublishIssuerKeys(ctx context.Context, req *connect.Request[keysv1.PublishIssuerKeysRequest]) (*connect.Response[keysv1.PublishIssuerKeysResponse], error) {
	s := a.s
	k := req.Msg.GetKeys()
	if c := callerOf(ctx); !c.mayActFor(k.GetIssuer()) {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("token %s may publish keys of issuers %v only", c.Name, c.Issuers))
	}
	// A set nodes would refuse never gets on the lane.
	if err := checkJWKS(k.GetJwksJson()); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	ik, err := s.store.PutIssuerKeys(ctx, k.GetIssuer(), k.GetJwksJson())
	if err != nil {
		return nil, s.internal("storing the issuer's keys failed", err)
	}
	s.log.Info("issuer keys published", "issuer", ik.Issuer, "by", callerOf(ctx).Name, "rev", ik.Rev)
	return connect.NewResponse(&keysv1.PublishIssuerKeysResponse{Rev: ik.Rev, Version: s.publishNow(ctx)}), nil
}

var errExpired = errors.New("the deny entry's expires is not in the future")

// checkJWKS checks that s is a JSON Web Key Set whose keys each have a
// kty; nodes check the keys themselves.
func checkJWKS(s string) error {
	var set struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal([]byte(s), &set); err != nil {
		return fmt.Errorf("jwks_json is not a JSON Web Key Set: %w", err)
	}
	if len(set.Keys) == 0 {
		return errors.New(`jwks_json has no "keys"`)
	}
	for i, k := range set.Keys {
		if _, ok := k["kty"]; !ok {
			return fmt.Errorf("jwks_json keys[%d] has no kty", i)
		}
	}
	return nil
}
