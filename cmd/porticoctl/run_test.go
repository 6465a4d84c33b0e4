package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control"
	"github.com/portico-gw/portico/control/store"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
)

const platformToken = "ptk_porticoctl-test-platform-token-0123456789"

// server runs a control plane with teams orders and search declared, and
// returns its URL and a team-admin token of orders.
func server(t *testing.T) (string, string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	p, err := control.New(ctx, control.Options{Store: st, BootstrapToken: platformToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler)
	t.Cleanup(srv.Close)
	admin := adminv1connect.NewAdminServiceClient(&http.Client{Transport: svcauth.Transport(platformToken, nil), Timeout: 30 * time.Second}, srv.URL)
	for team, prefixes := range map[string][]string{"orders": {"/v1/orders", "/v1/customers", "/portico.demo.v1.OrdersService"}, "search": {"/v1/search"}} {
		var owns []*adminv1.Ownership
		for _, p := range prefixes {
			owns = append(owns, &adminv1.Ownership{PathPrefix: p})
		}
		// orders' clusters are on loopback; search has none.
		ups := map[string]*adminv1.Upstream{
			"orders": {Address: &adminv1.Upstream_Cidr{Cidr: "127.0.0.1/32"}},
			"search": {Address: &adminv1.Upstream_Host{Host: "*.search.internal"}},
		}
		if _, err := admin.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Team: &adminv1.Team{Name: team, Owns: owns,
			Upstreams: []*adminv1.Upstream{ups[team]}}})); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := admin.CreateToken(ctx, connect.NewRequest(&adminv1.CreateTokenRequest{Team: "orders", Role: adminv1.Role_ROLE_TEAM_ADMIN}))
	if err != nil {
		t.Fatal(err)
	}
	return srv.URL, tok.Msg.GetToken()
}

// ctl runs porticoctl with the environment env.
func ctl(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr, func(k string) string { return env[k] })
	return code, stdout.String(), stderr.String()
}

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const teamYAML = `team: orders
clusters:
  - name: orders
    protocol: PROTOCOL_GRPC
    endpoints: [{address: "127.0.0.1:9"}]
  - name: orders-legacy
    protocol: PROTOCOL_HTTP1
    endpoints: [{address: "127.0.0.1:9"}]
routes:
  - id: orders.export
    path: /v1/orders/export/**
    cluster: orders-legacy
    auth: {public: true, reviewer: security}
`

const servicesYAML = `team: orders
services:
  - id: orders
    name: portico.demo.v1.OrdersService
    cluster: orders
    auth: {public: true, reviewer: security}
    descriptors:
      sources:
        files: [{name: orders.proto}]
`

