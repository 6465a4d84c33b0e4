package keysvc_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/keysvc"
)

// TestRunNeedsToken: the key API is never open.
func TestRunNeedsToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	err := keysvc.Run(context.Background(), keysvc.Options{StoreDSN: "sqlite:" + filepath.Join(dir, "k.db"), Listen: "127.0.0.1:0"})
	if !errors.Is(err, keysvc.ErrNoTokens) {
		t.Errorf("Run without tokens = %v, want ErrNoTokens", err)
	}
}

// TestLoadSigningKey: a missing key is made, with its public key beside
// it; the same file read again is the same key; a file that is not an
// Ed25519 PKCS #8 key is refused.
func TestLoadSigningKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "signing.pem")
	k1, err := keysvc.LoadSigningKey(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the made key's file: %v, %v; want mode 0600", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "signing.pub.pem")); err != nil {
		t.Errorf("no public key beside the made one: %v", err)
	}
	k2, err := keysvc.LoadSigningKey(path, nil)
	if err != nil || !k1.Equal(k2) {
		t.Errorf("reading the key again: %v, same key %v", err, k1.Equal(k2))
	}
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := keysvc.LoadSigningKey(bad, nil); err == nil {
		t.Error("LoadSigningKey of a file that is not PEM = nil error")
	}
}

// TestRun: Run opens the store and the signing key it is told of, serves
// the signed snapshot signed with that key, and returns nil once its
// context ends, leaving the store closed and reopenable.
func TestRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	signing := filepath.Join(dir, "signing.pem")
	if _, err := keysvc.LoadSigningKey(signing, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const token = "keysvc-run-test-platform-token-0123456789"
	opts := keysvc.Options{StoreDSN: "sqlite:" + filepath.Join(dir, "k.db"), SigningKeyFile: signing, Listener: ln,
		Tokens: []keysvc.Token{{Name: "platform", Role: keysvc.RolePlatform, SHA256: svcauth.Hash(token)}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- keysvc.Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	resp, err := http.Get("http://" + ln.Addr().String() + keysvc.SnapshotPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d, want 200", keysvc.SnapshotPath, resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v after its context ended, want nil", err)
	}
	done <- nil
	// The store was closed: Open takes it again.
	opts.Listener = nil
	s, err := keysvc.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}
