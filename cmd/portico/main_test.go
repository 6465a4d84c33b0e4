package main_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/ghscan"
	"github.com/portico-gw/portico/testing/gobuild"
	"github.com/portico-gw/portico/testing/srcdeps"
)

// buildPortico builds the binary once per test run.
var buildPortico = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "portico-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "portico")
	out, err := gobuild.Command(context.Background(), ".", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// portico returns the built binary. It reads the module's sources first:
// the binary is built by a subprocess go test cannot watch, and a cached
// pass must not outlive a change to them.
func portico(t *testing.T) string {
	t.Helper()
	srcdeps.Touch(t, "../..", ".go", "go.mod", "go.sum")
	bin, err := buildPortico()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := buildPortico(); err == nil {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// process is a running portico with its output captured line by line.
type process struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
	log   strings.Builder
	mu    sync.Mutex
}

func start(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(portico(t), args...), lines: make(chan string, 1000), done: make(chan error, 1)}
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, pr) // a line too long for the scanner
	}()
	go func() { err := p.cmd.Wait(); pw.Close(); p.done <- err }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		<-scanned
		checkRaces(t, "portico "+strings.Join(args, " "), p.output())
		if t.Failed() {
			t.Logf("portico output:\n%s", p.output())
		}
	})
	return p
}

// checkRaces fails t if a binary built with the race detector
// (testing/gobuild) reported a data race in its output: most of the
// processes a test starts are killed at its end, so their exit status
// cannot say so.
func checkRaces(t *testing.T, what, output string) {
	t.Helper()
	if strings.Contains(output, "WARNING: DATA RACE") {
		t.Errorf("%s reported a data race", what)
	}
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitLine waits for an output line matching re and returns its submatches.
func (p *process) waitLine(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l := <-p.lines:
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case err := <-p.done:
			p.done <- err
			t.Fatalf("portico exited (%v) before printing %v", err, re)
		case <-deadline:
			t.Fatalf("portico did not print %v within 30s", re)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestGatewayRole(t *testing.T) {
	backend := func(name string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
		t.Cleanup(s.Close)
		return strings.TrimPrefix(s.URL, "http://")
	}
	a, b := backend("a"), backend("b")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "portico.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(cfgPath+".tmp", []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfgPath+".tmp", cfgPath); err != nil {
			t.Fatal(err)
		}
	}
	config := func(version, addr string) string {
		return fmt.Sprintf("version: %s\nclusters: [{name: c, protocol: PROTOCOL_HTTP1, endpoints: [{address: %q}]}]\nroutes: [{id: r, team: t, path: \"/{x=**}\", cluster: c, auth: {public: true, reviewer: tests}}]\n", version, addr)
	}
	write(config("one", a))

	addr := freeAddr(t)
	p := start(t, "gateway", "-config", cfgPath, "-listen", "public="+addr, "-log-level", "debug")
	p.waitLine(t, regexp.MustCompile(`msg=listening pool=public`))
	if code, body := get(t, "http://"+addr+"/x"); code != 200 || body != "a" {
		t.Fatalf("GET = %d %q, want 200 a", code, body)
	}

	// A bad file is refused and logged; the old snapshot keeps serving.
	write("routes: [{id: r, team: t, path: /x, cluster: missing}]\n")
	p.waitLine(t, regexp.MustCompile(`config rejected; keeping the current snapshot.*unknown cluster`))
	if code, body := get(t, "http://"+addr+"/x"); code != 200 || body != "a" {
		t.Fatalf("after a bad file: GET = %d %q, want 200 a", code, body)
	}

	// SIGHUP applies the file even when the poll has not seen it yet.
	write(config("two", b))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLine(t, regexp.MustCompile(`msg="snapshot applied" version=two`))
	if code, body := get(t, "http://"+addr+"/x"); code != 200 || body != "b" {
		t.Fatalf("after reload: GET = %d %q, want 200 b", code, body)
	}

	// SIGTERM drains and exits cleanly.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("exit after SIGTERM: %v, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("portico did not exit within 30s of SIGTERM")
	}
}

