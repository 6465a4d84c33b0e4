package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
)

// TestOutputYAML: -o yaml prints an answer as -o json does, in YAML; what
// platform get -o yaml prints, platform put -f takes back unchanged.
func TestOutputYAML(t *testing.T) {
	t.Parallel()
	f, keysURL := keyService(t)
	f.keys = testKeys()
	for _, args := range [][]string{
		{"keys", "get", "key_01"},
		{"keys", "list", "--all"},
		{"keys", "create", "--app", "shop", "--tenant", "acme", "--plan", "gold"},
		{"deny", "add", "--jti", "b7c1", "--expires", "2099-01-01T00:00:00Z"},
	} {
		_, js, _ := ctl(t, keysEnv(keysURL), append(args, "-o", "json")...)
		code, y, errOut := ctl(t, keysEnv(keysURL), append(args, "-o", "yaml")...)
		fromYAML, err := yaml.YAMLToJSON([]byte(y))
		if err != nil || code != 0 || errOut != "" || strings.HasPrefix(y, "{") {
			t.Errorf("porticoctl %s -o yaml = %d %q %q (%v)", strings.Join(args, " "), code, y, errOut, err)
			continue
		}
		if want, _ := yaml.JSONToYAML([]byte(js)); string(want) != string(mustYAML(t, fromYAML)) {
			t.Errorf("porticoctl %s -o yaml printed\n%s\nwant the JSON's\n%s", strings.Join(args, " "), y, want)
		}
	}
	if _, y, _ := ctl(t, keysEnv(keysURL), "-o", "yaml", "keys", "create", "--app", "shop", "--tenant", "acme", "--plan", "gold"); strings.Count(y, fakeSecret) != 1 || !strings.Contains(y, "rawKey: "+fakeRawKey+"\n") {
		t.Errorf("keys create -o yaml printed %q, want the key once", y)
	}

	url, _ := server(t)
	env := map[string]string{"PORTICO_SERVER": url, "PORTICO_TOKEN": platformToken}
	pf := filepath.Join(t.TempDir(), "platform.yaml")
	if err := os.WriteFile(pf, []byte("upstreamIdentities:\n  - {name: orders-mtls, teams: [orders]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := ctl(t, env, "platform", "put", "-f", pf); code != 0 {
		t.Fatalf("platform put = %d %q %q", code, out, errOut)
	}
	code, y, errOut := ctl(t, env, "platform", "get", "-o", "yaml")
	if code != 0 || !strings.Contains(y, "upstreamIdentities:\n") || !strings.Contains(y, "name: orders-mtls\n") {
		t.Fatalf("platform get -o yaml = %d %q %q", code, y, errOut)
	}
	back := filepath.Join(t.TempDir(), "got.yaml")
	if err := os.WriteFile(back, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := ctl(t, env, "platform", "put", "-f", back); code != 0 || out != "no change for the platform\n" {
		t.Errorf("platform put -f (platform get -o yaml) = %d %q %q, want no change", code, out, errOut)
	}
	code, y, _ = ctl(t, env, "versions", "-o", "yaml", "--limit", "1")
	if code != 0 || !strings.HasPrefix(y, "versions:\n  - number: \"3\"\n") {
		t.Errorf("versions -o yaml = %d %q", code, y)
	}
}

// mustYAML is JSON as YAML, keys sorted, to compare with another's.
func mustYAML(t *testing.T, js []byte) []byte {
	t.Helper()
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// TestPrintRolloutRoutes: rollout status shows the last judged stage's
// calls of each changed route, as a table with headers.
func TestPrintRolloutRoutes(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	c := &cli{stdout: &out}
	c.printRollout(&adminv1.Rollout{Version: 7, Previous: 5, Stage: "canary", State: "reverted", Reached: 4,
		Evidence: "stage canary: route orders.list failed 95 of 97 calls",
		Routes: []*adminv1.RouteEvidence{{Route: "orders.list", NewCalls: 97, NewFailures: 95, OldCalls: 145},
			{Route: "orders.new", NewCalls: 2, NewProbes: 12, NewProbesFailed: 12, OldProbes: 0}}})
	want := `version 7 (from 5): reverted at stage canary, 4 nodes
  stage canary: route orders.list failed 95 of 97 calls
ROUTE        NEW CALLS  NEW FAILED  NEW PROBES  OLD CALLS  OLD FAILED  OLD PROBES
orders.list  97         95          0/0         145        0           0/0
orders.new   2          0           12/12       0          0           0/0
`
	if out.String() != want {
		t.Errorf("printRollout printed\n%s\nwant\n%s", out.String(), want)
	}
}
