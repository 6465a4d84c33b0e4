package keysvc_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/keysvc"
	"github.com/portico-gw/portico/testing/ghscan"
	"github.com/portico-gw/portico/testing/logbuf"
)

// rawKeyPattern matches a key longer than its display prefix.
var rawKeyPattern = regexp.MustCompile(`ak_(live|test)_[0-9A-Za-z]{5,}`)

// TestLogsHoldNoSecrets: at debug level, neither what the service does
// with keys nor the failures around it put a key or a token in the log.
func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	var buf logbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, priv := newSigningKey(t)
	gh := ghscan.NewKey(t, "")
	ks := ghscan.Start(t, ghscan.DocOf(t, gh))
	s := startService(t, keysvc.Options{Logger: log, SigningKey: priv, SnapshotTokenHash: svcauth.Hash(nodeToken),
		GitHub: &keysvc.GitHubOptions{KeysURL: ks.URL}})
	// A key service whose control plane is away: its new keys fail.
	down := startService(t, keysvc.Options{Logger: log, ControlURL: "http://" + closedAddr(t), WaitTimeout: time.Second})
	ctx := context.Background()

	var secrets []string
	created := s.create(t, "app-log")
	secrets = append(secrets, created.GetRawKey())
	rot, err := s.keys.RotateKey(ctx, connect.NewRequest(&keysv1.RotateKeyRequest{KeyId: created.GetKey().GetKeyId()}))
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, rot.Msg.GetRawKey())
	if _, err := down.keys.CreateKey(ctx, connect.NewRequest(&keysv1.CreateKeyRequest{AppId: "app-log", TenantId: "t-1", Plan: "gold", Env: keysv1.Environment_ENVIRONMENT_TEST})); err == nil {
		t.Fatal("CreateKey with the control plane away succeeded")
	}

	// Calls with tokens that are refused.
	const guess = "guessed-token-0123456789abcdef"
	secrets = append(secrets, platformToken, identityToken, nodeToken, guess)
	for _, token := range []string{guess, identityToken} {
		_, err := keysv1connect.NewKeyServiceClient(bearer(token), s.url).ListKeys(ctx, connect.NewRequest(&keysv1.ListKeysRequest{}))
		if err == nil {
			t.Fatalf("ListKeys with a refused token succeeded")
		}
	}
	if resp, _ := fetch(t, s, "GET", "Authorization", "Bearer "+guess); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the snapshot with a wrong token: %d", resp.StatusCode)
	}

	// Leak reports: accepted, forged, and malformed.
	forger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	body := leakBody(t, leak{Token: rot.Msg.GetRawKey(), Type: "portico_api_key", URL: "https://github.com/o/r", Source: "content"},
		leak{Token: created.GetRawKey(), Type: "portico_api_key", URL: "https://github.com/o/r", Source: "content"})
	h, err := keysvc.SignReport(scannerID, forger, time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", s.url+keysvc.LeakPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a forged report: %d", resp.StatusCode)
	}
	if status, b := report(t, s, "POST", []byte("token="+created.GetRawKey())); status != http.StatusBadRequest {
		t.Fatalf("a malformed report: %d %s", status, b)
	}
	if status, b := report(t, s, "POST", body); status != http.StatusOK {
		t.Fatalf("a report: %d %s", status, b)
	}

	// GitHub's reports: forged, and accepted.
	found := s.create(t, "app-log")
	secrets = append(secrets, found.GetRawKey())
	ghBody := leakBody(t, leak{Token: found.GetRawKey(), Type: "portico_api_key", URL: "https://github.com/o/r", Source: "content"})
	if status, b := ghPost(t, s, "POST", ghscan.NewKey(t, gh.ID).Sign(t, ghBody), ghBody); status != http.StatusUnauthorized {
		t.Fatalf("a forged GitHub report: %d %s", status, b)
	}
	if status, b := ghPost(t, s, "POST", gh.Sign(t, ghBody), ghBody); status != http.StatusOK {
		t.Fatalf("GitHub's report: %d %s", status, b)
	}

	logged := buf.String()
	// The log says what happened, so its silence about secrets means
	// something.
	for _, want := range []string{"key created", "key rotated", "a new key could not be published", "leaked-key report refused", "leaked key revoked",
		created.GetKey().GetKeyId(), rot.Msg.GetKey().GetKeyId(), found.GetKey().GetKeyId(), "GitHub's secret scanning public keys loaded", `"scanner":"github"`} {
		if !strings.Contains(logged, want) {
			t.Errorf("the log lacks %q:\n%s", want, logged)
		}
	}
	for _, secret := range secrets {
		if strings.Contains(logged, secret) || (strings.HasPrefix(secret, "ak_") && strings.Contains(logged, secret[12:])) {
			t.Errorf("the log holds the secret %.12s…:\n%s", secret, logged)
		}
		if strings.Contains(logged, svcauth.Hash(secret)) {
			t.Errorf("the log holds the hash of the secret %.12s…", secret)
		}
	}
	if m := rawKeyPattern.FindString(logged); m != "" {
		t.Errorf("the log holds a key (%.12s…):\n%s", m, logged)
	}
}
