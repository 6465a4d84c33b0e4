package main

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/cmd/portico/demo"
	"github.com/portico-gw/portico/control"
	"github.com/portico-gw/portico/gateway"
	"github.com/portico-gw/portico/gateway/usage/ship"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	demov1 "github.com/portico-gw/portico/gen/portico/demo/v1"
	"github.com/portico-gw/portico/keysvc"
	"github.com/portico-gw/portico/quota"
)

// runDev is `portico dev`: the demo backends, then the control plane
// (with the key service on its address), a gateway node following it,
// each through its package's Run, as separate processes would run them.
// Once the node runs the demo config and holds the demo key, dev prints
// how to call it.
func runDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("portico dev", flag.ContinueOnError)
	var (
		addr     = fs.String("addr", "127.0.0.1:8080", "cleartext HTTP/1.1 + h2c listener of the public pool")
		tlsAddr  = fs.String("tls-addr", "127.0.0.1:8443", "HTTP/2 + HTTP/1.1 over TLS listener of the public pool (self-signed)")
		logLevel = fs.String("log-level", "info", "debug, info, warn or error")
		headroom = fs.Int("gc-headroom-mib", defaultGCHeadroomMiB, "heap growth allowed between garbage collections, in MiB (0: Go's default pacing; GOGC in the environment wins)")
		ctlAddr  = fs.String("control-addr", "127.0.0.1:7000", "the control plane's admin API (and the node's stream)")
		dataDir  = fs.String("data-dir", defaultDevDataDir(), "where the control plane keeps its SQLite store and the platform token")
		usageWin = fs.Duration("usage-window", 10*time.Second, "length of the node's usage windows (the quota service sees a call within about this long)")
		ghFile   = fs.String("github-keys-file", "", "take GitHub's secret scanning reports at "+keysvc.GitHubLeakPath+", verified with the keys of this file (GitHub's public keys document's format; dev fetches nothing); empty: off")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	runs, err := processRuns(*headroom, "", log)
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "portico-dev-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cert, caFile, err := devCertificate(dir)
	if err != nil {
		return fmt.Errorf("dev: generating a TLS certificate: %w", err)
	}
	ident, err := newDevIdentity()
	if err != nil {
		return fmt.Errorf("dev: making the demo credentials: %w", err)
	}
	env, err := newDevEnv(*dataDir, log)
	if err != nil {
		return err
	}

	backends, err := demo.Start(ctx, demo.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("dev: starting demo backends: %w", err)
	}
	defer backends.Close()

	// The control plane's listener is bound first, so that its URL is
	// known to the key service and the node before it serves.
	ln, err := net.Listen("tcp", *ctlAddr)
	if err != nil {
		return fmt.Errorf("dev: the control plane: %w (choose another port with -control-addr)", err)
	}
	env.url = "http://" + ln.Addr().String()
	keys, err := keysvc.Open(ctx, env.keysOptions(*ghFile, log))
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("dev: %w", err)
	}
	defer keys.Close() // after runs.run: every user of the store has stopped
	quotas, err := quota.Open(ctx, env.quotaOptions(log))
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("dev: %w", err)
	}
	defer quotas.Close() // after runs.run, as keys
	usageDir := filepath.Join(env.dataDir, "usage")
	if err := os.MkdirAll(usageDir, 0o700); err != nil {
		_ = ln.Close()
		return fmt.Errorf("dev: %w", err)
	}
	node, err := gateway.New(gateway.Options{
		Logger: log,
		Listeners: []gateway.Listener{
			{Pool: "public", Addr: *addr},
			{Pool: "public", Addr: *tlsAddr, TLS: &tls.Config{Certificates: []tls.Certificate{cert}}},
		},
		DrainTimeout: 5 * time.Second,
		// The dev node follows the control plane and polls the key
		// service's signed snapshot, as a production node does.
		Control:     &gateway.ControlOptions{URL: env.url, Token: env.nodeToken, NodeID: "dev", Region: "dev"},
		KeySnapshot: &gateway.KeySnapshotOptions{URL: env.url + keysvc.SnapshotPath, Token: env.snapshotToken, Trusted: []ed25519.PublicKey{env.signer}},
		// Usage is counted and spooled as on a production node, and
		// delivered to the quota service in process instead of through
		// Kafka.
		Usage: &gateway.UsageOptions{
			Dir: usageDir, Window: *usageWin,
			Sender: ship.SenderFunc(func(ctx context.Context, msgs []ship.Message) error {
				for _, m := range msgs {
					if err := quotas.Deliver(ctx, m.Value); err != nil {
						return err
					}
				}
				return nil
			}),
		},
	})
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("dev: %w (choose other ports with -addr and -tls-addr)", err)
	}

	plane := make(chan *control.Plane, 1)
	handlers := map[string]http.Handler{}
	keysHandler := keys.Handler()
	for _, p := range keys.Paths() {
		handlers[p] = keysHandler
	}
	quotaHandler := quotas.Handler()
	for _, p := range quotas.Paths() {
		handlers[p] = quotaHandler
	}
	runs.add(func(ctx context.Context) error {
		// Dev sends each version to its one node at once: no stages.
		return control.Run(ctx, control.Options{
			StoreDSN: "sqlite:" + filepath.Join(env.dataDir, "control.db"), Listener: ln, Handlers: handlers, Logger: log,
			BootstrapToken: env.token, NodeToken: env.nodeToken, PublisherToken: env.publisherToken,
			OnServe: func(p *control.Plane) { plane <- p },
		})
	})
	runs.add(func(ctx context.Context) error {
		keys.Run(ctx)
		return nil
	})
	runs.add(func(ctx context.Context) error {
		quotas.Run(ctx)
		return nil
	})
	runs.add(node.Run)
	runs.add(func(ctx context.Context) error {
		var p *control.Plane
		select {
		case p = <-plane:
		case <-ctx.Done():
			return nil
		}
		demoCfg := devSnapshot(backends, ident)
		version, err := env.seed(ctx, demoCfg)
		if err != nil {
			return err
		}
		// The key service is in this process: a signed snapshot the
		// node cannot fetch is a fault of dev's, shown at start rather
		// than as the poller's warning a minute later.
		if err := env.checkKeySnapshot(ctx); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		if err := waitDevNode(ctx, p, version); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		if ident.Key, ident.KeyID, err = env.demoKey(ctx); err != nil {
			return err
		}
		addrs := node.Addrs()
		printDevBanner(os.Stdout, addrs[0].String(), addrs[1].String(), caFile, ident)
		printDevControl(os.Stdout, env, ident.KeyID)
		return nil
	})
	return runs.run(ctx)
}

