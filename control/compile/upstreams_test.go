package compile_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/portico-gw/portico/control/compile"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// TestCompileMappedNetworks: an IPv4-mapped IPv6 network
// ("::ffff:10.1.2.0/120") is the IPv4 network it stands for
// (10.1.2.0/24) wherever a network is used. Beside another team's
// 10.1.0.0/16 it overlaps, and is refused; alone, it lets the team's
// endpoints in it through, mapped or not, and it is what nodes get as an
// endpoint's networks. (Compared as written, it overlapped nothing and
// matched nothing, since endpoints and resolved addresses are unmapped
// before they are matched.) A mapped network shorter than /96 reaches
// past the mapped addresses and is refused.
func TestCompileMappedNetworks(t *testing.T) {
	t.Parallel()
	mapped := func(cidr string) *adminv1.Upstream {
		return &adminv1.Upstream{Address: &adminv1.Upstream_Cidr{Cidr: cidr}}
	}

	cfg := valid(t)
	cfg.Teams[0].Upstreams = append(cfg.Teams[0].Upstreams, mapped("10.1.0.0/16"))
	cfg.Teams[1].Upstreams = append(cfg.Teams[1].Upstreams, mapped("::ffff:10.1.2.0/120"))
	_, err := compile.Compile(cfg, "v1")
	if err == nil || !strings.Contains(err.Error(), `teams[search].upstreams[1]: network 10.1.2.0/24 ("::ffff:10.1.2.0/120") overlaps team "orders"'s network 10.1.0.0/16`) {
		t.Errorf(`Compile with search's "::ffff:10.1.2.0/120" beside orders' "10.1.0.0/16": %v, want the overlap refused at search's upstreams[1]`, err)
	}

	cfg = valid(t)
	cfg.Teams[1].Upstreams = append(cfg.Teams[1].Upstreams, mapped("::ffff:10.1.2.0/120"))
	cfg.TeamConfigs[0].Clusters = append(cfg.TeamConfigs[0].Clusters, &configv1.Cluster{Name: "search-v4", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
		Endpoints: []*configv1.Endpoint{{Address: "10.1.2.7:80"}, {Address: "[::ffff:10.1.2.8]:80"}, {Address: "db.example.net:80"}}})
	res, err := compile.Compile(cfg, "v1")
	if err != nil {
		t.Fatalf(`Compile with search's endpoints in its "::ffff:10.1.2.0/120": %v`, err)
	}
	for _, c := range res.Snapshot.GetClusters() {
		if c.GetName() != "search-v4" {
			continue
		}
		for _, e := range c.GetEndpoints() {
			want := []string(nil)
			if e.GetAddress() == "db.example.net:80" {
				want = []string{"10.1.2.0/24"}
			}
			if !slices.Equal(e.GetNetworks(), want) {
				t.Errorf("endpoint %s: networks %q, want %q", e.GetAddress(), e.GetNetworks(), want)
			}
		}
	}

	cfg = valid(t)
	cfg.Teams[1].Upstreams = append(cfg.Teams[1].Upstreams, mapped("::ffff:0.0.0.0/95"))
	_, err = compile.Compile(cfg, "v1")
	if err == nil || !strings.Contains(err.Error(), `teams[search].upstreams[1].cidr: "::ffff:0.0.0.0/95" is an IPv4-mapped network shorter than /96`) {
		t.Errorf(`Compile with search's "::ffff:0.0.0.0/95": %v, want it refused at search's upstreams[1].cidr`, err)
	}
}
