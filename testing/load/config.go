package load

import (
	"fmt"
	"os"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// benchPath is the request every load phase sends; benchRoute is the route
// that takes it, one among Options.Routes others.
const (
	benchPath  = "/v1/bench/items/42"
	benchRoute = "/v1/bench/{rest=**}"
)

// routeShapes are the routes each generated service has: the REST and gRPC
// shapes of a real table, so the trie has the fan-out and depth of one.
var routeShapes = []struct {
	method, path string
}{
	{"GET", "/v1/%s/items"},
	{"POST", "/v1/%s/items"},
	{"GET", "/v1/%s/items/{item_id}"},
	{"PATCH", "/v1/%s/items/{item_id}"},
	{"DELETE", "/v1/%s/items/{item_id}"},
	{"GET", "/v1/%s/items/{item_id}/events"},
	{"GET", "/v1/%s/owners/{owner_id}/items/{item_id}"},
	{"POST", "/v1/%s/items/{item_id}:archive"},
	{"POST", "/%s.v1.ItemService/GetItem"},
	{"POST", "/%s.v1.ItemService/ListItems"},
}

// gatewayConfig is the snapshot the gateway serves: the bench route plus
// extra generated routes, all on one HTTP/1.1 cluster at backend.
func gatewayConfig(backend string, extra int) *configv1.Snapshot {
	cfg := &configv1.Snapshot{
		Version: "portico-load",
		Clusters: []*configv1.Cluster{{
			Name:      "backend",
			Protocol:  configv1.Protocol_PROTOCOL_HTTP1,
			Endpoints: []*configv1.Endpoint{{Address: backend}},
		}},
	}
	routes := make([]*configv1.Route, 0, extra+1)
	for i := 0; len(routes) < extra; i++ {
		svc := fmt.Sprintf("svc%04d", i)
		for j, s := range routeShapes[:min(len(routeShapes), extra-len(routes))] {
			routes = append(routes, &configv1.Route{
				Id:      fmt.Sprintf("%s-%d", svc, j),
				Team:    fmt.Sprintf("team%03d", i%300),
				Methods: []string{s.method},
				Path:    fmt.Sprintf(s.path, svc),
				Cluster: "backend",
			})
		}
	}
	// The bench route sits in the middle of the table.
	bench := &configv1.Route{Id: "bench", Team: "bench", Methods: []string{"GET"}, Path: benchRoute, Cluster: "backend"}
	cfg.Routes = slices.Insert(routes, len(routes)/2, bench)
	return cfg
}

// writeGatewayConfig writes the snapshot as JSON to path.
func writeGatewayConfig(path, backend string, extra int) error {
	data, err := protojson.Marshal(gatewayConfig(backend, extra))
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
