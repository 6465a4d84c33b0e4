package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/ghscan"
)

// githubReport posts GitHub's report of tokens (as type portico_api_key,
// found at url) to base's GitHub path, signed by k, and returns the
// status and the labels of the feedback.
func githubReport(t *testing.T, base string, k ghscan.Key, url string, tokens ...string) (int, []string) {
	t.Helper()
	var matches []map[string]string
	for _, tok := range tokens {
		matches = append(matches, map[string]string{"token": tok, "type": "portico_api_key", "url": url, "source": "content"})
	}
	body, err := json.Marshal(matches)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", base+"/v1/leaked-keys/github", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = k.Sign(t, body)
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var feedback []struct{ Label string }
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, &feedback); err != nil {
			t.Fatalf("GitHub's report: 200 %s, not feedback: %v", b, err)
		}
	}
	labels := make([]string, len(feedback))
	for i, f := range feedback {
		labels[i] = f.Label
	}
	return resp.StatusCode, labels
}

// TestKeysRoleGitHub runs `portico keys -github-secret-scanning` with
// GitHub's keys from a loopback server: GitHub's report of one of its
// keys revokes it, by GitHub, and a forged one is refused.
func TestKeysRoleGitHub(t *testing.T) {
	dir := t.TempDir()
	const token = "keys-role-github-test-platform-token-0123456789"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gh := ghscan.NewKey(t, "")
	keysDoc := ghscan.Start(t, ghscan.DocOf(t, gh))
	addr := freeAddr(t)
	ks := start(t, "keys", "-listen", addr, "-store", "sqlite:"+filepath.Join(dir, "keys.db"), "-token-file", tokenFile,
		"-signing-key-file", filepath.Join(dir, "signing.pem"), "-github-secret-scanning", "-github-keys-url", keysDoc.URL)
	ks.waitLine(t, regexp.MustCompile(`taking GitHub's secret scanning reports`))
	ks.waitLine(t, regexp.MustCompile(`key service listening`))

	ctx := context.Background()
	keys := keysv1connect.NewKeyServiceClient(admintest.HTTPClient(token), "http://"+addr)
	created, err := keys.CreateKey(ctx, connect.NewRequest(&keysv1.CreateKeyRequest{AppId: "app-1", TenantId: "t-1", Plan: "gold",
		Env: keysv1.Environment_ENVIRONMENT_LIVE}))
	if err != nil {
		t.Fatal(err)
	}
	raw, id := created.Msg.GetRawKey(), created.Msg.GetKey().GetKeyId()

	if status, labels := githubReport(t, "http://"+addr, ghscan.NewKey(t, gh.ID), "https://github.com/o/r", raw); status != http.StatusUnauthorized {
		t.Errorf("a forged report: %d %v, want 401", status, labels)
	}
	status, labels := githubReport(t, "http://"+addr, gh, "https://github.com/o/r/blob/main/.env", raw, "ak_live_not-one-of-ours")
	if status != 200 || strings.Join(labels, " ") != "true_positive false_positive" {
		t.Fatalf("GitHub's report: %d %v, want 200 [true_positive false_positive]", status, labels)
	}
	got, err := keys.GetKey(ctx, connect.NewRequest(&keysv1.GetKeyRequest{KeyId: id}))
	if err != nil {
		t.Fatal(err)
	}
	if k := got.Msg.GetKey(); k.GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED || k.GetRevokedBy() != "scanner:github" ||
		!strings.Contains(k.GetRevokeReason(), "https://github.com/o/r/blob/main/.env") {
		t.Errorf("the key GitHub reported: %v by %q for %q, want revoked by scanner:github for its URL", k.GetStatus(), k.GetRevokedBy(), k.GetRevokeReason())
	}
	if n := keysDoc.Fetches(); n != 1 {
		t.Errorf("GitHub's keys fetched %d times, want once", n)
	}
	if strings.Contains(ks.output(), raw[12:]) {
		t.Error("the key service logged the reported key")
	}
}

// TestKeysRoleGitHubFlags: GitHub's flags that cannot work stop `portico
// keys` at start, with an error that names them.
func TestKeysRoleGitHubFlags(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("keys-role-github-flags-platform-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"public_keys":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	scannerPub := filepath.Join(dir, "scanner.pub.pem")
	if err := os.WriteFile(scannerPub, []byte(ghscan.NewKey(t, "").PEM), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := portico(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-github-keys-file", bad}, "-github-keys-file needs -github-secret-scanning"},
		{[]string{"-github-keys-url", "https://example.com/keys"}, "-github-keys-url needs -github-secret-scanning"},
		{[]string{"-github-secret-scanning", "-github-keys-url", "example.com/keys"}, "want an http(s) URL"},
		{[]string{"-github-secret-scanning", "-github-keys-file", filepath.Join(dir, "missing.json")}, "missing.json"},
		{[]string{"-github-secret-scanning", "-github-keys-file", bad}, "no usable key"},
		{[]string{"-scanner", "github=" + scannerPub}, `the scanner id "github" is GitHub's own protocol's`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		args := append([]string{"keys", "-listen", "127.0.0.1:0", "-store", "sqlite:" + filepath.Join(dir, "k.db"), "-token-file", tokenFile,
			"-signing-key-file", filepath.Join(dir, "signing.pem")}, c.args...)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("portico keys %v: %v, output %q; want a failure naming %q", c.args, err, out, c.want)
		}
	}
}
