package admin

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control/store"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
)

// PutTeam creates or replaces a team and what it owns.
func (s *Service) PutTeam(ctx context.Context, req *connect.Request[adminv1.PutTeamRequest]) (*connect.Response[adminv1.PutTeamResponse], error) {
	t := req.Msg.GetTeam()
	object := "team " + t.GetName()
	c, err := s.authorize(ctx, req.Header(), "", "teams.put", object)
	if err != nil {
		return nil, err
	}
	ch, err := s.commit(ctx, change{by: c, team: t.GetName(), action: "teams.put", object: object, message: req.Msg.GetMessage(),
		apply: func(cfg *adminv1.Config) error {
			cfg.Teams = put(cfg.Teams, t, (*adminv1.Team).GetName)
			return nil
		}})
	return respond(&adminv1.PutTeamResponse{Change: ch}, err)
}

// ListTeams lists the teams; any admin may see who owns what.
func (s *Service) ListTeams(ctx context.Context, req *connect.Request[adminv1.ListTeamsRequest]) (*connect.Response[adminv1.ListTeamsResponse], error) {
	if _, err := s.authenticate(ctx, req.Header()); err != nil {
		return nil, err
	}
	_, cfg, err := s.current(ctx)
	if err != nil {
		return nil, s.storeFailed(ctx, "teams.list", err)
	}
	return connect.NewResponse(&adminv1.ListTeamsResponse{Teams: cfg.GetTeams()}), nil
}

// DeleteTeam removes a team that has no objects left.
func (s *Service) DeleteTeam(ctx context.Context, req *connect.Request[adminv1.DeleteTeamRequest]) (*connect.Response[adminv1.DeleteTeamResponse], error) {
	name := req.Msg.GetName()
	object := "team " + name
	c, err := s.authorize(ctx, req.Header(), "", "teams.delete", object)
	if err != nil {
		return nil, err
	}
	ch, err := s.commit(ctx, change{by: c, team: name, action: "teams.delete", object: object, message: req.Msg.GetMessage(),
		apply: func(cfg *adminv1.Config) error {
			if teamConfig(cfg, name, false) != nil {
				return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("team %s still has routes, clusters or services: delete them first", name))
			}
			var ok bool
			if cfg.Teams, ok = remove(cfg.Teams, name, (*adminv1.Team).GetName); !ok {
				return connect.NewError(connect.CodeNotFound, errors.New("no team "+name))
			}
			return nil
		}})
	if err == nil && ch.GetChanged() {
		// A team created again later under the name starts with no tokens.
		if rerr := s.revokeTeamTokens(ctx, c, name); rerr != nil {
			return nil, rerr
		}
	}
	return respond(&adminv1.DeleteTeamResponse{Change: ch}, err)
}

// revokeTeamTokens revokes every token of team.
func (s *Service) revokeTeamTokens(ctx context.Context, by caller, team string) error {
	ts, err := s.store.Tokens(ctx, team)
	if err != nil {
		return s.storeFailed(ctx, "teams.delete", err)
	}
	for _, t := range ts {
		if !t.RevokedAt.IsZero() {
			continue
		}
		if err := s.store.RevokeToken(ctx, t.ID, s.now()); err != nil {
			return s.storeFailed(ctx, "teams.delete", err)
		}
		s.audit(ctx, &store.AuditEntry{Actor: by.id, Team: team, Action: "tokens.revoke", Object: "token " + t.ID, Detail: "its team was deleted"})
	}
	return nil
}

// PutPlatform replaces the platform's objects.
func (s *Service) PutPlatform(ctx context.Context, req *connect.Request[adminv1.PutPlatformRequest]) (*connect.Response[adminv1.PutPlatformResponse], error) {
	c, err := s.authorize(ctx, req.Header(), "", "platform.put", "platform")
	if err != nil {
		return nil, err
	}
	ch, err := s.commit(ctx, change{by: c, action: "platform.put", object: "platform", message: req.Msg.GetMessage(),
		apply: func(cfg *adminv1.Config) error {
			cfg.Platform = req.Msg.GetPlatform()
			return nil
		}})
	return respond(&adminv1.PutPlatformResponse{Change: ch}, err)
}

// GetPlatform returns the platform's objects; any admin may read them
// (teams need the plans and scopes their routes name).
func (s *Service) GetPlatform(ctx context.Context, req *connect.Request[adminv1.GetPlatformRequest]) (*connect.Response[adminv1.GetPlatformResponse], error) {
	if _, err := s.authenticate(ctx, req.Header()); err != nil {
		return nil, err
	}
	_, cfg, err := s.current(ctx)
	if err != nil {
		return nil, s.storeFailed(ctx, "platform.get", err)
	}
	return connect.NewResponse(&adminv1.GetPlatformResponse{Platform: cfg.GetPlatform()}), nil
}
