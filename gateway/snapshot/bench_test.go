package snapshot_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/snapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// bigSnapshot is 300 services × 17 operations = 5,100 routes, each service
// with its own cluster, in the shapes teams publish.
func bigSnapshot() *configv1.Snapshot {
	cfg := &configv1.Snapshot{Version: "big"}
	for s := range 300 {
		svc := fmt.Sprintf("svc%03d", s)
		cfg.Clusters = append(cfg.Clusters, &configv1.Cluster{
			Name: svc, Protocol: configv1.Protocol_PROTOCOL_GRPC,
			Endpoints: []*configv1.Endpoint{{Address: fmt.Sprintf("10.1.%d.%d:9000", s/250, s%250)}, {Address: fmt.Sprintf("10.2.%d.%d:9000", s/250, s%250)}},
		})
		add := func(op, method, path string) {
			cfg.Routes = append(cfg.Routes, &configv1.Route{
				Id: svc + "-" + op, Team: "team-" + svc, Hosts: []string{"api.example.com", "*.api.example.com"},
				Methods: []string{method}, Path: path, Cluster: svc,
			})
		}
		base := "/v1/" + svc + "/things"
		add("list", "GET", base)
		add("create", "POST", base)
		add("get", "GET", base+"/{id}")
		add("update", "PATCH", base+"/{id}")
		add("delete", "DELETE", base+"/{id}")
		add("cancel", "POST", base+"/{id}:cancel")
		add("items", "GET", base+"/{id}/items")
		add("item", "GET", base+"/{id}/items/{item_id}")
		add("v2get", "GET", "/v2/"+svc+"/things/{id}")
		add("files", "GET", "/v1/"+svc+"/files/{path=**}")
		add("loc", "GET", "/v1/"+svc+"/{name=projects/*/locations/*}")
		for _, m := range []string{"Get", "List", "Create", "Update", "Delete", "Watch"} {
			add("grpc-"+strings.ToLower(m), "POST", fmt.Sprintf("/acme.%s.v1.%sService/%sThing", svc, svc, m))
		}
	}
	return cfg
}

// BenchmarkCompile5000 is the node's cost of taking a new snapshot of
// 5,100 routes (validation, digest, route tables).
func BenchmarkCompile5000(b *testing.B) {
	cfg := bigSnapshot()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := snapshot.Compile(cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRetained reports the heap a compiled 5,100-route snapshot keeps
// alive, source config included.
func BenchmarkRetained(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		cfg := bigSnapshot()
		s, err := snapshot.Compile(cfg)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(len(s.Routes)), "B/route")
		runtime.KeepAlive(s)
	}
}
