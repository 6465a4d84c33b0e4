package admin

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Diff describes how to get from config a to config b, one line per
// object: "+" added, "-" removed, "~" changed, sorted. Empty when they are
// the same.
func Diff(a, b *adminv1.Config) string {
	var lines []string
	add := func(sign, what string) { lines = append(lines, sign+" "+what) }

	diffByKey(a.GetTeams(), b.GetTeams(), (*adminv1.Team).GetName, func(sign, name string) { add(sign, "team "+name) })
	teamsA := map[string]*adminv1.TeamConfig{}
	for _, tc := range a.GetTeamConfigs() {
		teamsA[tc.GetTeam()] = tc
	}
	teamsB := map[string]*adminv1.TeamConfig{}
	for _, tc := range b.GetTeamConfigs() {
		teamsB[tc.GetTeam()] = tc
	}
	names := map[string]bool{}
	for n := range teamsA {
		names[n] = true
	}
	for n := range teamsB {
		names[n] = true
	}
	for team := range names {
		ta, tb := teamsA[team], teamsB[team]
		diffByKey(ta.GetRoutes(), tb.GetRoutes(), (*configv1.Route).GetId, func(sign, id string) { add(sign, team+" route "+id) })
		diffByKey(ta.GetClusters(), tb.GetClusters(), (*configv1.Cluster).GetName, func(sign, id string) { add(sign, team+" cluster "+id) })
		diffByKey(ta.GetServices(), tb.GetServices(), (*configv1.Service).GetId, func(sign, id string) { add(sign, team+" service "+id) })
	}
	pa, pb := a.GetPlatform(), b.GetPlatform()
	diffByKey(pa.GetProducts(), pb.GetProducts(), (*configv1.Product).GetName, func(sign, n string) { add(sign, "platform product "+n) })
	diffByKey(pa.GetPlans(), pb.GetPlans(), (*configv1.Plan).GetName, func(sign, n string) { add(sign, "platform plan "+n) })
	diffByKey(pa.GetScopes(), pb.GetScopes(), (*configv1.Scope).GetName, func(sign, n string) { add(sign, "platform scope "+n) })
	diffByKey(pa.GetIssuers(), pb.GetIssuers(), (*configv1.Issuer).GetName, func(sign, n string) { add(sign, "platform issuer "+n) })
	diffByKey(pa.GetUpstreamIdentities(), pb.GetUpstreamIdentities(), (*adminv1.UpstreamIdentity).GetName, func(sign, n string) { add(sign, "platform upstream_identity "+n) })
	if !proto.Equal(pa.GetRateLimiting(), pb.GetRateLimiting()) {
		add("~", "platform rate_limiting")
	}
	slices.SortFunc(lines, func(x, y string) int { return strings.Compare(x[2:], y[2:]) })
	return strings.Join(lines, "\n")
}

// diffByKey reports the elements of a and b, matched by key, that were
// added, removed or changed.
func diffByKey[T proto.Message](a, b []T, key func(T) string, report func(sign, key string)) {
	byKey := make(map[string]T, len(a))
	for _, x := range a {
		byKey[key(x)] = x
	}
	seen := make(map[string]bool, len(b))
	for _, y := range b {
		k := key(y)
		seen[k] = true
		x, ok := byKey[k]
		switch {
		case !ok:
			report("+", k)
		case !proto.Equal(x, y):
			report("~", k)
		}
	}
	for _, x := range a {
		if !seen[key(x)] {
			report("-", key(x))
		}
	}
}