func TestApplyDiffVersionsRollback(t *testing.T) {
	t.Parallel()
	url, token := server(t)
	env := map[string]string{"PORTICO_SERVER": url, "PORTICO_TOKEN": token}
	proto, err := os.ReadFile("../../proto/portico/demo/v1/orders.proto")
	if err != nil {
		t.Fatal(err)
	}
	dir := writeDir(t, map[string]string{"team.yaml": teamYAML, "services.yaml": servicesYAML, "orders.proto": string(proto)})

	code, out, errOut := ctl(t, env, "diff", "-f", dir)
	if code != 0 || out != "+ orders cluster orders\n+ orders cluster orders-legacy\n+ orders route orders.export\n+ orders service orders\n" {
		t.Fatalf("diff = %d %q %q", code, out, errOut)
	}
	code, out, errOut = ctl(t, env, "apply", "-f", dir, "-m", "orders from its directory")
	if code != 0 || !strings.HasPrefix(out, "version 3 (sha256 ") {
		t.Fatalf("apply = %d %q %q", code, out, errOut)
	}
	if code, out, _ = ctl(t, env, "diff", "-f", dir); code != 0 || out != "no change for team orders\n" {
		t.Errorf("diff after apply = %d %q", code, out)
	}
	// The team sees the versions that changed its objects (the one that
	// declared it, its apply), a platform admin all three.
	code, out, _ = ctl(t, env, "versions")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !regexp.MustCompile(`^VERSION  CREATED  +AUTHOR  +SHA256  +MESSAGE$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^3        \S+Z  +\S+  +[0-9a-f]{12}  orders from its directory$`).MatchString(lines[1]) || !regexp.MustCompile(`^[12]  `).MatchString(lines[2]) {
		t.Errorf("versions (team) = %d %q", code, out)
	}
	code, out, _ = ctl(t, map[string]string{"PORTICO_SERVER": url, "PORTICO_TOKEN": platformToken}, "versions")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "VERSION  ") || !strings.HasPrefix(lines[1], "3  ") {
		t.Errorf("versions (platform) = %d %q", code, out)
	}
	code, out, _ = ctl(t, env, "--output", "json", "versions", "--limit", "1")
	var js struct {
		Versions []struct{ Number string } `json:"versions"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || len(js.Versions) != 1 || js.Versions[0].Number != "3" {
		t.Errorf("versions --output json = %d %q", code, out)
	}
	// One route at a time.
	routeFile := filepath.Join(t.TempDir(), "route.yaml")
	if err := os.WriteFile(routeFile, []byte("id: orders.extra\npath: /v1/orders/extra\ncluster: orders-legacy\nauth: {public: true, reviewer: security}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut = ctl(t, env, "route", "put", "--team", "orders", "-f", routeFile); code != 0 || out != "version 4\n+ orders route orders.extra\n" {
		t.Errorf("route put = %d %q %q", code, out, errOut)
	}
	if code, out, errOut = ctl(t, env, "route", "delete", "--team", "orders", "orders.extra"); code != 0 || out != "version 5\n- orders route orders.extra\n" {
		t.Errorf("route delete = %d %q %q", code, out, errOut)
	}
	if code, _, errOut = ctl(t, env, "route", "delete", "--team", "orders", "orders.extra"); code != 1 || !strings.Contains(errOut, "not_found") {
		t.Errorf("route delete again = %d %q", code, errOut)
	}
	// Teams are the platform's to declare.
	if code, _, errOut = ctl(t, env, "team", "put", "payments", "--own", "/v1/payments"); code != 1 || !strings.Contains(errOut, "permission_denied") {
		t.Errorf("team put by a team = %d %q", code, errOut)
	}
	if code, out, errOut = ctl(t, map[string]string{"PORTICO_SERVER": url, "PORTICO_TOKEN": platformToken},
		"team", "put", "payments", "--own", "api.example.com/v1/payments", "--own", "/internal/payments"); code != 0 || !strings.HasSuffix(out, "+ team payments\n") {
		t.Errorf("team put = %d %q %q", code, out, errOut)
	}
	// Rollback is the platform's.
	if code, _, errOut = ctl(t, env, "rollback", "2"); code != 1 || !strings.Contains(errOut, "permission_denied") {
		t.Errorf("team rollback = %d %q, want 1 and permission_denied", code, errOut)
	}
	platform := map[string]string{"PORTICO_SERVER": url, "PORTICO_TOKEN": platformToken}
	if code, out, errOut = ctl(t, platform, "rollback", "2", "-m", "undo"); code != 0 || !strings.HasPrefix(out, "version 7 = version 2\n") {
		t.Errorf("rollback = %d %q %q", code, out, errOut)
	}
	// No nodes, no staged rollout (this control plane sends versions at
	// once).
	if code, out, errOut = ctl(t, env, "rollout", "status"); code != 0 || out != "target version 7\nno staged rollout yet\n" {
		t.Errorf("rollout status = %d %q %q", code, out, errOut)
	}
	if code, _, errOut = ctl(t, platform, "rollout", "pause"); code != 1 || !strings.Contains(errOut, "failed_precondition") {
		t.Errorf("rollout pause with none = %d %q", code, errOut)
	}
	if code, out, _ = ctl(t, env, "nodes"); code != 0 || out != "NODE  POOL  REGION  VERSION  FAST LANE  IDENTITIES  UNHEALTHY\n" {
		t.Errorf("nodes = %d %q", code, out)
	}
}

func TestApplyRefusedListsProblems(t *testing.T) {
	t.Parallel()
	url, token := server(t)
	env := map[string]string{"PORTICO_SERVER": url, "PORTICO_TOKEN": token}
	dir := writeDir(t, map[string]string{"team.yaml": teamYAML + `  - id: orders.stray
    path: /v1/search/mine
    cluster: orders-legacy
    auth: {public: true, reviewer: security}
  - id: orders.v2
    path: /v2/orders
    cluster: orders-legacy
    auth: {public: true, reviewer: security}
`})
	code, out, errOut := ctl(t, env, "apply", "-f", dir)
	if code != 1 || out != "" || !strings.Contains(errOut, "refused (invalid_argument), 2 problems:") ||
		!strings.Contains(errOut, "  team orders: routes[orders.stray]: ") || !strings.Contains(errOut, "  team orders: routes[orders.v2]: ") {
		t.Errorf("apply = %d %q\n%s", code, out, errOut)
	}
}

func TestUsageAndLocalErrors(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PORTICO_SERVER": "http://127.0.0.1:1"}
	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"no command":         {nil, 2, "Usage:\n  porticoctl [command]"},
		"unknown command":    {[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		"apply without -f":   {[]string{"apply"}, 2, "-f DIR is required"},
		"bad output":         {[]string{"--output", "xml", "versions"}, 2, `invalid argument "xml" for "-o, --output" flag: want text, json or yaml`},
		"rollback nonsense":  {[]string{"rollback", "latest"}, 2, "not a version number"},
		"rollback without N": {[]string{"rollback"}, 2, "porticoctl rollback: which version? porticoctl rollback N"},
		"unknown flag":       {[]string{"--nope", "versions"}, 2, "unknown flag: --nope"},
		"bad flag value":     {[]string{"versions", "--limit", "many"}, 2, `invalid argument "many" for "--limit" flag`},
		"no flag value":      {[]string{"versions", "--limit"}, 2, "flag needs an argument: --limit"},
		"an argument":        {[]string{"nodes", "all"}, 2, `unexpected "all"`},
		"missing token file": {[]string{"versions", "--token-file", "/nonexistent/token"}, 2, "--token-file: open /nonexistent/token"},
		"team without put":   {[]string{"team", "payments"}, 2, `porticoctl team: "payments" is not put`},
		"team bad own":       {[]string{"team", "put", "payments", "--own", "payments"}, 2, "want HOST/PREFIX"},
		"rollout nonsense":   {[]string{"rollout", "faster"}, 2, "is not status, pause, resume or abort"},
		"route no team":      {[]string{"route", "put", "-f", "x.yaml"}, 2, "porticoctl route put: --team is required"},
		"route bad file":     {[]string{"route", "put", "--team", "orders", "-f", writeDir(t, map[string]string{"r.yaml": "idd: x\n"}) + "/r.yaml"}, 1, "idd"},
		"empty directory":    {[]string{"apply", "-f", t.TempDir()}, 1, "no .yaml, .yml or .json files"},
		"two teams":          {[]string{"apply", "-f", writeDir(t, map[string]string{"a.yaml": "team: orders\n", "b.yaml": "team: search\n"})}, 1, `team "search", but the directory is team "orders"'s`},
		"unknown field":      {[]string{"apply", "-f", writeDir(t, map[string]string{"a.yaml": "team: orders\nroutez: []\n"})}, 1, "routez"},
		"missing source":     {[]string{"apply", "-f", writeDir(t, map[string]string{"a.yaml": servicesYAML})}, 1, `source "orders.proto"`},
		"server down":        {[]string{"versions"}, 1, "porticoctl versions: unavailable"},
	} {
		code, _, errOut := ctl(t, env, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: %d %q, want %d and %q", name, code, errOut, tc.code, tc.want)
		}
	}
}

