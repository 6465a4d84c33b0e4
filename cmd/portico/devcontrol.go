package main

import (
	"context"
	"crypto/ed25519"
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

	"github.com/portico-gw/portico/control"
	"github.com/portico-gw/portico/control/admin"
	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/gateway"
	gwdist "github.com/portico-gw/portico/gateway/distribution"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/keysvc"
	keystore "github.com/portico-gw/portico/keysvc/store"
)

// devControl is the control plane of `portico dev`: SQLite under the data
// directory, the admin API on addr, and the dev node fed over the stream.
type devControl struct {
	url       string
	tokenFile string
	// token is the platform token (kept in tokenFile).
	token     string
	nodeToken string
	// publisherToken is what the key service publishes with.
	publisherToken string
	// snapshotToken is what the node fetches the signed key snapshot
	// with.
	snapshotToken string
	dataDir       string
	plane         *control.Plane
	store         *store.Store
	// keys is the key service, served on the same address; keysStore
	// its SQLite store and signer the public key of its snapshots.
	keys      *keysvc.Service
	keysStore *keystore.Store
	signer    ed25519.PublicKey
}

// startDevControl starts the control plane and serves it on addr until
// ctx ends. With githubKeysFile, its key service takes GitHub's secret
// scanning reports, verified with that file's keys: dev reaches no
// network.
func startDevControl(ctx context.Context, addr, dataDir, githubKeysFile string, log *slog.Logger) (*devControl, error) {
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
	// And the key service publishes with a token, like in production.
	publisherToken, err := devPlatformToken(filepath.Join(dataDir, "publisher-token"))
	if err != nil {
		return nil, err
	}
	// The signed key snapshot (every key's hash and metadata) is served
	// only to holders of a token, like in production.
	snapshotToken, err := devPlatformToken(filepath.Join(dataDir, "snapshot-token"))
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(dataDir, "control.db"))
	if err != nil {
		return nil, fmt.Errorf("dev: %w", err)
	}
	// Dev sends each version to its one node at once: no stages to wait for.
	plane, err := control.New(ctx, control.Options{Store: st, BootstrapToken: token, NodeToken: nodeToken, PublisherToken: publisherToken, Logger: log})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	c := &devControl{tokenFile: tokenFile, token: token, nodeToken: nodeToken, publisherToken: publisherToken, snapshotToken: snapshotToken,
		dataDir: dataDir, plane: plane, store: st}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("dev: the control plane: %w (choose another port with -control-addr)", err)
	}
	c.url = "http://" + ln.Addr().String()
	if err := c.startKeys(ctx, token, githubKeysFile, log); err != nil {
		_ = ln.Close()
		c.close()
		return nil, err
	}
	// The key service shares the control plane's address: its paths
	// (/portico.keys.v1.*, /v1/key-snapshot, /v1/leaked-keys,
	// /v1/leaked-keys/github) are its own.
	mux := http.NewServeMux()
	mux.Handle("/", plane.Handler)
	keysHandler := c.keys.Handler()
	for _, p := range []string{"/portico.keys.v1.KeyService/", "/portico.keys.v1.TokenService/", keysvc.SnapshotPath, keysvc.LeakPath, keysvc.GitHubLeakPath} {
		mux.Handle(p, keysHandler)
	}
	go func() {
		if err := serveControl(ctx, ln, mux, "", ""); err != nil {
			log.Error("dev control plane stopped", "err", err)
		}
	}()
	return c, nil
}

// startKeys starts the dev key service: SQLite and a signing key under
// the data directory, the platform token, publishing to the dev control
// plane; GitHub's reports with githubKeysFile only.
func (c *devControl) startKeys(ctx context.Context, token, githubKeysFile string, log *slog.Logger) error {
	signing, err := loadSigningKey(filepath.Join(c.dataDir, "keys-signing.pem"), log)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	c.signer = signing.Public().(ed25519.PublicKey)
	ks, err := keystore.Open(ctx, "sqlite:"+filepath.Join(c.dataDir, "keys.db"))
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	c.keysStore = ks
	opts := keysvc.Options{
		Store: ks, ControlURL: c.url, ControlToken: c.publisherToken, HTTPClient: streamClient(c.url), SigningKey: signing, Logger: log,
		Tokens:            []keysvc.Token{{Name: "platform", Role: keysvc.RolePlatform, SHA256: svcauth.Hash(token)}},
		SnapshotTokenHash: svcauth.Hash(c.snapshotToken),
	}
	if githubKeysFile != "" {
		opts.GitHub = &keysvc.GitHubOptions{KeysFile: githubKeysFile}
	}
	c.keys, err = keysvc.New(opts)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	go c.keys.Run(ctx)
	return nil
}

