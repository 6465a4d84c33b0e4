package compile_test

import (
	"fmt"
	"testing"

	"github.com/portico-gw/portico/control/compile"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// fleet is a config of teams teams with routesPerTeam routes each, every
// team on its own path prefix with its own cluster, and routes of every
// shape: literal paths, variables, a verb, a header match.
func fleet(teams, routesPerTeam int) *adminv1.Config {
	cfg := &adminv1.Config{Platform: &adminv1.Platform{Scopes: []*configv1.Scope{{Name: "read"}}}}
	for i := range teams {
		name := fmt.Sprintf("team-%03d", i)
		prefix := fmt.Sprintf("/v1/t%03d", i)
		cfg.Teams = append(cfg.Teams, &adminv1.Team{Name: name, Owns: []*adminv1.Ownership{{Host: "api.example.com", PathPrefix: prefix}},
			Upstreams: []*adminv1.Upstream{{Address: &adminv1.Upstream_Host{Host: "*." + name + ".internal"}}}})
		c := cluster(name)
		c.Endpoints[0].Address = "api." + name + ".internal:8080"
		tc := &adminv1.TeamConfig{Team: name, Clusters: []*configv1.Cluster{c}}
		for j := range routesPerTeam {
			var path string
			switch j % 4 {
			case 0:
				path = fmt.Sprintf("%s/r%d", prefix, j)
			case 1:
				path = fmt.Sprintf("%s/r%d/{id}", prefix, j)
			case 2:
				path = fmt.Sprintf("%s/r%d:run", prefix, j)
			default:
				path = fmt.Sprintf("%s/r%d/{id}/items/**", prefix, j)
			}
			r := route(fmt.Sprintf("%s.r%d", name, j), "api.example.com", path, name)
			if j%5 == 0 {
				r.Auth = &configv1.RouteAuth{Scopes: []string{"read"}}
			}
			tc.Routes = append(tc.Routes, r)
		}
		cfg.TeamConfigs = append(cfg.TeamConfigs, tc)
	}
	return cfg
}

// BenchmarkCompileFleet compiles and validates 5,000 routes of 300 teams
// (target: under 2 s).
func BenchmarkCompileFleet(b *testing.B) {
	cfg := fleet(300, 17) // 5,100 routes
	b.ReportAllocs()
	for b.Loop() {
		if _, err := compile.Compile(cfg, "v1"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCompileFleet(t *testing.T) {
	t.Parallel()
	res, err := compile.Compile(fleet(300, 17), "v1")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Snapshot.GetRoutes()); n != 5100 {
		t.Errorf("%d routes, want 5100", n)
	}
}
