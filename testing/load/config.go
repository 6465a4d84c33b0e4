package load

import (
	"crypto/rand"
	"fmt"
	"os"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/portico-gw/portico/gateway/apikey"
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

// public is the auth of the no-auth configuration's routes.
var public = &configv1.RouteAuth{Public: true, Reviewer: "portico-load"}

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
				Auth:    public,
			})
		}
	}
	// The bench route sits in the middle of the table.
	bench := &configv1.Route{Id: "bench", Team: "bench", Methods: []string{"GET"}, Path: benchRoute, Cluster: "backend", Auth: public}
	cfg.Routes = slices.Insert(routes, len(routes)/2, bench)
	// The load comes from one address: the anonymous per-IP limit would
	// measure itself, not the proxy.
	cfg.RateLimiting = &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Disabled: true}}
	return cfg
}

// authGatewayConfig is gatewayConfig with an API key table of keys records
// and the bench route requiring a key (no scope, no product: the cost
// measured is authentication). It returns the one key the load sends.
func authGatewayConfig(backend string, extra, keys int) (*configv1.Snapshot, string, error) {
	cfg := gatewayConfig(backend, extra)
	cfg.Version = "portico-load-auth"
	cfg.Plans = []*configv1.Plan{{Name: "load"}}
	key, err := apikey.Generate(apikey.Live, rand.Reader)
	if err != nil {
		return nil, "", err
	}
	cfg.Keys = make([]*configv1.KeyRecord, 0, keys+1)
	hashes := make([]byte, 32*keys)
	if _, err := rand.Read(hashes); err != nil {
		return nil, "", err
	}
	for i := range keys {
		cfg.Keys = append(cfg.Keys, &configv1.KeyRecord{
			Sha256: hashes[32*i : 32*i+32 : 32*i+32], KeyId: fmt.Sprintf("key-%07d", i),
			AppId: fmt.Sprintf("app-%06d", i/2), TenantId: fmt.Sprintf("tenant-%04d", i%1000),
			Plan: "load", Status: configv1.KeyStatus_KEY_STATUS_ACTIVE,
		})
	}
	sum := apikey.Hash(key)
	cfg.Keys = slices.Insert(cfg.Keys, len(cfg.Keys)/2, &configv1.KeyRecord{
		Sha256: sum[:], KeyId: "key-load", AppId: "app-load", TenantId: "tenant-load",
		Plan: "load", Status: configv1.KeyStatus_KEY_STATUS_ACTIVE,
	})
	for _, r := range cfg.Routes {
		if r.GetId() == "bench" {
			r.Auth = &configv1.RouteAuth{}
		}
	}
	return cfg, key, nil
}

// limitRate is the gateway-rl target's per-caller limit: far above what one
// core can serve, so every request passes and the cost measured is the
// bucket's, not refusals'.
const limitRate = 10_000_000

// writeAuthGatewayConfig writes authGatewayConfig as JSON to path and
// returns the key the load sends. With limited, the plan also has a
// per-caller rate limit that never refuses.
func writeAuthGatewayConfig(path, backend string, extra, keys int, limited bool) (string, error) {
	cfg, key, err := authGatewayConfig(backend, extra, keys)
	if err != nil {
		return "", err
	}
	if limited {
		cfg.Version = "portico-load-rl"
		cfg.Plans[0].RateLimits = []*configv1.RateLimit{{
			Name: "default", Scope: configv1.RateLimitScope_RATE_LIMIT_SCOPE_CALLER, Rate: limitRate, Burst: limitRate,
		}}
	}
	data, err := protojson.Marshal(cfg)
	if err != nil {
		return "", err
	}
	return key, os.WriteFile(path, data, 0o600)
}

// writeGatewayConfig writes the snapshot as JSON to path.
func writeGatewayConfig(path, backend string, extra int) error {
	data, err := protojson.Marshal(gatewayConfig(backend, extra))
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