// demoKey issues the demo API key through the key service, once the node
// is connected (CreateKey answers when every node has it), and revokes
// the one the last dev run issued (its id is kept in the data
// directory). Keys a user made, for the demo app or any other, stay: a
// restart of dev is not a revocation. It returns the raw key and its id.
func (c *devControl) demoKey(ctx context.Context) (raw, id string, err error) {
	api := keysv1connect.NewKeyServiceClient(&http.Client{Transport: svcauth.Transport(c.token, nil), Timeout: 30 * time.Second}, c.url)
	idFile := filepath.Join(c.dataDir, "demo-key-id")
	if b, err := os.ReadFile(idFile); err == nil {
		last := strings.TrimSpace(string(b))
		_, err := api.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: last, Reason: "replaced by a new portico dev run"}))
		if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
			return "", "", fmt.Errorf("dev: revoking the last run's demo key %s: %w", last, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("dev: %w", err)
	}
	resp, err := api.CreateKey(ctx, connect.NewRequest(&keysv1.CreateKeyRequest{
		AppId: devApp, TenantId: devTenant, Plan: devPlan, Scopes: devScopes,
		Env: keysv1.Environment_ENVIRONMENT_TEST, Priority: configv1.Priority_PRIORITY_PAID,
	}))
	if err != nil {
		return "", "", fmt.Errorf("dev: issuing the demo key: %w", err)
	}
	id = resp.Msg.GetKey().GetKeyId()
	if err := os.WriteFile(idFile, []byte(id+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("dev: %w", err)
	}
	return resp.Msg.GetRawKey(), id, nil
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
	if c.keysStore != nil {
		_ = c.keysStore.Close()
	}
}

// seed puts the demo config through the admin API, as a platform admin
// and the demo team would: the catalog, the team and what it owns, and
// its routes, clusters and services (the backends' addresses change from
// run to run). It returns the version the node must run.
func (c *devControl) seed(ctx context.Context, demo *configv1.Snapshot) (int64, error) {
	token := c.token
	api := adminv1connect.NewAdminServiceClient(&http.Client{Transport: svcauth.Transport(token, nil), Timeout: 30 * time.Second}, c.url)
	var owns []*adminv1.Ownership
	for _, p := range []string{"/inventory", "/v1/orders", "/v1/customers", "/portico.demo.v1.OrdersService",
		"/grpc.reflection.v1.ServerReflection", "/grpc.reflection.v1alpha.ServerReflection", "/grpc.health.v1.Health"} {
		owns = append(owns, &adminv1.Ownership{PathPrefix: p})
	}
	steps := []func() (*adminv1.Change, error){
		func() (*adminv1.Change, error) {
			r, err := api.PutPlatform(ctx, connect.NewRequest(&adminv1.PutPlatformRequest{Message: "portico dev: the demo catalog",
				Platform: &adminv1.Platform{Products: demo.GetProducts(), Plans: demo.GetPlans(), Scopes: demo.GetScopes(),
					Issuers: demo.GetIssuers(), RateLimiting: demo.GetRateLimiting()}}))
			if err != nil {
				return nil, err
			}
			return r.Msg.GetChange(), nil
		},
		func() (*adminv1.Change, error) {
			r, err := api.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Message: "portico dev: the demo team",
				Team: &adminv1.Team{Name: "demo", Owns: owns, Description: "the demo backends",
					// The demo backends listen on loopback, on ports that
					// change from run to run.
					Upstreams: []*adminv1.Upstream{{Address: &adminv1.Upstream_Cidr{Cidr: "127.0.0.1/32"}}}}}))
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

// follow feeds node from the control plane (snapshots and the fast
// lane) and from the key service's signed snapshot; it waits until the
// node runs version. The node runs the control plane's snapshots as they
// come, the demo issuer included (seed puts it on the platform), so what
// it logs is what porticoctl versions shows.
func (c *devControl) follow(ctx context.Context, node *gateway.Node, version int64, log *slog.Logger) error {
	client := gwdist.New(gwdist.Options{
		URL: c.url, HTTPClient: streamClient(c.url), Token: c.nodeToken,
		NodeID: "dev", Pool: "public", Region: "dev", Logger: log, Stats: node.RouteStats, Lane: node.FastLane(), Node: node,
		Apply: node.Apply,
	})
	go func() { _ = client.Run(ctx) }()
	poller, err := gwdist.NewPoller(gwdist.PollerOptions{URL: c.url + keysvc.SnapshotPath, Trusted: []ed25519.PublicKey{c.signer},
		HTTPClient: &http.Client{Transport: svcauth.Transport(c.snapshotToken, nil), Timeout: 30 * time.Second}, Lane: node.FastLane(), Logger: log})
	if err != nil {
		return err
	}
	// The key service is in this process: a poll that fails is a fault
	// of dev's, shown at start rather than as a warning a minute later.
	if err := poller.Poll(ctx); err != nil {
		return fmt.Errorf("polling the signed key snapshot: %w", err)
	}
	go poller.Run(ctx)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = c.plane.Distribution.Wait(wctx, func(s distribution.Status) bool {
		return len(s.Nodes) == 1 && s.Nodes[0].Version >= version
	})
	if err != nil {
		return fmt.Errorf("the node did not get version %d from the control plane: %w", version, err)
	}
	// The demo key is issued next, to the nodes on the fast lane: the
	// node must be one of them.
	if err := c.plane.Distribution.WaitLane(wctx, func(nodes []*distributionv1.NodeFastLane) bool { return len(nodes) == 1 }); err != nil {
		return fmt.Errorf("the node did not join the fast lane: %w", err)
	}
	return nil
}