// defaultDevDataDir is where dev keeps its control plane between runs.
func defaultDevDataDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "portico", "dev")
	}
	return filepath.Join(os.TempDir(), "portico-dev")
}

func printDevControl(w io.Writer, c *devEnv, keyID string) {
	fmt.Fprintf(w, `
The control plane (admin API %[1]s; SQLite and the platform token in %[2]s).
The node above takes its routes from it: change them with porticoctl and they apply at once.
  export PORTICO_SERVER=%[1]s PORTICO_TOKEN=$(cat %[3]s)
  go run ./cmd/porticoctl versions
  go run ./cmd/porticoctl nodes
  go run ./cmd/porticoctl route put --team demo -f ROUTE.yaml # see README.md and docs/configuration.md
The key service shares its address; keys and revocations reach the node through the fast lane:
  go run ./cmd/porticoctl keys create --app app-demo --tenant tenant-demo --plan demo --scope inventory:read --env test
  go run ./cmd/porticoctl keys list --app app-demo
  go run ./cmd/porticoctl keys revoke %[4]s --reason 'leaked'     # the demo key: the next call with it is a 401
The quota service shares it too: every call is counted in the node's usage windows, delivered in process:
  go run ./cmd/porticoctl usage get key:%[4]s
  go run ./cmd/porticoctl usage list
`, c.url, c.dataDir, c.tokenFile, keyID)
}

