package distribution

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/snapshot"
	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
)

// TestRefusedObjects: a NACK names the objects a refusal is about, with
// their teams, whichever check refused them.
func TestRefusedObjects(t *testing.T) {
	t.Parallel()
	cfg := &configv1.Snapshot{
		Routes:   []*configv1.Route{{Id: "orders.list", Team: "orders"}, {Id: "search.q", Team: "search"}},
		Clusters: []*configv1.Cluster{{Name: "orders", Team: "orders"}, {Name: "pay", Team: "payments"}},
		Services: []*configv1.Service{{Id: "orders-grpc", Team: "orders"}},
		Issuers:  []*configv1.Issuer{{Name: "idp"}},
	}
	serr := &snapshot.Error{Violations: []snapshot.Violation{
		{Path: "routes[1].path", Message: "bad template"},
		{Path: "routes[1].cluster", Message: "unknown cluster"},
		{Path: "services[0]", Message: "bad descriptors"},
		{Path: "issuers[0].jwks_json", Message: "no keys"},
		{Path: "rate_limiting.sync_interval", Message: "too short"},
		{Path: "routes[9]", Message: "out of range"},
	}}
	got := refusedObjects(&applyError{cfg: cfg, err: fmt.Errorf("snapshot %q: %w", "v3", serr)})
	var lines []string
	for _, o := range got {
		lines = append(lines, o.GetTeam()+"/"+o.GetKind()+"/"+o.GetName()+": "+o.GetError())
	}
	want := []string{
		"search/route/search.q: routes[1].path: bad template; routes[1].cluster: unknown cluster",
		"orders/service/orders-grpc: services[0]: bad descriptors",
		"/issuer/idp: issuers[0].jwks_json: no keys",
		"/snapshot/: rate_limiting.sync_interval: too short",
		"/snapshot/routes: routes[9]: out of range",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("refusedObjects =\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	cerr := fmt.Errorf("snapshot %q: %w", "v3", &upstream.ClusterError{Cluster: "pay", Err: &upstream.MissingIdentityError{Identity: "pay-mtls"}})
	got = refusedObjects(&applyError{cfg: cfg, err: cerr})
	if len(got) != 1 || got[0].GetTeam() != "payments" || got[0].GetKind() != "cluster" || got[0].GetName() != "pay" || !strings.Contains(got[0].GetError(), "pay-mtls") {
		t.Errorf("a cluster the node cannot build: %v, want payments' cluster pay", got)
	}
	got = refusedObjects(errors.New("the snapshot does not decode"))
	if len(got) != 1 || got[0].GetKind() != "snapshot" || got[0].GetName() != "" {
		t.Errorf("a snapshot that does not decode: %v, want the snapshot as a whole", got)
	}
	if s := truncate("héllo", 2); s != "h" {
		t.Errorf("truncate cut a character: %q", s)
	}
}

// TestHealthOfStaysSmall: a node's hello and reports carry its endpoints'
// health, and the control plane reads at most 16 MiB a message: however
// many endpoints one team's clusters have (here 80 × 1,024, all failing,
// with 200-byte names), the account stays small, counts every endpoint,
// and lists at most 1,000.
func TestHealthOfStaysSmall(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 190)
	var clusters []upstream.ClusterStatus
	for c := range 80 {
		cs := upstream.ClusterStatus{Name: fmt.Sprintf("bulk-%02d", c)}
		for e := range 1024 {
			cs.Endpoints = append(cs.Endpoints, upstream.EndpointStatus{Address: fmt.Sprintf("e%04d.%s:8080", e, long), Healthy: e%2 == 0, RefusedDials: uint64(e % 3)})
		}
		clusters = append(clusters, cs)
	}
	h := healthOf(clusters)
	listed, healthy, unhealthy := 0, 0, 0
	for _, c := range h {
		listed += len(c.GetEndpoints())
		healthy += int(c.GetHealthy())
		unhealthy += int(c.GetUnhealthy())
	}
	if listed != maxListedEndpoints || healthy != 80*512 || unhealthy != 80*512 {
		t.Errorf("listed %d endpoints (want %d), counted %d healthy and %d not (want %d each)", listed, maxListedEndpoints, healthy, unhealthy, 80*512)
	}
	rep := &distributionv1.StreamRequest{Message: &distributionv1.StreamRequest_Report{Report: &distributionv1.Report{Clusters: h}}}
	if n := proto.Size(rep); n > 1<<20 {
		t.Errorf("a report of 81,920 endpoints is %d bytes, want under 1 MiB", n)
	}
	if err := protovalidate.Validate(rep); err != nil {
		t.Errorf("the report breaks the stream's rules: %v", err)
	}
}