// TestExampleTeamDirectory: the README's example directory applies.
func TestExampleTeamDirectory(t *testing.T) {
	t.Parallel()
	url, _ := server(t)
	env := map[string]string{"PORTICO_SERVER": url, "PORTICO_TOKEN": platformToken}
	if code, out, errOut := ctl(t, env, "apply", "-f", "../../docs/examples/teams/orders/", "-m", "first routes"); code != 0 || !strings.Contains(out, "+ orders route orders.read") {
		t.Errorf("apply the example = %d %q %q", code, out, errOut)
	}
}

func TestParseUpstream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in         string
		host, cidr string
		ports      []string
	}{
		{"orders.internal", "orders.internal", "", nil},
		{"*.orders.internal:443", "*.orders.internal", "", []string{"443"}},
		{"10.20.0.0/16", "", "10.20.0.0/16", nil},
		{"10.20.0.0/16:443,8000-8099", "", "10.20.0.0/16", []string{"443", "8000-8099"}},
		{"fd00:1::/64", "", "fd00:1::/64", nil},
		{"fd00:1::/64:8443", "", "fd00:1::/64", []string{"8443"}},
	}
	for _, tt := range tests {
		u, err := parseUpstream(tt.in)
		if err != nil || u.GetHost() != tt.host || u.GetCidr() != tt.cidr || !slices.Equal(u.GetPorts(), tt.ports) {
			t.Errorf("parseUpstream(%q) = %v, %v; want host %q cidr %q ports %q", tt.in, u, err, tt.host, tt.cidr, tt.ports)
		}
	}
	for _, bad := range []string{"", ":443", "orders.internal:", "10.0.0.0/8:"} {
		if u, err := parseUpstream(bad); err == nil {
			t.Errorf("parseUpstream(%q) = %v, want an error", bad, u)
		}
	}
}