// devSnapshot routes the demo backends: the gRPC orders service (with
// reflection and health public, so grpcurl can discover it through the
// gateway) and the REST inventory service, both behind the demo
// credentials.
func devSnapshot(b *demo.Servers, ident *devIdentity) *configv1.Snapshot {
	grpcRoute := func(id, service string, auth *configv1.RouteAuth) *configv1.Route {
		return &configv1.Route{
			Id: id, Team: "demo", Methods: []string{"POST"},
			Path: "/" + service + "/*", Cluster: "orders",
			Timeout: durationpb.New(30 * time.Second),
			Auth:    auth,
		}
	}
	public := &configv1.RouteAuth{Public: true, Reviewer: "portico-dev"}
	const orders = "/portico.demo.v1.OrdersService/"
	ordersAuth := &configv1.RouteAuth{
		Product: "orders-api",
		Scopes:  []string{"orders:write"},
		MethodScopes: []*configv1.MethodScopes{
			{Method: orders + "GetOrder", Scopes: []string{"orders:read"}},
			{Method: orders + "ListOrders", Scopes: []string{"orders:read"}},
			{Method: orders + "WatchOrders", Scopes: []string{"orders:read"}},
		},
	}
	// The orders service is served from its descriptor: gRPC, gRPC-Web,
	// Connect and REST (its google.api.http bindings), validated at the edge.
	ordersDesc, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(demov1.File_portico_demo_v1_orders_proto),
	}})
	if err != nil {
		panic(err) // a linked-in descriptor always encodes
	}
	inventoryAuth := &configv1.RouteAuth{
		Product:  "inventory-api",
		Scopes:   []string{"inventory:write"},
		QueryKey: "api_key",
		MethodScopes: []*configv1.MethodScopes{
			{Method: "GET", Scopes: []string{"inventory:read"}},
			{Method: "HEAD", Scopes: []string{"inventory:read"}},
		},
	}
	cfg := &configv1.Snapshot{
		Version: "dev",
		Clusters: []*configv1.Cluster{
			{
				Name: "orders", Protocol: configv1.Protocol_PROTOCOL_GRPC,
				Endpoints: []*configv1.Endpoint{{Address: b.OrdersAddr()}},
				HealthCheck: &configv1.HealthCheck{
					Probe: &configv1.HealthCheck_Grpc{Grpc: &configv1.GRPCProbe{}},
				},
			},
			{
				Name: "inventory", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
				Endpoints: []*configv1.Endpoint{{Address: b.InventoryAddr()}},
				HealthCheck: &configv1.HealthCheck{
					Probe: &configv1.HealthCheck_Http{Http: &configv1.HTTPProbe{Path: "/healthz"}},
				},
			},
		},
		Services: []*configv1.Service{{
			Id: "orders", Team: "demo", Name: "portico.demo.v1.OrdersService", Cluster: "orders",
			Timeout: durationpb.New(30 * time.Second), Auth: ordersAuth,
			Descriptors: &configv1.Descriptors{Source: &configv1.Descriptors_FileDescriptorSet{FileDescriptorSet: ordersDesc}},
		}},
		Routes: []*configv1.Route{
			grpcRoute("orders-reflection", "grpc.reflection.v1.ServerReflection", public),
			grpcRoute("orders-reflection-v1alpha", "grpc.reflection.v1alpha.ServerReflection", public),
			grpcRoute("orders-health", "grpc.health.v1.Health", public),
			{Id: "inventory", Team: "demo", Path: "/inventory/v1/{rest=**}", Cluster: "inventory", Auth: inventoryAuth},
		},
	}
	ident.addTo(cfg)
	return cfg
}

