package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// kind is one kind of team object: how to find its list in a team's
// config and its key in the list.
type kind[T any] struct {
	name   string // "route"
	plural string // "routes"
	list   func(*adminv1.TeamConfig) *[]T
	key    func(T) string
}

var (
	routes = kind[*configv1.Route]{"route", "routes",
		func(tc *adminv1.TeamConfig) *[]*configv1.Route { return &tc.Routes }, (*configv1.Route).GetId}
	clusters = kind[*configv1.Cluster]{"cluster", "clusters",
		func(tc *adminv1.TeamConfig) *[]*configv1.Cluster { return &tc.Clusters }, (*configv1.Cluster).GetName}
	services = kind[*configv1.Service]{"service", "services",
		func(tc *adminv1.TeamConfig) *[]*configv1.Service { return &tc.Services }, (*configv1.Service).GetId}
)

func putObject[T any](s *Service, ctx context.Context, h http.Header, k kind[T], team string, x T, message string) (*adminv1.Change, error) {
	object := k.name + " " + k.key(x)
	c, err := s.authorize(ctx, h, team, k.plural+".put", object)
	if err != nil {
		return nil, err
	}
	return s.commit(ctx, change{by: c, team: team, action: k.plural + ".put", object: object, message: message,
		apply: func(cfg *adminv1.Config) error {
			l := k.list(teamConfig(cfg, team, true))
			*l = put(*l, x, k.key)
			return nil
		}})
}

func deleteObject[T any](s *Service, ctx context.Context, h http.Header, k kind[T], team, id, message string) (*adminv1.Change, error) {
	object := k.name + " " + id
	c, err := s.authorize(ctx, h, team, k.plural+".delete", object)
	if err != nil {
		return nil, err
	}
	return s.commit(ctx, change{by: c, team: team, action: k.plural + ".delete", object: object, message: message,
		apply: func(cfg *adminv1.Config) error {
			tc := teamConfig(cfg, team, false)
			if tc == nil {
				return notFound(team, object)
			}
			l := k.list(tc)
			var ok bool
			if *l, ok = remove(*l, id, k.key); !ok {
				return notFound(team, object)
			}
			dropEmptyTeamConfig(cfg, team)
			return nil
		}})
}

func getObject[T any](s *Service, ctx context.Context, h http.Header, k kind[T], team, id string) (T, error) {
	var zero T
	if _, err := s.authorize(ctx, h, team, k.plural+".get", k.name+" "+id); err != nil {
		return zero, err
	}
	_, cfg, err := s.current(ctx)
	if err != nil {
		return zero, s.storeFailed(ctx, k.plural+".get", err)
	}
	if tc := teamConfig(cfg, team, false); tc != nil {
		if x, ok := find(*k.list(tc), id, k.key); ok {
			return x, nil
		}
	}
	return zero, notFound(team, k.name+" "+id)
}

func listObjects[T any](s *Service, ctx context.Context, h http.Header, k kind[T], team string) ([]T, error) {
	if _, err := s.authorize(ctx, h, team, k.plural+".list", k.plural); err != nil {
		return nil, err
	}
	_, cfg, err := s.current(ctx)
	if err != nil {
		return nil, s.storeFailed(ctx, k.plural+".list", err)
	}
	if tc := teamConfig(cfg, team, false); tc != nil {
		return *k.list(tc), nil
	}
	return nil, nil
}

func notFound(team, object string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("team %s has no %s", team, object))
}

// The RPCs: each a line over the kind's helpers.

func (s *Service) PutRoute(ctx context.Context, req *connect.Request[adminv1.PutRouteRequest]) (*connect.Response[adminv1.PutRouteResponse], error) {
	ch, err := putObject(s, ctx, req.Header(), routes, req.Msg.GetTeam(), req.Msg.GetRoute(), req.Msg.GetMessage())
	return respond(&adminv1.PutRouteResponse{Change: ch}, err)
}

func (s *Service) GetRoute(ctx context.Context, req *connect.Request[adminv1.GetRouteRequest]) (*connect.Response[adminv1.GetRouteResponse], error) {
	r, err := getObject(s, ctx, req.Header(), routes, req.Msg.GetTeam(), req.Msg.GetId())
	return respond(&adminv1.GetRouteResponse{Route: r}, err)
}

func (s *Service) ListRoutes(ctx context.Context, req *connect.Request[adminv1.ListRoutesRequest]) (*connect.Response[adminv1.ListRoutesResponse], error) {
	l, err := listObjects(s, ctx, req.Header(), routes, req.Msg.GetTeam())
	return respond(&adminv1.ListRoutesResponse{Routes: l}, err)
}

func (s *Service) DeleteRoute(ctx context.Context, req *connect.Request[adminv1.DeleteRouteRequest]) (*connect.Response[adminv1.DeleteRouteResponse], error) {
	ch, err := deleteObject(s, ctx, req.Header(), routes, req.Msg.GetTeam(), req.Msg.GetId(), req.Msg.GetMessage())
	return respond(&adminv1.DeleteRouteResponse{Change: ch}, err)
}

