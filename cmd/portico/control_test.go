package main_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/testing/admintest"
)

// TestControlRole runs `portico control` and a `portico gateway -control`
// node as processes: a route put through the admin API is served by the
// node; with the control plane stopped, the node restarted serves it from
// its cached snapshot.
func TestControlRole(t *testing.T) {
	dir := t.TempDir()
	const token = "ptk_control-role-test-platform-token-0123456789"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodeTokenFile := filepath.Join(dir, "node-token")
	if err := os.WriteFile(nodeTokenFile, []byte("control-role-test-node-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "orders "+r.URL.Path) }))
	t.Cleanup(backend.Close)

	controlAddr := freeAddr(t)
	cp := start(t, "control", "-listen", controlAddr, "-store", "sqlite:"+filepath.Join(dir, "control.db"), "-bootstrap-token-file", tokenFile,
		"-node-token-file", nodeTokenFile)
	cp.waitLine(t, regexp.MustCompile(`control plane listening`))

	gwAddr := freeAddr(t)
	cache := filepath.Join(dir, "snapshot.binpb")
	gwArgs := []string{"gateway", "-control", "http://" + controlAddr, "-control-token-file", nodeTokenFile, "-listen", "public=" + gwAddr,
		"-snapshot-cache", cache, "-node-id", "node-1", "-log-level", "debug"}
	gw := start(t, gwArgs...)
	gw.waitLine(t, regexp.MustCompile(`msg=listening pool=public`))

	ctx := context.Background()
	admin := admintest.Client("http://"+controlAddr, token)
	for _, call := range []func() error{
		func() error {
			_, err := admin.PutPlatform(ctx, connect.NewRequest(&adminv1.PutPlatformRequest{Platform: &adminv1.Platform{
				RateLimiting: &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Disabled: true}}}}))
			return err
		},
		func() error {
			_, err := admin.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Team: &adminv1.Team{
				Name: "orders", Owns: []*adminv1.Ownership{{PathPrefix: "/v1/orders"}}}}))
			return err
		},
		func() error {
			_, err := admin.PutCluster(ctx, connect.NewRequest(&adminv1.PutClusterRequest{Team: "orders", Cluster: &configv1.Cluster{
				Name: "orders", Protocol: configv1.Protocol_PROTOCOL_HTTP1, Endpoints: []*configv1.Endpoint{{Address: strings.TrimPrefix(backend.URL, "http://")}}}}))
			return err
		},
		func() error {
			_, err := admin.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: "orders", Route: &configv1.Route{
				Id: "orders.all", Path: "/v1/orders/**", Cluster: "orders", Auth: &configv1.RouteAuth{Public: true, Reviewer: "security"}}}))
			return err
		},
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	waitServed := func(what string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			code, body := get(t, "http://"+gwAddr+"/v1/orders/42")
			if code == 200 && body == "orders /v1/orders/42" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: GET = %d %q", what, code, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitServed("the route put through the admin API")

	// The control plane goes; the node, restarted, serves its cache.
	_ = cp.cmd.Process.Kill()
	_ = gw.cmd.Process.Kill()
	gw2 := start(t, gwArgs...)
	gw2.waitLine(t, regexp.MustCompile(`serving the cached snapshot`))
	waitServed("the restarted node without a control plane")
}
