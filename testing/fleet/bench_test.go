package fleet_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/control/compile"
	"github.com/portico-gw/portico/gateway"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

// bigConfig is 300 teams of 17 routes each (5,100 routes), every team on
// its own prefix and cluster.
func bigConfig() *adminv1.Config {
	cfg := &adminv1.Config{Platform: &adminv1.Platform{RateLimiting: &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Disabled: true}}}}
	for i := range 300 {
		name := fmt.Sprintf("team-%03d", i)
		prefix := fmt.Sprintf("/v1/t%03d", i)
		cfg.Teams = append(cfg.Teams, &adminv1.Team{Name: name, Owns: []*adminv1.Ownership{{Host: "api.example.com", PathPrefix: prefix}},
			Upstreams: []*adminv1.Upstream{{Address: &adminv1.Upstream_Host{Host: name + ".internal"}}}})
		tc := &adminv1.TeamConfig{Team: name, Clusters: []*configv1.Cluster{{Name: name, Protocol: configv1.Protocol_PROTOCOL_HTTP1,
			Endpoints: []*configv1.Endpoint{{Address: name + ".internal:9"}}}}}
		for j := range 17 {
			tc.Routes = append(tc.Routes, &configv1.Route{Id: fmt.Sprintf("%s.r%d", name, j), Hosts: []string{"api.example.com"},
				Path: fmt.Sprintf("%s/r%d/{id}", prefix, j), Cluster: name, Auth: &configv1.RouteAuth{Public: true, Reviewer: "bench"}})
		}
		cfg.TeamConfigs = append(cfg.TeamConfigs, tc)
	}
	return cfg
}

// BenchmarkNodeBoot is a node coming up with a 5,100-route snapshot:
// decoding the bytes as sent (or cached), compiling and applying them,
// ready to serve (target: under 1 s).
func BenchmarkNodeBoot(b *testing.B) {
	res, err := compile.Compile(bigConfig(), "v1")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(res.Bytes)), "snapshot-bytes")
	b.ReportAllocs()
	for b.Loop() {
		node, err := gateway.New(gateway.Options{Logger: gatewaytest.Logger(), Listeners: []gateway.Listener{{Pool: "public", Listener: gatewaytest.Listen(b)}}})
		if err != nil {
			b.Fatal(err)
		}
		cfg := &configv1.Snapshot{}
		if err := proto.Unmarshal(res.Bytes, cfg); err != nil {
			b.Fatal(err)
		}
		cfg.Sha256 = res.SHA256
		if err := node.Apply(cfg); err != nil {
			b.Fatal(err)
		}
		node.Close()
	}
}

// TestChangeLatencyTenNodes measures how long a change takes to be
// running on 10 connected nodes, from the admin call to the last ACK, with
// no bake time (target: p99 under 1 s on loopback). It reports the
// figures; it checks only that every change arrived.
func TestChangeLatencyTenNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement")
	}
	cp := startControl(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	for i := range 10 {
		startNode(t, cp.url, fmt.Sprintf("node-%02d", i), "")
	}
	setUp(t, cp, backend(t, "orders"))
	const changes = 50
	var took []time.Duration
	for i := range changes {
		start := time.Now()
		v := putRoute(t, cp, fmt.Sprintf("orders.r%d", i), fmt.Sprintf("/v1/orders/r%d", i))
		waitFleet(t, cp, fmt.Sprintf("change %d", i), allRun(10, v))
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	pct := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	t.Logf("%d changes to 10 nodes (admin call to the last ACK): p50 %v, p99 %v, max %v",
		changes, pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), took[len(took)-1].Round(time.Microsecond))
}
