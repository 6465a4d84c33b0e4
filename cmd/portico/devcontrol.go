package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/control"
	"github.com/portico-gw/portico/control/admin"
	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/gateway"
	gwdist "github.com/portico-gw/portico/gateway/distribution"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// devControl is the control plane of `portico dev`: SQLite under the data
// directory, the admin API on addr, and the dev node fed over the stream.
type devControl struct {
	url       string
	tokenFile string
	nodeToken string
	dataDir   string
	plane     *control.Plane
	store     *store.Store
}

// startDevControl starts the control plane and serves it on addr until
// ctx ends.
func startDevControl(ctx context.Context, addr, dataDir string, log *slog.Logger) (*devControl, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("dev: -data-dir: %w", err)
	}
	tokenFile := filepath.Join(dataDir, "platform-token")
	token, err := devPlatformToken(tokenFile)
	if err != nil {
		return nil, err
	}
	// The dev node authenticates to the control plane like any node.
	nodeToken, err := devPlatformToken(filepath.Join(dataDir, "node-token"))
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(dataDir, "control.db"))
	if err != nil {
		return nil, fmt.Errorf("dev: %w", err)
	}
	// Dev sends each version to its one node at once: no stages to wait for.
	plane, err := control.New(ctx, control.Options{Store: st, BootstrapToken: token, NodeToken: nodeToken, Logger: log})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		plane.Close()
		_ = st.Close()
		return nil, fmt.Errorf("dev: the control plane: %w (choose another port with -control-addr)", err)
	}
	go func() {
		if err := serveControl(ctx, ln, plane.Handler, "", ""); err != nil {
			log.Error("dev control plane stopped", "err", err)
		}
	}()
	return &devControl{url: "http://" + ln.Addr().String(), tokenFile: tokenFile, nodeToken: nodeToken, dataDir: dataDir, plane: plane, store: st}, nil
}

// devPlatformToken reads a dev token (the platform's, the node's), or
// makes one: kept in the data directory (mode 0600), never printed.
func devPlatformToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("dev: %w", err)
	}
	token, _, err := admin.NewToken()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("dev: %w", err)
	}
	return token, nil
}

func (c *devControl) close() {
	c.plane.Close()
	_ = c.store.Close()
}

// seed puts the demo config through the admin API, as a platform admin
// and the demo team would: the catalog, the team and what it owns, and
// its routes, clusters and services (the backends' addresses change from
// run to run). It returns the version the node must run.
func (c *devControl) seed(ctx context.Context, demo *configv1.Snapshot) (int64, error) {
	token, err := devPlatformToken(c.tokenFile)
	if err != nil {
		return 0, err
	}
	api := adminv1connect.NewAdminServiceClient(&http.Client{Transport: bearerTransport{token}, Timeout: 30 * time.Second}, c.url)
	var owns []*adminv1.Ownership
	for _, p := range []string{"/inventory", "/v1/orders", "/v1/customers", "/portico.demo.v1.OrdersService",
		"/grpc.reflection.v1.ServerReflection", "/grpc.reflection.v1alpha.ServerReflection", "/grpc.health.v1.Health"} {
		owns = append(owns, &adminv1.Ownership{PathPrefix: p})
	}
	steps := []func() (*adminv1.Change, error){
		func() (*adminv1.Change, error) {
			r, err := api.PutPlatform(ctx, connect.NewRequest(&adminv1.PutPlatformRequest{Message: "portico dev: the demo catalog",
				Platform: &adminv1.Platform{Products: demo.GetProducts(), Plans: demo.GetPlans(), Scopes: demo.GetScopes(), RateLimiting: demo.GetRateLimiting()}}))
			if err != nil {
				return nil, err
			}
			return r.Msg.GetChange(), nil
		},
		func() (*adminv1.Change, error) {
			r, err := api.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Message: "portico dev: the demo team",
				Team: &adminv1.Team{Name: "demo", Owns: owns, Description: "the demo backends"}}))
			if err != nil {
				return nil, err
			}
			return r.Msg.GetChange(), nil
		},
		func() (*adminv1.Change, error) {
			r, err := api.ApplyTeam(ctx, connect.NewRequest(&adminv1.ApplyTeamRequest{Message: "portico dev: the demo backends",
				Config: &adminv1.TeamConfig{Team: "demo", Routes: demo.GetRoutes(), Clusters: demo.GetClusters(), Services: demo.GetServices()}}))
			if err != nil {
				return nil, err
			}
			return r.Msg.GetChange(), nil
		},
	}
	var last int64
	for _, step := range steps {
		ch, err := step()
		if err != nil {
			return 0, fmt.Errorf("dev: seeding the control plane: %w", err)
		}
		last = ch.GetVersion().GetNumber()
	}
	return last, nil
}

// follow feeds node from the control plane, adding the demo credentials
// to every snapshot (the key service, not the control plane, will hold
// keys; until it does, they live in this process), and waits until the
// node runs version.
func (c *devControl) follow(ctx context.Context, node *gateway.Node, ident *devIdentity, version int64, log *slog.Logger) error {
	client := gwdist.New(gwdist.Options{
		URL: c.url, HTTPClient: streamClient(c.url), Token: c.nodeToken,
		NodeID: "dev", Pool: "public", Region: "dev", Logger: log, Stats: node.RouteStats,
		Apply: func(cfg *configv1.Snapshot) error {
			cfg = proto.CloneOf(cfg)
			cfg.Sha256 = "" // it no longer is the control plane's snapshot
			ident.addCredentials(cfg)
			return node.Apply(cfg)
		},
	})
	go func() { _ = client.Run(ctx) }()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.plane.Distribution.Wait(wctx, func(s distribution.Status) bool {
		return len(s.Nodes) == 1 && s.Nodes[0].Version >= version
	})
}

// bearerTransport sends an admin token with every call.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