func TestGatewayRoleRejectsBadStart(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(cfgPath, []byte("routes: [{id: r, pathh: /x}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := portico(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "gateway", "-config", cfgPath, "-listen", "public="+freeAddr(t)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pathh") {
		t.Errorf("portico gateway with a bad config: %v, output %q; want a failure naming the bad field", err, out)
	}
}

// TestDevRole runs `portico dev` and makes the calls it prints; at the
// end, GitHub reports the demo key (dev verifies GitHub's reports with
// the keys of -github-keys-file) and the node refuses it.
func TestDevRole(t *testing.T) {
	addr, tlsAddr, ctlAddr, dataDir := freeAddr(t), freeAddr(t), freeAddr(t), t.TempDir()
	gh := ghscan.NewKey(t, "")
	ghFile := filepath.Join(t.TempDir(), "github-keys.json")
	if err := os.WriteFile(ghFile, ghscan.DocOf(t, gh), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, "dev", "-addr", addr, "-tls-addr", tlsAddr, "-control-addr", ctlAddr, "-data-dir", dataDir, "-github-keys-file", ghFile)
	p.waitLine(t, regexp.MustCompile(`Ctrl-C drains`))
	// The banner's last line: the pipe may hand over the banner in
	// pieces, and everything below reads all of it.
	p.waitLine(t, regexp.MustCompile(`porticoctl usage list`))
	out := p.output()
	for _, want := range []string{"curl -i http://" + addr + "/inventory/v1/items", "buf curl --protocol grpc --http2-prior-knowledge --list-methods http://" + addr,
		"portico.demo.v1.OrdersService/GetOrder", "403 insufficient_scope", "/v1/orders/o-1001"} {
		if !strings.Contains(out, want) {
			t.Errorf("dev banner lacks %q", want)
		}
	}
	key, keyID, tok := devCredentials(t, out)
	token := []string{"", tok}
	// The key's id is printed beside it, and in the revoke command, so
	// that the key can be revoked as printed.
	if !strings.Contains(out, "API key "+keyID+" (") || !strings.Contains(out, "keys revoke "+keyID+" ") {
		t.Errorf("dev banner does not name the demo key's id %s beside it and in the revoke command:\n%s", keyID, out)
	}
	call := func(method, path string, header map[string]string, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	withKey := map[string]string{"X-Api-Key": key}
	if code, body := call("GET", "/inventory/v1/items/WIDGET-1", withKey, ""); code != 200 || !strings.Contains(body, `"sku":"WIDGET-1"`) {
		t.Errorf("GET WIDGET-1 with the demo key = %d %q", code, body)
	}
	if code, _ := call("GET", "/inventory/v1/items?api_key="+key, nil, ""); code != 200 {
		t.Errorf("GET with the demo key in the query = %d, want 200", code)
	}
	if code, body := call("GET", "/inventory/v1/items", nil, ""); code != 401 || !strings.Contains(body, `"error":"unauthenticated"`) {
		t.Errorf("GET without a credential = %d %q, want 401", code, body)
	}
	if code, body := call("POST", "/inventory/v1/items", withKey, `{"sku":"NUT-5","name":"Nut","quantity":1,"price_cents":5}`); code != 403 || !strings.Contains(body, `"error":"insufficient_scope"`) {
		t.Errorf("POST with the demo key = %d %q, want 403 insufficient_scope", code, body)
	}
	if code, body := call("POST", "/inventory/v1/items", map[string]string{"Authorization": "Bearer " + token[1]}, `{"sku":"SPROCKET-4","name":"Sprocket","quantity":5,"price_cents":250}`); code != 201 {
		t.Errorf("POST with the demo token = %d %q, want 201", code, body)
	}
	// The demo token lives the seed's 15 minutes, which the dev issuer's
	// default max_token_lifetime allows.
	var times struct{ Iat, Exp int64 }
	if payload, err := base64.RawURLEncoding.DecodeString(strings.Split(token[1], ".")[1]); err != nil || json.Unmarshal(payload, &times) != nil {
		t.Errorf("the demo token's payload does not decode: %v", err)
	} else if life := time.Duration(times.Exp-times.Iat) * time.Second; life != 15*time.Minute {
		t.Errorf("the demo token lives %v, want 15m0s", life)
	}
	// The orders service from its descriptor: REST, Connect, edge validation.
	if code, body := call("GET", "/v1/orders/o-1001", withKey, ""); code != 200 || !strings.Contains(body, `"orderId":"o-1001"`) {
		t.Errorf("REST GET /v1/orders/o-1001 = %d %q, want the order", code, body)
	}
	if code, body := call("GET", "/v1/orders/bad-id", withKey, ""); code != 400 || !strings.Contains(body, `"rule":"string.pattern"`) {
		t.Errorf("REST GET /v1/orders/bad-id = %d %q, want 400 with the violation", code, body)
	}
	connectHeader := map[string]string{"X-Api-Key": key, "Content-Type": "application/json"}
	if code, body := call("POST", "/portico.demo.v1.OrdersService/GetOrder", connectHeader, `{"order_id":"o-1001"}`); code != 200 || !strings.Contains(body, `"orderId":"o-1001"`) {
		t.Errorf("Connect GetOrder = %d %q, want the order", code, body)
	}
	if code, body := call("GET", "/nowhere", nil, ""); code != 404 || !strings.Contains(body, `"error":"no_route"`) {
		t.Errorf("GET /nowhere through dev = %d %q", code, body)
	}
	// The demo plan's limit (20/s, burst 40 per caller) shows within a
	// quick loop, with its headers.
	limited := false
	for i := 0; i < 200 && !limited; i++ {
		req, _ := http.NewRequest("GET", "http://"+addr+"/inventory/v1/items", nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Header.Get("RateLimit-Policy") != `"default";q=40;w=2` || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"default";r=`) {
			t.Fatalf("call %d: RateLimit-Policy %q, RateLimit %q", i, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
		}
		if resp.StatusCode == 429 {
			limited = resp.Header.Get("Retry-After") != ""
		}
	}
	if !limited {
		t.Error("200 quick calls with the demo key were never refused with 429 and Retry-After")
	}
	if strings.Contains(strings.ReplaceAll(out, key, ""), key[8:20]) {
		t.Errorf("the key appears in dev's output other than in the banner's calls")
	}

	// The node takes its routes from dev's control plane: a route put
	// through the admin API (the platform token is in the data directory,
	// never in the output) is served at once.
	tokenBytes, err := os.ReadFile(filepath.Join(dataDir, "platform-token"))
	if err != nil {
		t.Fatal(err)
	}
	ptoken := strings.TrimSpace(string(tokenBytes))
	if strings.Contains(p.output(), ptoken) {
		t.Error("dev printed the platform token")
	}
	if !strings.Contains(p.output(), "export PORTICO_SERVER=http://"+ctlAddr) {
		t.Errorf("dev banner lacks the control plane's address")
	}
	api := admintest.Client("http://"+ctlAddr, ptoken)
	if _, err := api.PutRoute(context.Background(), connect.NewRequest(&adminv1.PutRouteRequest{Team: "demo", Route: &configv1.Route{
		Id: "inventory-v2", Path: "/inventory/v2/{rest=**}", Cluster: "inventory", Auth: &configv1.RouteAuth{Public: true, Reviewer: "dev-test"},
		Rewrite: &configv1.PathRewrite{Rewrite: &configv1.PathRewrite_Prefix{Prefix: &configv1.PrefixRewrite{From: "/inventory/v2", To: "/inventory/v1"}}},
	}})); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := call("GET", "/inventory/v2/items/WIDGET-1", nil, "")
		if code == 200 && strings.Contains(body, `"sku":"WIDGET-1"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the route put through dev's admin API: GET = %d %q", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The signed key snapshot holds every key's hash and metadata: dev
	// serves it only with the snapshot token of its data directory, which
	// its own node's poller holds.
	snapTokenBytes, err := os.ReadFile(filepath.Join(dataDir, "snapshot-token"))
	if err != nil {
		t.Fatalf("dev made no snapshot token: %v", err)
	}
	snapToken := strings.TrimSpace(string(snapTokenBytes))
	if strings.Contains(p.output(), snapToken) {
		t.Error("dev printed the snapshot token")
	}
	for _, c := range []struct {
		name, auth string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"the platform token", "Bearer " + ptoken, http.StatusUnauthorized},
		{"the snapshot token", "Bearer " + snapToken, http.StatusOK},
	} {
		req, _ := http.NewRequest("GET", "http://"+ctlAddr+"/v1/key-snapshot", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET /v1/key-snapshot from dev with %s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
	// Dev starts only once its node has polled the snapshot (with the
	// token); it must not have failed since.
	if strings.Contains(p.output(), "polling the signed key snapshot failed") {
		t.Error("dev's node failed to poll the signed key snapshot")
	}

	// GitHub finds the demo key in a public repository.
	if status, labels := githubReport(t, "http://"+ctlAddr, gh, "https://github.com/someone/demo/blob/main/.env", key); status != 200 || len(labels) != 1 || labels[0] != "true_positive" {
		t.Fatalf("GitHub's report of the demo key to dev: %d %v, want 200 [true_positive]", status, labels)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		code, _ := call("GET", "/inventory/v1/items/WIDGET-1", withKey, "")
		if code == 401 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo key after GitHub reported it: GET = %d, want 401", code)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("exit after SIGINT: %v, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("portico dev did not exit within 30s of SIGINT")
	}
}

// devCredentials reads the demo key, its id and the access token from the
// export line dev prints.
func devCredentials(t *testing.T, out string) (key, keyID, token string) {
	t.Helper()
	m := regexp.MustCompile(`export KEY=(ak_test_[0-9A-Za-z]{38}) KEY_ID=(key_[0-9A-Za-z_-]+) TOKEN=(eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("dev banner shows no export line with the demo key, its id and the token:\n%s", out)
	}
	return m[1], m[2], m[3]
}

// TestDevRestartKeepsUserKeys: a restarted portico dev revokes the demo
// key of its last run and issues another, and leaves the keys a user made
// (for the demo app too) working.
func TestDevRestartKeepsUserKeys(t *testing.T) {
	addr, tlsAddr, ctlAddr, dataDir := freeAddr(t), freeAddr(t), freeAddr(t), t.TempDir()
	args := []string{"dev", "-addr", addr, "-tls-addr", tlsAddr, "-control-addr", ctlAddr, "-data-dir", dataDir}
	p := start(t, args...)
	p.waitLine(t, regexp.MustCompile(`Ctrl-C drains`))
	firstKey, _, _ := devCredentials(t, p.output())
	tokenBytes, err := os.ReadFile(filepath.Join(dataDir, "platform-token"))
	if err != nil {
		t.Fatal(err)
	}
	keys := keysv1connect.NewKeyServiceClient(admintest.HTTPClient(strings.TrimSpace(string(tokenBytes))), "http://"+ctlAddr)
	mine, err := keys.CreateKey(context.Background(), connect.NewRequest(&keysv1.CreateKeyRequest{AppId: "app-demo", TenantId: "tenant-demo",
		Plan: "demo", Scopes: []string{"inventory:read"}, Env: keysv1.Environment_ENVIRONMENT_TEST}))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("portico dev did not stop within 30 s of SIGTERM")
	}

	p2 := start(t, args...)
	p2.waitLine(t, regexp.MustCompile(`Ctrl-C drains`))
	secondKey, secondID, _ := devCredentials(t, p2.output())
	status := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/inventory/v1/items", nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := status(mine.Msg.GetRawKey()); c != 200 {
		t.Errorf("the key made in the last run, after a restart: %d, want 200", c)
	}
	if c := status(secondKey); c != 200 {
		t.Errorf("this run's demo key: %d, want 200", c)
	}
	if c := status(firstKey); c != 401 {
		t.Errorf("the last run's demo key: %d, want 401", c)
	}
	if got, err := keys.GetKey(context.Background(), connect.NewRequest(&keysv1.GetKeyRequest{KeyId: secondID})); err != nil ||
		got.Msg.GetKey().GetStatus() != configv1.KeyStatus_KEY_STATUS_ACTIVE {
		t.Errorf("the banner's key id %s: %v %v, want this run's active demo key", secondID, got, err)
	}
}
