package main_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
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
				Name: "orders", Owns: []*adminv1.Ownership{{PathPrefix: "/v1/orders"}}, Upstreams: loopback}}))
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
	// The node caches a snapshot before it acknowledges it, and may serve
	// it a moment before: wait for the ACK, or the kill below can come
	// between the two and the restart serve the version before.
	deadline := time.Now().Add(15 * time.Second)
	for {
		vs, err := admin.ListVersions(ctx, connect.NewRequest(&adminv1.ListVersionsRequest{Limit: 1}))
		if err != nil {
			t.Fatal(err)
		}
		ro, err := admin.GetRollout(ctx, connect.NewRequest(&adminv1.GetRolloutRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if n := ro.Msg.GetNodes(); len(n) == 1 && n[0].GetVersion() == vs.Msg.GetVersions()[0].GetNumber() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-1 never acknowledged the newest version: %v", ro.Msg.GetNodes())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The control plane goes; the node, restarted, serves its cache.
	_ = cp.cmd.Process.Kill()
	_ = gw.cmd.Process.Kill()
	gw2 := start(t, gwArgs...)
	gw2.waitLine(t, regexp.MustCompile(`serving the cached snapshot`))
	waitServed("the restarted node without a control plane")
}

// TestControlRoleNeedsPublisherToken: a control plane reachable beyond
// loopback refuses to start without a publisher token, which is what
// keeps anyone from putting API keys on every node; `portico keys`
// refuses to start without a caller token.
func TestControlRoleNeedsPublisherToken(t *testing.T) {
	bin := portico(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "control", "-listen", ":0", "-store", "sqlite:"+filepath.Join(dir, "c.db")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-publisher-token-file is required") {
		t.Errorf("portico control -listen :0 without a publisher token: %v, output %q; want a refusal", err, out)
	}
	out, err = exec.CommandContext(ctx, bin, "keys", "-listen", "127.0.0.1:0", "-store", "sqlite:"+filepath.Join(dir, "k.db")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-token-file is required") {
		t.Errorf("portico keys without a token: %v, output %q; want a refusal", err, out)
	}
}

// TestKeysRole runs a control plane, a key service and a node as
// processes: a new key works at once; a revocation reaches the node
// through the fast lane, and with the control plane gone through the
// signed snapshot; a node restarted with neither control plane nor key
// service still knows which keys work, from its caches.
func TestKeysRole(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const token = "ptk_keys-role-test-platform-token-0123456789"
	tokenFile := write("token", token)
	nodeTokenFile := write("node-token", "keys-role-test-node-token-0123456789")
	pubTokenFile := write("publisher-token", "keys-role-test-publisher-token-0123456789")
	const keysToken = "keys-role-test-keys-platform-token-0123456789"
	keysTokenFile := write("keys-token", keysToken)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "orders "+r.URL.Path) }))
	t.Cleanup(backend.Close)

	controlAddr, keysAddr, gwAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	cp := start(t, "control", "-listen", controlAddr, "-store", "sqlite:"+filepath.Join(dir, "control.db"), "-bootstrap-token-file", tokenFile,
		"-node-token-file", nodeTokenFile, "-publisher-token-file", pubTokenFile)
	cp.waitLine(t, regexp.MustCompile(`control plane listening`))
	signing := filepath.Join(dir, "signing.pem")
	ks := start(t, "keys", "-listen", keysAddr, "-store", "sqlite:"+filepath.Join(dir, "keys.db"), "-control", "http://"+controlAddr,
		"-control-token-file", pubTokenFile, "-token-file", keysTokenFile, "-signing-key-file", signing)
	ks.waitLine(t, regexp.MustCompile(`key service listening`))
	gwArgs := []string{"gateway", "-control", "http://" + controlAddr, "-control-token-file", nodeTokenFile, "-listen", "public=" + gwAddr,
		"-snapshot-cache", filepath.Join(dir, "snapshot.binpb"), "-node-id", "node-1",
		"-keys-snapshot", "http://" + keysAddr + "/v1/key-snapshot", "-keys-public-key", filepath.Join(dir, "signing.pub.pem"),
		"-keys-snapshot-cache", filepath.Join(dir, "keys.binpb"), "-keys-poll-interval", "300ms"}
	gw := start(t, gwArgs...)
	gw.waitLine(t, regexp.MustCompile(`msg=listening pool=public`))

	ctx := context.Background()
	admin := admintest.Client("http://"+controlAddr, token)
	if _, err := admin.PutPlatform(ctx, connect.NewRequest(&adminv1.PutPlatformRequest{Platform: &adminv1.Platform{
		RateLimiting: &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Disabled: true}}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Team: &adminv1.Team{
		Name: "orders", Owns: []*adminv1.Ownership{{PathPrefix: "/v1/orders"}}, Upstreams: loopback}})); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ApplyTeam(ctx, connect.NewRequest(&adminv1.ApplyTeamRequest{Config: &adminv1.TeamConfig{Team: "orders",
		Clusters: []*configv1.Cluster{{Name: "orders", Protocol: configv1.Protocol_PROTOCOL_HTTP1,
			Endpoints: []*configv1.Endpoint{{Address: strings.TrimPrefix(backend.URL, "http://")}}}},
		Routes: []*configv1.Route{{Id: "orders.keyed", Path: "/v1/orders/**", Cluster: "orders", Auth: &configv1.RouteAuth{}}}}})); err != nil {
		t.Fatal(err)
	}
	call := func(key string) int {
		req, _ := http.NewRequest("GET", "http://"+gwAddr+"/v1/orders/42", nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	waitStatus := func(what, key string, want int) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			got := call(key)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d, want %d", what, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	keys := keysv1connect.NewKeyServiceClient(admintest.HTTPClient(keysToken), "http://"+keysAddr)
	create := func() *keysv1.CreateKeyResponse {
		t.Helper()
		resp, err := keys.CreateKey(ctx, connect.NewRequest(&keysv1.CreateKeyRequest{AppId: "app-1", TenantId: "t-1", Plan: "gold",
			Env: keysv1.Environment_ENVIRONMENT_LIVE}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}
	// The route must be on the node before a key's first call is judged.
	first := create()
	waitStatus("the keyed route on the node", first.GetRawKey(), 200)
	second := create()
	if got := call(second.GetRawKey()); got != 200 {
		t.Errorf("the first call with a new key: %d, want 200", got)
	}
	if _, err := keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: first.GetKey().GetKeyId()})); err != nil {
		t.Fatal(err)
	}
	waitStatus("a key revoked through the fast lane", first.GetRawKey(), 401)

	third := create()

	// The control plane goes: the signed snapshot carries the revocation.
	_ = cp.cmd.Process.Kill()
	cpErr := <-cp.done
	cp.done <- cpErr // for the cleanup
	if _, err := keys.CreateKey(ctx, connect.NewRequest(&keysv1.CreateKeyRequest{AppId: "app-1", TenantId: "t-1", Plan: "gold",
		Env: keysv1.Environment_ENVIRONMENT_LIVE})); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("CreateKey with the control plane gone: %v, want Unavailable (no node can confirm the key)", err)
	}
	rv, err := keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: second.GetKey().GetKeyId()}))
	if err != nil {
		t.Fatal(err)
	}
	waitStatus("a key revoked with the control plane gone", second.GetRawKey(), 401)
	// The node has polled (and cached) the snapshot with the revocation.
	for {
		m := gw.waitLine(t, regexp.MustCompile(`signed key snapshot applied" seq=(\d+)`))
		if seq, _ := strconv.ParseUint(m[1], 10, 64); seq >= rv.Msg.GetKey().GetRev() {
			break
		}
	}

	// Nothing answers any more: a restarted node runs its caches.
	_ = ks.cmd.Process.Kill()
	_ = gw.cmd.Process.Kill()
	gw2 := start(t, gwArgs...)
	gw2.waitLine(t, regexp.MustCompile(`cached key snapshot applied`))
	gw2.waitLine(t, regexp.MustCompile(`msg=listening pool=public`))
	waitStatus("an active key on a node restarted with nothing to ask", third.GetRawKey(), 200)
	if got := call(second.GetRawKey()); got != 401 {
		t.Errorf("a revoked key on a node restarted with nothing to ask: %d, want 401", got)
	}
}

// loopback is the upstreams of a team whose backends the test starts on
// 127.0.0.1.
var loopback = []*adminv1.Upstream{{Address: &adminv1.Upstream_Cidr{Cidr: "127.0.0.1/32"}}}
