package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"

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

// ListTeams lists the teams. Any admin may see who owns which hosts and
// path prefixes; a team admin sees the upstreams (backend addresses) of
// its own team only.
func (s *Service) ListTeams(ctx context.Context, req *connect.Request[adminv1.ListTeamsRequest]) (*connect.Response[adminv1.ListTeamsResponse], error) {
	c, err := s.authenticate(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	_, cfg, err := s.current(ctx)
	if err != nil {
		return nil, s.storeFailed(ctx, "teams.list", err)
	}
	if !c.platform() {
		// cfg is this call's own copy, decoded from the store.
		for _, t := range cfg.GetTeams() {
			if t.GetName() != c.team {
				t.Upstreams = nil
			}
		}
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
// (teams need the plans and scopes their routes name). A team admin sees
// only the upstream identities given to its team, each with its team as
// the only one: which backends other teams reach with which certificates
// is not its to know.
func (s *Service) GetPlatform(ctx context.Context, req *connect.Request[adminv1.GetPlatformRequest]) (*connect.Response[adminv1.GetPlatformResponse], error) {
	c, err := s.authenticate(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	_, cfg, err := s.current(ctx)
	if err != nil {
		return nil, s.storeFailed(ctx, "platform.get", err)
	}
	p := cfg.GetPlatform()
	if !c.platform() && p != nil {
		// cfg is this call's own copy, decoded from the store.
		var ids []*adminv1.UpstreamIdentity
		for _, id := range p.GetUpstreamIdentities() {
			if slices.Contains(id.GetTeams(), c.team) {
				id.Teams = []string{c.team}
				ids = append(ids, id)
			}
		}
		p.UpstreamIdentities = ids
	}
	return connect.NewResponse(&adminv1.GetPlatformResponse{Platform: p}), nil
}