// TestTeamUpstreamsAndPlatform: a platform admin gives a team its
// backends with team put --upstream, and identities with platform put; the
// control plane refuses a cluster outside them, naming the field.
func TestTeamUpstreamsAndPlatform(t *testing.T) {
	t.Parallel()
	url, token := server(t)
	platform := map[string]string{"PORTICO_SERVER": url, "PORTICO_TOKEN": platformToken}
	team := map[string]string{"PORTICO_SERVER": url, "PORTICO_TOKEN": token}
	code, out, errOut := ctl(t, platform, "team", "put", "orders", "--own", "/v1/orders", "--upstream", "*.orders.internal:443", "--upstream", "127.0.0.1/32:9")
	if code != 0 || !strings.Contains(out, "~ team orders") {
		t.Fatalf("team put --upstream = %d %q %q", code, out, errOut)
	}
	pf := filepath.Join(t.TempDir(), "platform.yaml")
	if err := os.WriteFile(pf, []byte("upstreamIdentities:\n  - {name: orders-mtls, teams: [orders]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut = ctl(t, platform, "platform", "put", "-f", pf, "-m", "orders' client certificate"); code != 0 || !strings.Contains(out, "~ platform") && !strings.Contains(out, "version") {
		t.Fatalf("platform put = %d %q %q", code, out, errOut)
	}
	if code, out, errOut = ctl(t, team, "platform", "get"); code != 0 || !strings.Contains(out, `"orders-mtls"`) {
		t.Errorf("platform get = %d %q %q", code, out, errOut)
	}
	if code, _, errOut = ctl(t, team, "platform", "put", "-f", pf); code != 1 || !strings.Contains(errOut, "permission_denied") {
		t.Errorf("platform put by a team = %d %q", code, errOut)
	}
	ok := writeDir(t, map[string]string{"team.yaml": `team: orders
clusters:
  - name: orders-secure
    protocol: PROTOCOL_HTTP1
    endpoints: [{address: "api.orders.internal:443"}]
    tls: {identity: orders-mtls}
`})
	if code, out, errOut = ctl(t, team, "apply", "-f", ok); code != 0 {
		t.Errorf("apply inside the team's upstreams = %d %q %q", code, out, errOut)
	}
	outside := writeDir(t, map[string]string{"team.yaml": `team: orders
clusters:
  - name: orders-secure
    protocol: PROTOCOL_HTTP1
    endpoints: [{address: "api.search.internal:443"}]
    tls: {identity: gateway}
`})
	code, out, errOut = ctl(t, team, "apply", "-f", outside)
	if code != 1 || !strings.Contains(errOut, "team orders: clusters[orders-secure].endpoints[0].address: api.search.internal:443 is outside team \"orders\"'s upstreams") ||
		!strings.Contains(errOut, `team orders: clusters[orders-secure].tls.identity: no upstream identity "gateway"`) {
		t.Errorf("apply outside the team's upstreams = %d %q\n%s", code, out, errOut)
	}
}

func TestPrintNodes(t *testing.T) {
	t.Parallel()
	nodes := []*adminv1.Node{
		{Id: "gw-eu-1", Pool: "public", Region: "eu", Version: 7, FastLaneVersion: 12, UpstreamIdentities: []string{"orders-mtls", "gateway"}},
		{Id: "gw-us-2", Pool: "internal", Region: "us", Version: 6, FastLaneVersion: 11, UnhealthyEndpoints: []string{"orders/10.0.0.1:443"},
			LastNack:      &adminv1.Nack{Version: 7, Error: "1 object refused", Objects: []*adminv1.NackObject{{Team: "orders", Kind: "cluster", Name: "pay", Error: "no such identity"}}},
			FastLaneError: "bad entry"},
	}
	var b bytes.Buffer
	if err := printNodes(&b, nodes); err != nil {
		t.Fatal(err)
	}
	want := `NODE     POOL      REGION  VERSION  FAST LANE  IDENTITIES           UNHEALTHY
gw-eu-1  public    eu      7        12         orders-mtls,gateway  -
gw-us-2  internal  us      6        11         -                    orders/10.0.0.1:443

gw-us-2 refused version 7: 1 object refused
  team orders cluster pay: no such identity
gw-us-2 refused fast-lane entries: bad entry
`
	if b.String() != want {
		t.Errorf("printNodes printed\n%s\nwant\n%s", b.String(), want)
	}
}