func printDevBanner(w io.Writer, addr, tlsAddr, caFile string, ident *devIdentity) {
	tlsPort := tlsAddr
	if i := strings.LastIndexByte(tlsAddr, ':'); i >= 0 {
		tlsPort = tlsAddr[i+1:]
	}
	fmt.Fprintf(w, `
Portico dev is running: one gateway node in front of two demo backends.

  http://%[1]s     HTTP/1.1 and h2c (gRPC)
  https://localhost:%[2]s  HTTP/2 and HTTP/1.1 over TLS; self-signed CA in %[3]s

Demo credentials (made up at start):
  API key %[10]s (issued by the key service at start; app %[5]s, plan %[6]s; scopes inventory:read orders:read orders:write):
    %[4]s
  Access token from the demo issuer (user-42; scopes inventory:read inventory:write orders:read; it lives 15 minutes, a restart mints another):
    %[7]s
For the calls in README.md, in your shell:
  export KEY=%[4]s KEY_ID=%[10]s TOKEN=%[7]s

REST (the inventory service) with the API key:
  curl -i -H "x-api-key: $KEY" http://%[1]s/inventory/v1/items
  curl -i -H "Authorization: Bearer $KEY" http://%[1]s/inventory/v1/items/WIDGET-1
  curl -i "http://%[1]s/inventory/v1/items?api_key=$KEY"
  curl -i --cacert %[3]s -H "x-api-key: $KEY" https://localhost:%[2]s/inventory/v1/headers
with the access token:
  curl -i -H "Authorization: Bearer $TOKEN" -X POST http://%[1]s/inventory/v1/items -H 'content-type: application/json' -d '{"sku":"SPROCKET-4","name":"Sprocket","quantity":5,"price_cents":250}'
refused:
  curl -i -H "x-api-key: $KEY" -X POST http://%[1]s/inventory/v1/items -H 'content-type: application/json' -d '{"sku":"NUT-5","name":"Nut","quantity":1,"price_cents":5}'   # 403 insufficient_scope (the key lacks inventory:write)
  curl -i http://%[1]s/inventory/v1/items            # 401 unauthenticated
  curl -i http://%[1]s/nowhere                       # 404 no_route
rate limited (plan %[6]s: %[8]d/s per caller, burst %[9]d; 429 rate_limited after the burst):
  for i in $(seq 60); do curl -s -o /dev/null -w '%%{http_code} ' -H "x-api-key: $KEY" http://%[1]s/inventory/v1/items; done; echo

The orders service, a gRPC service served from its descriptor to every protocol:
REST (its google.api.http bindings):
  curl -i -H "x-api-key: $KEY" http://%[1]s/v1/orders/o-1001
  curl -i -H "x-api-key: $KEY" 'http://%[1]s/v1/customers/c-42/orders?statuses=ORDER_STATUS_PAID&filter.minTotalCents=100'
  curl -N -H "x-api-key: $KEY" 'http://%[1]s/v1/customers/c-42/orders:watch?maxEvents=3'          # NDJSON stream
  curl -i -H "x-api-key: $KEY" http://%[1]s/v1/orders/bad-id                 # 400, refused at the edge by its buf.validate rules
Connect:
  curl -i -H "x-api-key: $KEY" -H 'content-type: application/json' -d '{"order_id":"o-1001"}' http://%[1]s/portico.demo.v1.OrdersService/GetOrder
gRPC (buf curl, pinned in tools/go.mod; grpcurl works too), through the gateway's public reflection:
  go tool -modfile=tools/go.mod buf curl --protocol grpc --http2-prior-knowledge --list-methods http://%[1]s
  go tool -modfile=tools/go.mod buf curl --protocol grpc --http2-prior-knowledge -H "x-api-key: $KEY" -d '{"order_id":"o-1001"}' http://%[1]s/portico.demo.v1.OrdersService/GetOrder
  go tool -modfile=tools/go.mod buf curl --protocol grpc --http2-prior-knowledge -H "x-api-key: $KEY" -d '{"customer_id":"c-42","max_events":3}' http://%[1]s/portico.demo.v1.OrdersService/WatchOrders
  go tool -modfile=tools/go.mod buf curl --protocol grpc --cacert %[3]s -H "authorization: Bearer $TOKEN" -d '{"order_id":"o-1001"}' https://localhost:%[2]s/portico.demo.v1.OrdersService/GetOrder

Ctrl-C drains in-flight requests and stops.
`, addr, tlsPort, filepath.Clean(caFile), ident.Key, devApp, devPlan, ident.Token, devRate, devBurst, ident.KeyID)
}