func (s *Service) PutCluster(ctx context.Context, req *connect.Request[adminv1.PutClusterRequest]) (*connect.Response[adminv1.PutClusterResponse], error) {
	ch, err := putObject(s, ctx, req.Header(), clusters, req.Msg.GetTeam(), req.Msg.GetCluster(), req.Msg.GetMessage())
	return respond(&adminv1.PutClusterResponse{Change: ch}, err)
}

func (s *Service) GetCluster(ctx context.Context, req *connect.Request[adminv1.GetClusterRequest]) (*connect.Response[adminv1.GetClusterResponse], error) {
	c, err := getObject(s, ctx, req.Header(), clusters, req.Msg.GetTeam(), req.Msg.GetId())
	return respond(&adminv1.GetClusterResponse{Cluster: c}, err)
}

func (s *Service) ListClusters(ctx context.Context, req *connect.Request[adminv1.ListClustersRequest]) (*connect.Response[adminv1.ListClustersResponse], error) {
	l, err := listObjects(s, ctx, req.Header(), clusters, req.Msg.GetTeam())
	return respond(&adminv1.ListClustersResponse{Clusters: l}, err)
}

func (s *Service) DeleteCluster(ctx context.Context, req *connect.Request[adminv1.DeleteClusterRequest]) (*connect.Response[adminv1.DeleteClusterResponse], error) {
	ch, err := deleteObject(s, ctx, req.Header(), clusters, req.Msg.GetTeam(), req.Msg.GetId(), req.Msg.GetMessage())
	return respond(&adminv1.DeleteClusterResponse{Change: ch}, err)
}

func (s *Service) PutService(ctx context.Context, req *connect.Request[adminv1.PutServiceRequest]) (*connect.Response[adminv1.PutServiceResponse], error) {
	ch, err := putObject(s, ctx, req.Header(), services, req.Msg.GetTeam(), req.Msg.GetService(), req.Msg.GetMessage())
	return respond(&adminv1.PutServiceResponse{Change: ch}, err)
}

func (s *Service) GetService(ctx context.Context, req *connect.Request[adminv1.GetServiceRequest]) (*connect.Response[adminv1.GetServiceResponse], error) {
	svc, err := getObject(s, ctx, req.Header(), services, req.Msg.GetTeam(), req.Msg.GetId())
	return respond(&adminv1.GetServiceResponse{Service: svc}, err)
}

func (s *Service) ListServices(ctx context.Context, req *connect.Request[adminv1.ListServicesRequest]) (*connect.Response[adminv1.ListServicesResponse], error) {
	l, err := listObjects(s, ctx, req.Header(), services, req.Msg.GetTeam())
	return respond(&adminv1.ListServicesResponse{Services: l}, err)
}

func (s *Service) DeleteService(ctx context.Context, req *connect.Request[adminv1.DeleteServiceRequest]) (*connect.Response[adminv1.DeleteServiceResponse], error) {
	ch, err := deleteObject(s, ctx, req.Header(), services, req.Msg.GetTeam(), req.Msg.GetId(), req.Msg.GetMessage())
	return respond(&adminv1.DeleteServiceResponse{Change: ch}, err)
}

// ApplyTeam replaces the team's routes, clusters and services at once.
func (s *Service) ApplyTeam(ctx context.Context, req *connect.Request[adminv1.ApplyTeamRequest]) (*connect.Response[adminv1.ApplyTeamResponse], error) {
	tc := req.Msg.GetConfig()
	team := tc.GetTeam()
	action := "team.apply"
	if req.Msg.GetDryRun() {
		action = "team.apply.dry_run"
	}
	c, err := s.authorize(ctx, req.Header(), team, action, "team "+team)
	if err != nil {
		return nil, err
	}
	ch, err := s.commit(ctx, change{by: c, team: team, action: action, object: "team " + team, message: req.Msg.GetMessage(),
		dryRun: req.Msg.GetDryRun(),
		apply: func(cfg *adminv1.Config) error {
			if old := teamConfig(cfg, team, false); old != nil {
				old.Routes, old.Clusters, old.Services = tc.GetRoutes(), tc.GetClusters(), tc.GetServices()
			} else {
				cfg.TeamConfigs = append(cfg.TeamConfigs, tc)
			}
			dropEmptyTeamConfig(cfg, team)
			return nil
		}})
	return respond(&adminv1.ApplyTeamResponse{Change: ch}, err)
}

// respond wraps msg, or passes err on.
func respond[T any](msg *T, err error) (*connect.Response[T], error) {
	if err != nil {
		var ce *connect.Error
		if !errors.As(err, &ce) {
			err = connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}
		return nil, err
	}
	return connect.NewResponse(msg), nil
}
