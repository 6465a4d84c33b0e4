// Package revert computes the config that undoes one change and nothing
// else: the objects the change touched (a team's routes, clusters and
// services, a team's declaration, the platform's objects) put back as
// they were before it, every other object as the newest version has it.
// A rollout that finds a change bad reverts that change alone, so the
// changes that came after it, other teams' and the same team's, stay.
//
// It is pure: configs in, a config out. The caller compiles and commits
// the result like any change.
package revert

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Object names one config object. Team is empty for the platform's
// objects; Kind is "team" for a team's declaration (Name is the team).
type Object struct {
	Team, Kind, Name string
}

func (o Object) String() string {
	switch {
	case o.Kind == "team":
		return "team " + o.Name
	case o.Team == "":
		return "platform " + o.Kind + " " + o.Name
	}
	return o.Team + " " + o.Kind + " " + o.Name
}

// ErrConflict is the category of Undo's refusals: an object the change
// touched was changed again since, so putting it back would undo that
// later change too. Undo never guesses.
var ErrConflict = errors.New("revert: changed again since")

// ConflictError names the objects changed again since the change.
type ConflictError struct {
	Objects []Object
}

func (e *ConflictError) Error() string {
	names := make([]string, len(e.Objects))
	for i, o := range e.Objects {
		names[i] = o.String()
	}
	return "revert: " + strings.Join(names, ", ") + " changed again since the change"
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// Changed lists the objects that differ between a and b, sorted.
func Changed(a, b *adminv1.Config) []Object {
	var out []Object
	for _, k := range kinds {
		for _, team := range k.teams(a, b) {
			ea, eb := k.objects(a, team), k.objects(b, team)
			names := map[string]bool{}
			for n := range ea {
				names[n] = true
			}
			for n := range eb {
				names[n] = true
			}
			for n := range names {
				if !equal(ea[n], eb[n]) {
					out = append(out, Object{Team: team, Kind: k.name, Name: n})
				}
			}
		}
	}
	slices.SortFunc(out, func(x, y Object) int { return strings.Compare(x.String(), y.String()) })
	return out
}

// Undo returns latest with the change from before to after undone: every
// object the change touched as it was in before (absent if it was), every
// other object as in latest. It also returns the objects put back. An
// object that latest has otherwise than after, changed again since, is a
// *ConflictError.
func Undo(before, after, latest *adminv1.Config) (*adminv1.Config, []Object, error) {
	touched := Changed(before, after)
	var conflicts []Object
	for _, o := range touched {
		if !equal(get(latest, o), get(after, o)) {
			conflicts = append(conflicts, o)
		}
	}
	if len(conflicts) > 0 {
		return nil, nil, &ConflictError{Objects: conflicts}
	}
	out := proto.CloneOf(latest)
	for _, o := range touched {
		set(out, o, get(before, o))
	}
	// A team left without objects has no entry, as the admin API keeps it.
	out.TeamConfigs = slices.DeleteFunc(out.TeamConfigs, func(tc *adminv1.TeamConfig) bool {
		return len(tc.GetRoutes()) == 0 && len(tc.GetClusters()) == 0 && len(tc.GetServices()) == 0
	})
	return out, touched, nil
}

// Touches reports whether objs holds an object matching team, kind and
// name (a NACK's refused object).
func Touches(objs []Object, team, kind, name string) bool {
	return slices.ContainsFunc(objs, func(o Object) bool { return o.Team == team && o.Kind == kind && o.Name == name })
}

func equal(a, b proto.Message) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return proto.Equal(a, b)
}

func get(cfg *adminv1.Config, o Object) proto.Message {
	for _, k := range kinds {
		if k.name == o.Kind && (k.team == (o.Team != "") || k.name == "team") {
			return k.objects(cfg, o.Team)[o.Name]
		}
	}
	return nil
}

func set(cfg *adminv1.Config, o Object, m proto.Message) {
	for _, k := range kinds {
		if k.name == o.Kind && (k.team == (o.Team != "") || k.name == "team") {
			if m != nil {
				m = proto.Clone(m)
			}
			k.set(cfg, o.Team, o.Name, m)
			return
		}
	}
	panic(fmt.Sprintf("revert: unknown object kind %q", o.Kind))
}

// kind is one kind of object: where its list is and what keys it.
type kind struct {
	name string
	// team reports a team's object (listed per team config).
	team    bool
	objects func(cfg *adminv1.Config, team string) map[string]proto.Message
	set     func(cfg *adminv1.Config, team, name string, m proto.Message)
}

// teams lists the teams whose objects of k a or b has; for the
// platform's kinds, the one "" team.
func (k kind) teams(a, b *adminv1.Config) []string {
	if !k.team {
		return []string{""}
	}
	seen := map[string]bool{}
	var out []string
	for _, cfg := range []*adminv1.Config{a, b} {
		for _, tc := range cfg.GetTeamConfigs() {
			if !seen[tc.GetTeam()] {
				seen[tc.GetTeam()] = true
				out = append(out, tc.GetTeam())
			}
		}
	}
	return out
}

