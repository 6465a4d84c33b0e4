package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
)

func TestLegacyFlags(t *testing.T) {
	t.Parallel()
	root := (&cli{stdout: io.Discard, stderr: io.Discard, getenv: os.Getenv}).root()
	for _, tc := range []struct{ in, want string }{
		{"route put -team demo -f x.yaml -m msg", "route put --team demo -f x.yaml -m msg"},
		{"-server URL -output json versions -limit 5", "--server URL --output json versions --limit 5"},
		{"versions -limit=5 -output=json -token-file=t", "versions --limit=5 --output=json --token-file=t"},
		{"-o json keys -keys-server URL list -all -app shop", "-o json keys --keys-server URL list --all --app shop"},
		{"keys create -app a -tenant t -plan p -scope s1 -scope s2 -env test -not-after 2027-01-01T00:00:00Z -wait 30s",
			"keys create --app a --tenant t --plan p --scope s1 --scope s2 --env test --not-after 2027-01-01T00:00:00Z --wait 30s"},
		{"team put payments -own /v1/payments -own api.example.com/v2 -upstream 10.0.0.0/8:443 -upstream *.p.internal",
			"team put payments --own /v1/payments --own api.example.com/v2 --upstream 10.0.0.0/8:443 --upstream *.p.internal"},
		// A negative duration is a value, and so is whatever follows a
		// flag that takes one.
		{"keys rotate key_00 -overlap -1h -wait 5s", "keys rotate key_00 --overlap -1h --wait 5s"},
		{"keys rotate -overlap 2h key_00 -wait=1m", "keys rotate --overlap 2h key_00 --wait=1m"},
		{"keys revoke key_00 -reason -app", "keys revoke key_00 --reason -app"},
		{"keys revoke key_00 --reason -app -wait 0", "keys revoke key_00 --reason -app --wait 0"},
		{"apply -f -team -m -limit", "apply -f -team -m -limit"},
		{"deny add -jti a -- -ttl 5m", "deny add --jti a -- -ttl 5m"},
		{"deny add -subject s -issued-before now -issuer login -ttl 1h", "deny add --subject s --issued-before now --issuer login --ttl 1h"},
		// Not a flag of the command: cobra says so.
		{"keys create -secret x", "keys create -secret x"},
		{"keys list -limit 5", "keys list -limit 5"},
		{"keys list -version", "keys list -version"},
		{"-ojson -fdir -m=x", "-ojson -fdir -m=x"},
		{"rollback 2 -m undo", "rollback 2 -m undo"},
		{"-help", "--help"},
		{"-version", "--version"},
		{"keys create -help", "keys create --help"},
		{"help keys create", "help keys create"},
		// Completion asks about the words as typed.
		{"__complete keys create -ap", "__complete keys create -ap"},
	} {
		if got := strings.Join(legacyFlags(root, strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("legacyFlags(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestLegacySpelling: a command line of earlier releases (-app shop)
// sends what its GNU spelling (--app shop) does, and prints the same.
func TestLegacySpelling(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "keys.token")
	if err := os.WriteFile(tokenFile, []byte(keysToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ago := time.Now().Add(-5 * time.Minute).UTC().Format(time.RFC3339)
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct{ legacy, gnu []string }{
		{
			[]string{"keys", "create", "-app", "shop", "-tenant", "acme", "-plan", "gold", "-scope", "a", "-scope", "b", "-env", "test", "-priority", "paid", "-not-after", "2027-01-02T03:04:05Z", "-wait", "30s"},
			[]string{"keys", "create", "--app", "shop", "--tenant", "acme", "--plan", "gold", "--scope", "a", "--scope", "b", "--env", "test", "--priority", "paid", "--not-after", "2027-01-02T03:04:05Z", "--wait", "30s"},
		},
		{[]string{"keys", "rotate", "key_00", "-overlap", "1h", "-wait=5s"}, []string{"keys", "rotate", "key_00", "--overlap", "1h", "--wait=5s"}},
		{[]string{"keys", "revoke", "key_00", "-reason", "leaked", "-wait", "0"}, []string{"keys", "revoke", "key_00", "--reason", "leaked", "--wait", "0"}},
		{[]string{"keys", "revoke", "-app", "shop", "-reason", "app retired"}, []string{"keys", "revoke", "--app", "shop", "--reason", "app retired"}},
		{[]string{"keys", "list", "-app", "shop", "-tenant", "acme", "-all"}, []string{"keys", "list", "--app", "shop", "--tenant", "acme", "--all"}},
		{[]string{"-output", "json", "keys", "get", "key_01"}, []string{"keys", "get", "key_01", "--output=json"}},
		{[]string{"keys", "list", "-keys-token-file", tokenFile}, []string{"--keys-token-file", tokenFile, "keys", "list"}},
		{
			[]string{"deny", "add", "-client-id", "app-x", "-issued-before", ago, "-expires", later, "-issuer", "login"},
			[]string{"deny", "add", "--client-id", "app-x", "--issued-before", ago, "--expires", later, "--issuer", "login"},
		},
		{[]string{"deny", "add", "-jti", "b7c1", "-token-expires", later, "-expires", later}, []string{"deny", "add", "--jti", "b7c1", "--token-expires", later, "--expires", later}},
	} {
		var sent [2][]fakeCall
		var outs [2]string
		for i, args := range [][]string{tc.legacy, tc.gnu} {
			f, url := keyService(t)
			f.keys = testKeys()
			code, out, errOut := ctl(t, keysEnv(url), args...)
			if code != 0 {
				t.Errorf("porticoctl %s = %d %q %q", strings.Join(args, " "), code, out, errOut)
			}
			sent[i], outs[i] = f.requests(), out
		}
		equal := slices.EqualFunc(sent[0], sent[1], func(a, b fakeCall) bool {
			return a.procedure == b.procedure && a.auth == b.auth && proto.Equal(a.msg, b.msg)
		})
		if !equal || len(sent[0]) == 0 || outs[0] != outs[1] {
			t.Errorf("porticoctl %s sent %v and printed %q; %s sent %v and printed %q",
				strings.Join(tc.legacy, " "), sent[0], outs[0], strings.Join(tc.gnu, " "), sent[1], outs[1])
		}
	}
	// A single-dash name that is no flag of the command fails as cobra
	// fails it, with exit status 2.
	_, url := keyService(t)
	if code, out, errOut := ctl(t, keysEnv(url), "keys", "create", "-secret", "x"); code != 2 || out != "" || !strings.Contains(errOut, "unknown shorthand flag: 's' in -secret") {
		t.Errorf("keys create -secret x = %d %q %q, want 2", code, out, errOut)
	}
}

// TestLegacySpellingAdmin: the control plane's commands in both
// spellings; the second of two equal writes changes nothing.
func TestLegacySpellingAdmin(t *testing.T) {
	t.Parallel()
	url, _ := server(t)
	env := map[string]string{"PORTICO_TOKEN": platformToken}
	routeFile := filepath.Join(t.TempDir(), "route.yaml")
	if err := os.WriteFile(routeFile, []byte("id: orders.extra\npath: /v1/orders/extra\ncluster: orders\nauth: {public: true, reviewer: security}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := writeDir(t, map[string]string{"team.yaml": "team: orders\nclusters:\n  - name: orders\n    protocol: PROTOCOL_HTTP1\n    endpoints: [{address: \"127.0.0.1:9\"}]\n"})
	for _, tc := range []struct {
		legacy, gnu []string
		first       string // the start of what the first prints
		second      string // what the second prints
	}{
		{
			[]string{"-server", url, "team", "put", "payments", "-own", "/v1/payments", "-own", "api.example.com/v2/payments", "-upstream", "*.payments.internal", "-upstream", "10.0.0.0/8:443,8000-8099", "-m", "declared"},
			[]string{"team", "put", "payments", "--server", url, "--own", "/v1/payments", "--own", "api.example.com/v2/payments", "--upstream", "*.payments.internal", "--upstream", "10.0.0.0/8:443,8000-8099", "--message", "declared"},
			"version 3\n", "no change for team payments\n",
		},
		{
			[]string{"-server=" + url, "apply", "-f", dir, "-m", "a cluster"},
			[]string{"--server=" + url, "apply", "--file", dir, "--message", "a cluster"},
			"version 4 ", "no change for team orders\n",
		},
		{
			[]string{"-server", url, "route", "put", "-team", "orders", "-f", routeFile, "-m", "extra"},
			[]string{"--server", url, "route", "put", "--team", "orders", "--file=" + routeFile, "-m", "extra"},
			"version 5\n", "no change\n",
		},
		{
			[]string{"-server", url, "route", "delete", "-team", "orders", "orders.extra"},
			[]string{"--server", url, "route", "delete", "orders.extra", "--team", "orders"},
			"version 6\n", "",
		},
	} {
		code, out, errOut := ctl(t, env, tc.legacy...)
		if code != 0 || !strings.HasPrefix(out, tc.first) {
			t.Errorf("porticoctl %s = %d %q %q, want 0 and %q", strings.Join(tc.legacy, " "), code, out, errOut, tc.first)
		}
		code, out, errOut = ctl(t, env, tc.gnu...)
		if tc.second == "" {
			// A delete again: the route is gone.
			if code != 1 || !strings.Contains(errOut, "not_found") {
				t.Errorf("porticoctl %s = %d %q %q, want 1 and not_found", strings.Join(tc.gnu, " "), code, out, errOut)
			}
			continue
		}
		if code != 0 || out != tc.second {
			t.Errorf("porticoctl %s = %d %q %q, want 0 and %q", strings.Join(tc.gnu, " "), code, out, errOut, tc.second)
		}
	}
	_, legacy, _ := ctl(t, env, "-server", url, "versions", "-limit", "2")
	_, gnu, _ := ctl(t, env, "versions", "--limit=2", "--server", url)
	if legacy != gnu || strings.Count(legacy, "\n") < 2 {
		t.Errorf("versions -limit 2 printed %q, versions --limit=2 %q", legacy, gnu)
	}
}

// TestRouteDeleteSpellings: route delete takes its flags before and after
// the route's id, in either spelling, and the message reaches the version.
// The order its usage text gives, -team T ID -m MSG, once failed with
// "which route?".
func TestRouteDeleteSpellings(t *testing.T) {
	t.Parallel()
	url, token := server(t)
	env := map[string]string{"PORTICO_SERVER": url, "PORTICO_TOKEN": token}
	routeFile := filepath.Join(t.TempDir(), "route.yaml")
	if err := os.WriteFile(routeFile, []byte("id: orders.extra\npath: /v1/orders/extra\ncluster: orders\nauth: {public: true, reviewer: security}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := writeDir(t, map[string]string{"team.yaml": "team: orders\nclusters:\n  - name: orders\n    protocol: PROTOCOL_HTTP1\n    endpoints: [{address: \"127.0.0.1:9\"}]\n"})
	if code, _, errOut := ctl(t, env, "apply", "-f", dir, "-m", "a cluster"); code != 0 {
		t.Fatalf("apply = %d %q", code, errOut)
	}
	for i, args := range [][]string{
		{"-team", "orders", "orders.extra", "-m", "gone 0"},
		{"--team", "orders", "orders.extra", "-m", "gone 1"},
		{"orders.extra", "--team", "orders", "-m", "gone 2"},
		{"orders.extra", "-team", "orders", "-m", "gone 3"},
		{"-team=orders", "orders.extra", "-message", "gone 4"},
		{"-m", "gone 5", "orders.extra", "--team=orders"},
	} {
		if code, _, errOut := ctl(t, env, "route", "put", "--team", "orders", "-f", routeFile); code != 0 {
			t.Fatalf("route put = %d %q", code, errOut)
		}
		cmd := append([]string{"route", "delete"}, args...)
		code, out, errOut := ctl(t, env, cmd...)
		if code != 0 || !strings.HasSuffix(out, "\n- orders route orders.extra\n") {
			t.Errorf("porticoctl %s = %d %q %q, want 0 and the route deleted", strings.Join(cmd, " "), code, out, errOut)
			continue
		}
		want := fmt.Sprintf("gone %d", i)
		if _, versions, _ := ctl(t, env, "versions", "--limit", "1"); !strings.HasSuffix(strings.TrimSpace(versions), "  "+want) {
			t.Errorf("after porticoctl %s, versions = %q, want the message %q", strings.Join(cmd, " "), versions, want)
		}
	}
}
