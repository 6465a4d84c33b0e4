package admin

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/control/store"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	"github.com/portico-gw/portico/internal/svcauth"
)

// CreateToken issues an admin token. The answer holds the token once; the
// store keeps its hash.
func (s *Service) CreateToken(ctx context.Context, req *connect.Request[adminv1.CreateTokenRequest]) (*connect.Response[adminv1.CreateTokenResponse], error) {
	c, err := s.authorize(ctx, req.Header(), "", "tokens.create", "token for "+req.Msg.GetTeam())
	if err != nil {
		return nil, err
	}
	role, team := rolePlatform, req.Msg.GetTeam()
	if req.Msg.GetRole() == adminv1.Role_ROLE_TEAM_ADMIN {
		role = roleTeam
		if team == "" {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("a team-admin token needs its team"))
		}
	} else if team != "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("a platform-admin token has no team"))
	}
	token, id, err := NewToken()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, errors.New("generating a token failed"))
	}
	t := store.Token{ID: id, Hash: svcauth.Hash(token), Team: team, Role: role, CreatedBy: c.id, CreatedAt: s.now().UTC(), Note: req.Msg.GetNote()}
	if err := s.store.PutToken(ctx, t); err != nil {
		return nil, s.storeFailed(ctx, "tokens.create", err)
	}
	s.audit(ctx, &store.AuditEntry{Actor: c.id, Team: team, Action: "tokens.create", Object: "token " + id, Detail: role})
	return connect.NewResponse(&adminv1.CreateTokenResponse{Info: tokenInfo(t), Token: token}), nil
}

// ListTokens lists a team's tokens (a team admin its own team's), or the
// platform's; never a token or its hash.
func (s *Service) ListTokens(ctx context.Context, req *connect.Request[adminv1.ListTokensRequest]) (*connect.Response[adminv1.ListTokensResponse], error) {
	team := req.Msg.GetTeam()
	if _, err := s.authorize(ctx, req.Header(), team, "tokens.list", "tokens"); err != nil {
		return nil, err
	}
	ts, err := s.store.Tokens(ctx, team)
	if err != nil {
		return nil, s.storeFailed(ctx, "tokens.list", err)
	}
	out := &adminv1.ListTokensResponse{}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, tokenInfo(t))
	}
	return connect.NewResponse(out), nil
}

// RevokeToken revokes a token at once.
func (s *Service) RevokeToken(ctx context.Context, req *connect.Request[adminv1.RevokeTokenRequest]) (*connect.Response[adminv1.RevokeTokenResponse], error) {
	id := req.Msg.GetId()
	c, err := s.authorize(ctx, req.Header(), "", "tokens.revoke", "token "+id)
	if err != nil {
		return nil, err
	}
	if err := s.store.RevokeToken(ctx, id, s.now()); errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no token "+id))
	} else if err != nil {
		return nil, s.storeFailed(ctx, "tokens.revoke", err)
	}
	s.audit(ctx, &store.AuditEntry{Actor: c.id, Action: "tokens.revoke", Object: "token " + id})
	return connect.NewResponse(&adminv1.RevokeTokenResponse{}), nil
}

func tokenInfo(t store.Token) *adminv1.TokenInfo {
	info := &adminv1.TokenInfo{Id: t.ID, Team: t.Team, Role: adminv1.Role_ROLE_PLATFORM_ADMIN, CreatedBy: t.CreatedBy,
		CreatedAt: timestamppb.New(t.CreatedAt), Note: t.Note}
	if t.Role == roleTeam {
		info.Role = adminv1.Role_ROLE_TEAM_ADMIN
	}
	if !t.RevokedAt.IsZero() {
		info.RevokedAt = timestamppb.New(t.RevokedAt)
	}
	return info
}

// ListAudit reads the audit log, newest first: a team admin its own
// team's entries only.
func (s *Service) ListAudit(ctx context.Context, req *connect.Request[adminv1.ListAuditRequest]) (*connect.Response[adminv1.ListAuditResponse], error) {
	c, err := s.authenticate(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	team := req.Msg.GetTeam()
	if !c.platform() {
		if team != "" && team != c.team {
			return nil, connect.NewError(connect.CodePermissionDenied, errors.New("a team-admin token reads its own team's audit log only"))
		}
		team = c.team
	}
	es, err := s.store.Audit(ctx, store.AuditQuery{Team: team, Before: req.Msg.GetBefore(), Limit: int(req.Msg.GetLimit())})
	if err != nil {
		return nil, s.storeFailed(ctx, "audit.list", err)
	}
	out := &adminv1.ListAuditResponse{}
	for _, e := range es {
		out.Entries = append(out.Entries, &adminv1.AuditEntry{Id: e.ID, At: timestamppb.New(e.At), Actor: e.Actor, Team: e.Team,
			Action: e.Action, Object: e.Object, Outcome: e.Outcome, Detail: e.Detail, Version: e.Version})
	}
	return connect.NewResponse(out), nil
}
