package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control"
	"github.com/portico-gw/portico/control/admin"
	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/gateway/keysnapshot"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/keysvc"
	"github.com/portico-gw/portico/quota"
)

// devEnv is what `portico dev`'s services share: the data directory and
// the tokens and signing key kept in it, and the control plane's URL.
type devEnv struct {
	url       string
	dataDir   string
	tokenFile string
	// token is the platform token (kept in tokenFile).
	token     string
	nodeToken string
	// publisherToken is what the key service publishes with.
	publisherToken string
	// snapshotToken is what the node fetches the signed key snapshot
	// with.
	snapshotToken string
	// signing signs the key service's snapshots; signer is its public
	// key, which the node trusts.
	signing ed25519.PrivateKey
	signer  ed25519.PublicKey
}

// newDevEnv reads dev's tokens and signing key from dataDir, or makes
// them there. Every service authenticates its callers as in production.
func newDevEnv(dataDir string, log *slog.Logger) (*devEnv, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("dev: -data-dir: %w", err)
	}
	e := &devEnv{dataDir: dataDir, tokenFile: filepath.Join(dataDir, "platform-token")}
	for _, t := range []struct {
		file string
		into *string
	}{
		{"platform-token", &e.token},
		// The dev node authenticates to the control plane like any node.
		{"node-token", &e.nodeToken},
		// The key service publishes with a token, like in production.
		{"publisher-token", &e.publisherToken},
		// The signed key snapshot (every key's hash and metadata) is
		// served only to holders of a token, like in production.
		{"snapshot-token", &e.snapshotToken},
	} {
		var err error
		if *t.into, err = devPlatformToken(filepath.Join(dataDir, t.file)); err != nil {
			return nil, err
		}
	}
	signing, err := keysvc.LoadSigningKey(filepath.Join(dataDir, "keys-signing.pem"), log)
	if err != nil {
		return nil, fmt.Errorf("dev: %w", err)
	}
	e.signing, e.signer = signing, signing.Public().(ed25519.PublicKey)
	return e, nil
}

// quotaOptions are the dev quota service's: SQLite under the data
// directory, the platform token, no Kafka (the node delivers in process),
// usage marks published and the usage relay reached on the dev control
// plane.
func (e *devEnv) quotaOptions(log *slog.Logger) quota.Options {
	return quota.Options{
		StoreDSN:    "sqlite:" + filepath.Join(e.dataDir, "quota.db"),
		TokenHashes: []string{svcauth.Hash(e.token)},
		ControlURL:  e.url, ControlToken: e.publisherToken,
		Logger: log,
	}
}

// keysOptions are the dev key service's: SQLite under the data
// directory, the platform token, publishing to the dev control plane;
// GitHub's reports with githubKeysFile only (dev reaches no network).
func (e *devEnv) keysOptions(githubKeysFile string, log *slog.Logger) keysvc.Options {
	opts := keysvc.Options{
		StoreDSN: "sqlite:" + filepath.Join(e.dataDir, "keys.db"), ControlURL: e.url, ControlToken: e.publisherToken,
		SigningKey: e.signing, Logger: log,
		Tokens:            []keysvc.Token{{Name: "platform", Role: keysvc.RolePlatform, SHA256: svcauth.Hash(e.token)}},
		SnapshotTokenHash: svcauth.Hash(e.snapshotToken),
	}
	if githubKeysFile != "" {
		opts.GitHub = &keysvc.GitHubOptions{KeysFile: githubKeysFile}
	}
	return opts
}

// demoKey issues the demo API key through the key service, once the node
// is connected (CreateKey answers when every node has it), and revokes
// the one the last dev run issued (its id is kept in the data
// directory). Keys a user made, for the demo app or any other, stay: a
// restart of dev is not a revocation. It returns the raw key and its id.
func (c *devEnv) demoKey(ctx context.Context) (raw, id string, err error) {
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

// seed puts the demo config through the admin API, as a platform admin
// and the demo team would: the catalog, the team and what it owns, and
// its routes, clusters and services (the backends' addresses change from
// run to run). It returns the version the node must run.
func (c *devEnv) seed(ctx context.Context, demo *configv1.Snapshot) (int64, error) {
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

// checkKeySnapshot fetches the signed key snapshot as the node does,
// with the snapshot token, and checks that it verifies with the signer
// the node trusts.
func (c *devEnv) checkKeySnapshot(ctx context.Context) error {
	hc := &http.Client{Transport: svcauth.Transport(c.snapshotToken, nil), Timeout: 30 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+keysvc.SnapshotPath, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("fetching the signed key snapshot: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("fetching the signed key snapshot: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching the signed key snapshot: %s", resp.Status)
	}
	if _, err := keysnapshot.Verify(b, []ed25519.PublicKey{c.signer}); err != nil {
		return fmt.Errorf("the signed key snapshot: %w", err)
	}
	return nil
}

// waitDevNode waits until dev's node runs version and is on the fast
// lane, where the demo key goes next: CreateKey answers once every node
// on the lane has the key, so the node must be one of them.
func waitDevNode(ctx context.Context, p *control.Plane, version int64) error {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := p.Distribution.Wait(wctx, func(s distribution.Status) bool {
		return len(s.Nodes) == 1 && s.Nodes[0].Version >= version
	})
	if err != nil {
		return fmt.Errorf("the node did not get version %d from the control plane: %w", version, err)
	}
	if err := p.Distribution.WaitLane(wctx, func(nodes []*distributionv1.NodeFastLane) bool { return len(nodes) == 1 }); err != nil {
		return fmt.Errorf("the node did not join the fast lane: %w", err)
	}
	return nil
}