var kinds = []kind{
	platformKind("team", func(c *adminv1.Config) *[]*adminv1.Team { return &c.Teams }, (*adminv1.Team).GetName),
	teamKind("route", func(tc *adminv1.TeamConfig) *[]*configv1.Route { return &tc.Routes }, (*configv1.Route).GetId),
	teamKind("cluster", func(tc *adminv1.TeamConfig) *[]*configv1.Cluster { return &tc.Clusters }, (*configv1.Cluster).GetName),
	teamKind("service", func(tc *adminv1.TeamConfig) *[]*configv1.Service { return &tc.Services }, (*configv1.Service).GetId),
	platformKind("product", func(c *adminv1.Config) *[]*configv1.Product { return &platform(c).Products }, (*configv1.Product).GetName),
	platformKind("plan", func(c *adminv1.Config) *[]*configv1.Plan { return &platform(c).Plans }, (*configv1.Plan).GetName),
	platformKind("scope", func(c *adminv1.Config) *[]*configv1.Scope { return &platform(c).Scopes }, (*configv1.Scope).GetName),
	platformKind("issuer", func(c *adminv1.Config) *[]*configv1.Issuer { return &platform(c).Issuers }, (*configv1.Issuer).GetName),
	platformKind("upstream_identity", func(c *adminv1.Config) *[]*adminv1.UpstreamIdentity { return &platform(c).UpstreamIdentities },
		(*adminv1.UpstreamIdentity).GetName),
	{
		name: "rate_limiting",
		objects: func(cfg *adminv1.Config, _ string) map[string]proto.Message {
			if rl := cfg.GetPlatform().GetRateLimiting(); rl != nil {
				return map[string]proto.Message{"": rl}
			}
			return nil
		},
		set: func(cfg *adminv1.Config, _, _ string, m proto.Message) {
			if m == nil {
				platform(cfg).RateLimiting = nil
				return
			}
			platform(cfg).RateLimiting = m.(*configv1.RateLimiting)
		},
	},
}

// platform is cfg's platform, made if missing (reads of a missing one
// see empty lists).
func platform(cfg *adminv1.Config) *adminv1.Platform {
	if cfg.Platform == nil {
		cfg.Platform = &adminv1.Platform{}
	}
	return cfg.Platform
}

func platformKind[T proto.Message](name string, list func(*adminv1.Config) *[]T, key func(T) string) kind {
	return kind{
		name: name,
		objects: func(cfg *adminv1.Config, _ string) map[string]proto.Message {
			if cfg == nil {
				return nil
			}
			// Read through a copy of the pointer: platform() would make a
			// Platform on a config that is only read.
			view := &adminv1.Config{Teams: cfg.GetTeams(), Platform: cfg.GetPlatform()}
			if view.Platform == nil {
				view.Platform = &adminv1.Platform{}
			}
			return byKey(*list(view), key)
		},
		set: func(cfg *adminv1.Config, _, n string, m proto.Message) { put(list(cfg), key, n, m) },
	}
}

func teamKind[T proto.Message](name string, list func(*adminv1.TeamConfig) *[]T, key func(T) string) kind {
	return kind{
		name: name, team: true,
		objects: func(cfg *adminv1.Config, team string) map[string]proto.Message {
			for _, tc := range cfg.GetTeamConfigs() {
				if tc.GetTeam() == team {
					return byKey(*list(tc), key)
				}
			}
			return nil
		},
		set: func(cfg *adminv1.Config, team, n string, m proto.Message) {
			var tc *adminv1.TeamConfig
			for _, c := range cfg.TeamConfigs {
				if c.GetTeam() == team {
					tc = c
				}
			}
			if tc == nil {
				if m == nil {
					return
				}
				tc = &adminv1.TeamConfig{Team: team}
				cfg.TeamConfigs = append(cfg.TeamConfigs, tc)
			}
			put(list(tc), key, n, m)
		},
	}
}

func byKey[T proto.Message](l []T, key func(T) string) map[string]proto.Message {
	out := make(map[string]proto.Message, len(l))
	for _, x := range l {
		out[key(x)] = x
	}
	return out
}

// put replaces the element of l keyed n with m, appends m if there is
// none, or removes the element when m is nil.
func put[T proto.Message](l *[]T, key func(T) string, n string, m proto.Message) {
	i := slices.IndexFunc(*l, func(x T) bool { return key(x) == n })
	switch {
	case m == nil && i >= 0:
		*l = slices.Delete(*l, i, i+1)
	case m == nil:
	case i >= 0:
		(*l)[i] = m.(T)
	default:
		*l = append(*l, m.(T))
	}
}
