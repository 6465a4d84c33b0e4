package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
)

const keysToken = "kst_porticoctl-test-keys-token"

// keysEnv is the environment of a porticoctl that reaches the fake key
// service at url with keysToken, and a control plane that is not there.
func keysEnv(url string) map[string]string {
	return map[string]string{"PORTICO_SERVER": "http://127.0.0.1:1", "PORTICO_TOKEN": "admin-token", "PORTICO_KEYS_SERVER": url, "PORTICO_KEYS_TOKEN": keysToken}
}

// only returns the one recorded request, failing unless there is exactly
// one, of procedure, sent with keysToken.
func only[T proto.Message](t *testing.T, f *fakeKeys, procedure string) T {
	t.Helper()
	calls := f.requests()
	if len(calls) != 1 || calls[0].procedure != procedure {
		t.Fatalf("calls = %v, want one %s", calls, procedure)
	}
	if calls[0].auth != "Bearer "+keysToken {
		t.Errorf("Authorization = %q, want the key service's token", calls[0].auth)
	}
	return calls[0].msg.(T)
}

func TestKeysCreate(t *testing.T) {
	t.Parallel()
	f, url := keyService(t)
	code, out, errOut := ctl(t, keysEnv(url), "keys", "create", "--app", "shop", "--tenant", "acme", "--plan", "gold",
		"--scope", "orders:read", "--scope", "orders:write", "--env", "test", "--priority", "paid", "--not-after", "2027-01-02T03:04:05Z", "--wait", "30s")
	if code != 0 {
		t.Fatalf("keys create = %d %q %q", code, out, errOut)
	}
	req := only[*keysv1.CreateKeyRequest](t, f, keysv1connect.KeyServiceCreateKeyProcedure)
	want := &keysv1.CreateKeyRequest{AppId: "shop", TenantId: "acme", Plan: "gold", Scopes: []string{"orders:read", "orders:write"},
		Env: keysv1.Environment_ENVIRONMENT_TEST, Priority: configv1.Priority_PRIORITY_PAID,
		NotAfter: timestamppb.New(time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)), WaitTimeout: durationpb.New(30 * time.Second)}
	if !proto.Equal(req, want) {
		t.Errorf("CreateKey(%v), want %v", req, want)
	}
	wantOut := "created key key_01 (" + fakePrefix + "): app shop, tenant acme, plan gold, env test\n" +
		"it stops at 2027-01-02T03:04:05Z\n" +
		"\nAPI key (store it now; it cannot be shown again):\n  " + fakeRawKey + "\n"
	if out != wantOut || errOut != "" {
		t.Errorf("keys create printed %q %q, want %q", out, errOut, wantOut)
	}

	// The defaults: a live key, the plan's priority, never ending, 10 s
	// for the nodes.
	f, url = keyService(t)
	if code, out, errOut = ctl(t, keysEnv(url), "keys", "create", "--app", "shop", "--tenant", "acme", "--plan", "gold"); code != 0 {
		t.Fatalf("keys create = %d %q %q", code, out, errOut)
	}
	req = only[*keysv1.CreateKeyRequest](t, f, keysv1connect.KeyServiceCreateKeyProcedure)
	want = &keysv1.CreateKeyRequest{AppId: "shop", TenantId: "acme", Plan: "gold", Env: keysv1.Environment_ENVIRONMENT_LIVE, WaitTimeout: durationpb.New(10 * time.Second)}
	if !proto.Equal(req, want) {
		t.Errorf("CreateKey(%v), want %v", req, want)
	}
	if strings.Contains(out, "stops at") || strings.Count(out, fakeSecret) != 1 {
		t.Errorf("keys create printed %q", out)
	}

	// JSON, for scripts: the whole answer, the key in it once.
	if code, out, errOut = ctl(t, keysEnv(url), "--output", "json", "keys", "create", "--app", "shop", "--tenant", "acme", "--plan", "gold"); code != 0 {
		t.Fatalf("keys create --output json = %d %q %q", code, out, errOut)
	}
	var js struct {
		RawKey string `json:"rawKey"`
		Key    struct {
			KeyID  string `json:"keyId"`
			Prefix string `json:"prefix"`
		} `json:"key"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil || js.RawKey != fakeRawKey || js.Key.KeyID != "key_01" || js.Key.Prefix != fakePrefix || strings.Count(out, fakeSecret) != 1 {
		t.Errorf("keys create --output json printed %q (%v)", out, err)
	}
}

// TestKeysCreateNotEveryNode: when some node lacks the key at the
// timeout the service answers so, naming the nodes; porticoctl prints
// that answer, and no key.
func TestKeysCreateNotEveryNode(t *testing.T) {
	t.Parallel()
	for code, msg := range map[connect.Code]string{
		connect.CodeDeadlineExceeded: "key not confirmed: 2 of 5 nodes had not acknowledged fast-lane version 9 after 10s: gw-eu-1 (at version 8), gw-us-3 (at version 8); the key was withdrawn, try again",
		connect.CodeUnavailable:      "key not confirmed: the control plane could not be reached; the key was withdrawn, try again",
	} {
		f, url := keyService(t)
		f.setFail(keysv1connect.KeyServiceCreateKeyProcedure, connect.NewError(code, errors.New(msg)))
		exit, out, errOut := ctl(t, keysEnv(url), "keys", "create", "--app", "shop", "--tenant", "acme", "--plan", "gold")
		if want := "porticoctl keys create: " + code.String() + ": " + msg + "\n"; exit != 1 || out != "" || errOut != want {
			t.Errorf("keys create (%s) = %d %q %q, want 1 and %q", code, exit, out, errOut, want)
		}
	}
	// A key service that is not there made no key.
	exit, _, errOut := ctl(t, keysEnv("http://127.0.0.1:1"), "keys", "create", "--app", "shop", "--tenant", "acme", "--plan", "gold")
	if exit != 1 || !strings.HasPrefix(errOut, "porticoctl keys create: unavailable: ") || strings.Contains(errOut, "no answer came") {
		t.Errorf("keys create with no key service = %d %q", exit, errOut)
	}
}

// TestKeysCutOff: a create or rotate that got no answer may have done its
// work unseen; porticoctl says how to find out.
func TestKeysCutOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "create", "--app", "shop", "--tenant", "acme", "--plan", "gold"},
			"porticoctl keys create: no answer came; a key may exist that nobody has seen: look for it with porticoctl keys list --app shop, and revoke it\n"},
		{[]string{"keys", "rotate", "key_00"},
			"porticoctl keys rotate: no answer came; the key may have been rotated: porticoctl keys get key_00 shows its successor and end\n"},
	} {
		f, url := keyService(t)
		f.hold = make(chan struct{})
		env := keysEnv(url)
		ctx, cancel := context.WithCancel(context.Background())
		type result struct {
			code        int
			out, errOut string
		}
		done := make(chan result, 1)
		go func() {
			var stdout, stderr bytes.Buffer
			code := run(ctx, tc.args, &stdout, &stderr, func(k string) string { return env[k] })
			done <- result{code, stdout.String(), stderr.String()}
		}()
		select {
		case <-f.hold:
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: the call never came", tc.args)
		}
		cancel()
		select {
		case r := <-done:
			if r.code != 1 || r.out != "" || !strings.HasSuffix(r.errOut, tc.want) || strings.Contains(r.errOut, fakeSecret) {
				t.Errorf("%v, interrupted = %d %q %q, want 1 and %q", tc.args, r.code, r.out, r.errOut, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: porticoctl did not give up", tc.args)
		}
	}

	// A connection lost mid-call is no answer either.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	code, out, errOut := ctl(t, keysEnv(srv.URL), "keys", "create", "--app", "shop", "--tenant", "acme", "--plan", "gold")
	if code != 1 || out != "" || !strings.HasSuffix(errOut, "porticoctl keys create: no answer came; a key may exist that nobody has seen: look for it with porticoctl keys list --app shop, and revoke it\n") {
		t.Errorf("keys create, connection lost = %d %q %q", code, out, errOut)
	}
}

func TestKeysRotate(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args    []string
		overlap time.Duration
		wait    time.Duration
		stops   string
	}{
		"defaults":         {[]string{"key_00"}, 24 * time.Hour, 10 * time.Second, "2026-11-30T18:00:00Z"},
		"flags after id":   {[]string{"key_00", "--overlap", "1h", "--wait", "5s"}, time.Hour, 5 * time.Second, "2026-11-29T19:00:00Z"},
		"flags before id":  {[]string{"--overlap", "0s", "key_00"}, 0, 10 * time.Second, "2026-11-29T18:00:00Z"},
		"flags around id":  {[]string{"--overlap", "2h", "key_00", "--wait", "1m"}, 2 * time.Hour, time.Minute, "2026-11-29T20:00:00Z"},
		"longest overlaps": {[]string{"key_00", "--overlap", "720h", "--wait", "2m"}, 720 * time.Hour, 2 * time.Minute, "2026-12-29T18:00:00Z"},
	} {
		f, url := keyService(t)
		code, out, errOut := ctl(t, keysEnv(url), append([]string{"keys", "rotate"}, tc.args...)...)
		if code != 0 {
			t.Errorf("%s: keys rotate = %d %q %q", name, code, out, errOut)
			continue
		}
		req := only[*keysv1.RotateKeyRequest](t, f, keysv1connect.KeyServiceRotateKeyProcedure)
		want := &keysv1.RotateKeyRequest{KeyId: "key_00", Overlap: durationpb.New(tc.overlap), WaitTimeout: durationpb.New(tc.wait)}
		if !proto.Equal(req, want) {
			t.Errorf("%s: RotateKey(%v), want %v", name, req, want)
		}
		wantOut := "created key key_02 (" + fakePrefix + "): app shop, tenant acme, plan gold, env live\n" +
			"key key_00 (ak_live_Old1) stops at " + tc.stops + "\n" +
			"\nAPI key (store it now; it cannot be shown again):\n  " + fakeRawKey + "\n"
		if out != wantOut {
			t.Errorf("%s: keys rotate printed %q, want %q", name, out, wantOut)
		}
	}
	_, url := keyService(t)
	code, out, _ := ctl(t, keysEnv(url), "--output", "json", "keys", "rotate", "key_00")
	var js struct {
		RawKey   string                    `json:"rawKey"`
		Previous struct{ NotAfter string } `json:"previous"`
	}
	if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || js.RawKey != fakeRawKey || js.Previous.NotAfter != "2026-11-30T18:00:00Z" || strings.Count(out, fakeSecret) != 1 {
		t.Errorf("keys rotate --output json = %d %q (%v)", code, out, err)
	}
}

func TestKeysRevoke(t *testing.T) {
	t.Parallel()
	f, url := keyService(t)
	code, out, errOut := ctl(t, keysEnv(url), "keys", "revoke", "key_00", "--reason", "leaked in a log")
	if code != 0 || out != "revoked key key_00 (ak_live_Old1) of app shop\non the fast lane as version 42\n" || errOut != "" {
		t.Errorf("keys revoke = %d %q %q", code, out, errOut)
	}
	if req := only[*keysv1.RevokeKeyRequest](t, f, keysv1connect.KeyServiceRevokeKeyProcedure); req.GetKeyId() != "key_00" || req.GetReason() != "leaked in a log" {
		t.Errorf("RevokeKey(%v)", req)
	}

	// --app revokes every active key of the app, with RevokeApp.
	f, url = keyService(t)
	f.keys = testKeys()
	code, out, errOut = ctl(t, keysEnv(url), "keys", "revoke", "--app", "shop", "--reason", "app retired")
	if code != 0 || out != "revoked 3 keys of app shop\n  key_01 (ak_live_Aa01)\n  key_02 (ak_test_Bb02)\n  key_04 (ak_live_Dd04)\non the fast lane as version 42\n" || errOut != "" {
		t.Errorf("keys revoke --app = %d %q %q", code, out, errOut)
	}
	if req := only[*keysv1.RevokeAppRequest](t, f, keysv1connect.KeyServiceRevokeAppProcedure); req.GetAppId() != "shop" || req.GetReason() != "app retired" {
		t.Errorf("RevokeApp(%v)", req)
	}
	if code, out, _ = ctl(t, keysEnv(url), "keys", "revoke", "--app", "nobody"); code != 0 || out != "app nobody has no active keys\n" {
		t.Errorf("keys revoke --app nobody = %d %q", code, out)
	}

	// Version 0: committed, but the control plane was not reached.
	f, url = keyService(t)
	f.version = 0
	code, out, errOut = ctl(t, keysEnv(url), "keys", "revoke", "key_00")
	if code != 0 || out != "revoked key key_00 (ak_live_Old1) of app shop\n" || !strings.Contains(errOut, "reaches the nodes with the next snapshot") {
		t.Errorf("keys revoke, no fast lane = %d %q %q", code, out, errOut)
	}
	code, out, _ = ctl(t, keysEnv(url), "--output", "json", "keys", "revoke", "key_00")
	var js struct{ Key struct{ Status string } }
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || js.Key.Status != "KEY_STATUS_REVOKED" {
		t.Errorf("keys revoke --output json = %d %q", code, out)
	}
}

// TestKeysRevokeWaits: keys revoke waits (10 s unless --wait says
// otherwise, --wait 0 not at all) for every node to have the revocation,
// and says whether they all do; a revocation some nodes lack is still
// committed, so the command succeeds and names them.
func TestKeysRevokeWaits(t *testing.T) {
	t.Parallel()
	f, url := keyService(t)
	f.propagation = &keysv1.Propagation{State: keysv1.Propagation_STATE_COMPLETE, Nodes: 3}
	code, out, errOut := ctl(t, keysEnv(url), "keys", "revoke", "key_00")
	if code != 0 || out != "revoked key key_00 (ak_live_Old1) of app shop\non the fast lane as version 42\nevery node has it (3 connected)\n" || errOut != "" {
		t.Errorf("keys revoke, every node = %d %q %q", code, out, errOut)
	}
	if req := only[*keysv1.RevokeKeyRequest](t, f, keysv1connect.KeyServiceRevokeKeyProcedure); req.GetWaitForNodes().AsDuration() != 10*time.Second {
		t.Errorf("RevokeKey(%v), want a 10 s wait", req)
	}

	f, url = keyService(t)
	f.keys = testKeys()
	f.propagation = &keysv1.Propagation{State: keysv1.Propagation_STATE_INCOMPLETE, Nodes: 5, Behind: []*keysv1.LaggingNode{{NodeId: "gw-eu-1", Version: 41}, {NodeId: "gw-us-3", Version: 40, Error: "bad entry"}}}
	code, out, errOut = ctl(t, keysEnv(url), "keys", "revoke", "--app", "shop", "--wait", "3s")
	if code != 0 || !strings.HasSuffix(out, "on the fast lane as version 42\n") ||
		errOut != "porticoctl keys revoke: 2 of 5 nodes did not have it after 3s: gw-eu-1 (at version 41), gw-us-3 (at version 40, refused: bad entry); the change is committed and reaches them when they catch up\n" {
		t.Errorf("keys revoke --app, nodes behind = %d %q %q", code, out, errOut)
	}
	if req := only[*keysv1.RevokeAppRequest](t, f, keysv1connect.KeyServiceRevokeAppProcedure); req.GetWaitForNodes().AsDuration() != 3*time.Second {
		t.Errorf("RevokeApp(%v), want a 3 s wait", req)
	}

	for state, want := range map[keysv1.Propagation_State]string{
		keysv1.Propagation_STATE_UNREACHED:    "could not say which nodes have it",
		keysv1.Propagation_STATE_NO_FAST_LANE: "nodes get the change with the next signed snapshot",
	} {
		f, url = keyService(t)
		f.propagation = &keysv1.Propagation{State: state}
		if code, out, errOut = ctl(t, keysEnv(url), "keys", "revoke", "key_00"); code != 0 || strings.Contains(out, "every node") || !strings.Contains(errOut, want) {
			t.Errorf("keys revoke, %v = %d %q %q", state, code, out, errOut)
		}
	}
	f, url = keyService(t)
	f.propagation = &keysv1.Propagation{State: keysv1.Propagation_STATE_COMPLETE}
	if code, out, _ = ctl(t, keysEnv(url), "keys", "revoke", "key_00"); code != 0 || !strings.HasSuffix(out, "no node is connected to the fast lane\n") {
		t.Errorf("keys revoke, no node connected = %d %q", code, out)
	}

	f, url = keyService(t)
	if code, _, errOut = ctl(t, keysEnv(url), "keys", "revoke", "key_00", "--wait", "0"); code != 0 || errOut != "" {
		t.Errorf("keys revoke --wait 0 = %d %q", code, errOut)
	}
	if req := only[*keysv1.RevokeKeyRequest](t, f, keysv1connect.KeyServiceRevokeKeyProcedure); req.GetWaitForNodes() != nil {
		t.Errorf("RevokeKey(%v) with --wait 0, want no wait", req)
	}
	for _, wait := range []string{"3m", "-1s"} {
		if code, _, errOut = ctl(t, keysEnv(url), "keys", "revoke", "key_00", "--wait", wait); code != 2 || !strings.Contains(errOut, "--wait is at least 0 and at most 2m0s") {
			t.Errorf("keys revoke --wait %s = %d %q, want a usage error", wait, code, errOut)
		}
	}
}

// testKeys are app shop's keys: two active (one a test key), one revoked,
// one expired, and one of app other.
func testKeys() []*keysv1.Key {
	created := timestamppb.New(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	active, revoked := configv1.KeyStatus_KEY_STATUS_ACTIVE, configv1.KeyStatus_KEY_STATUS_REVOKED
	live, test := keysv1.Environment_ENVIRONMENT_LIVE, keysv1.Environment_ENVIRONMENT_TEST
	return []*keysv1.Key{
		{KeyId: "key_01", Prefix: "ak_live_Aa01", AppId: "shop", TenantId: "acme", Plan: "gold", Env: live, Status: active, Created: created,
			Scopes: []string{"orders:read", "orders:write"}, Priority: configv1.Priority_PRIORITY_PAID, SuccessorKeyId: "key_05", NotAfter: timestamppb.New(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)), Rev: 12},
		{KeyId: "key_02", Prefix: "ak_test_Bb02", AppId: "shop", TenantId: "acme", Plan: "gold", Env: test, Status: active, Created: created},
		{KeyId: "key_03", Prefix: "ak_live_Cc03", AppId: "shop", TenantId: "acme", Plan: "gold", Env: live, Status: revoked, Created: created,
			Revoked: timestamppb.New(time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)), RevokedBy: "scanner:github", RevokeReason: "found in a public repository"},
		{KeyId: "key_04", Prefix: "ak_live_Dd04", AppId: "shop", TenantId: "beta", Plan: "free", Env: live, Status: active, Created: created,
			NotAfter: timestamppb.New(time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC))},
		{KeyId: "key_05", Prefix: "ak_live_Ee05", AppId: "other", TenantId: "acme", Plan: "gold", Env: live, Status: active, Created: created},
	}
}

func TestKeysList(t *testing.T) {
	t.Parallel()
	f, url := keyService(t)
	f.keys = testKeys()
	code, out, errOut := ctl(t, keysEnv(url), "keys", "list", "--app", "shop")
	want := `KEY ID  PREFIX        APP   TENANT  PLAN  ENV   STATUS  CREATED               NOT AFTER
key_01  ak_live_Aa01  shop  acme    gold  live  active  2026-11-01T09:00:00Z  2099-01-01T00:00:00Z
key_02  ak_test_Bb02  shop  acme    gold  test  active  2026-11-01T09:00:00Z  -
`
	if code != 0 || out != want || errOut != "" {
		t.Errorf("keys list = %d %q %q, want\n%s", code, out, errOut, want)
	}
	// Four keys of shop, two a page: two pages, each with the filter.
	calls := f.requests()
	var tokens []string
	for _, c := range calls {
		req := c.msg.(*keysv1.ListKeysRequest)
		if req.GetAppId() != "shop" || req.GetTenantId() != "" || c.auth != "Bearer "+keysToken {
			t.Errorf("ListKeys(%v) with %q", req, c.auth)
		}
		tokens = append(tokens, req.GetPageToken())
	}
	if strings.Join(tokens, ",") != ",2" {
		t.Errorf("page tokens = %q, want \"\" and 2", tokens)
	}

	code, out, _ = ctl(t, keysEnv(url), "keys", "list", "--all", "--tenant", "acme")
	if lines := strings.Split(out, "\n"); code != 0 || len(lines) != 6 ||
		strings.Join(strings.Fields(lines[3]), " ") != "key_03 ak_live_Cc03 shop acme gold live revoked 2026-11-01T09:00:00Z -" || !strings.HasPrefix(lines[4], "key_05 ") {
		t.Errorf("keys list --all --tenant acme = %d %q", code, out)
	}
	code, out, _ = ctl(t, keysEnv(url), "keys", "list", "--all", "--tenant", "beta")
	if code != 0 || !strings.Contains(out, "key_04  ak_live_Dd04  shop  beta    free  live  expired  ") {
		t.Errorf("keys list --all --tenant beta = %d %q", code, out)
	}

	// Every key, five: three pages, in one JSON answer.
	n := len(f.requests())
	code, out, _ = ctl(t, keysEnv(url), "--output", "json", "keys", "list", "--all")
	var js struct {
		Keys          []struct{ KeyID string } `json:"keys"`
		NextPageToken string                   `json:"nextPageToken"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || len(js.Keys) != 5 || js.Keys[4].KeyID != "key_05" || js.NextPageToken != "" {
		t.Errorf("keys list --output json = %d %q", code, out)
	}
	tokens = nil
	for _, c := range f.requests()[n:] {
		tokens = append(tokens, c.msg.(*keysv1.ListKeysRequest).GetPageToken())
	}
	if strings.Join(tokens, ",") != ",2,4" {
		t.Errorf("page tokens = %q, want \"\", 2 and 4", tokens)
	}

	// A service that hands out the same page token again would page
	// forever.
	f.mu.Lock()
	f.stuckToken = "0"
	f.mu.Unlock()
	if code, out, errOut = ctl(t, keysEnv(url), "keys", "list"); code != 1 || out != "" || !strings.Contains(errOut, `answered page token "0" twice`) {
		t.Errorf("keys list, stuck paging = %d %q %q", code, out, errOut)
	}

	// No keys: the header alone.
	_, url = keyService(t)
	if code, out, _ = ctl(t, keysEnv(url), "keys", "list"); code != 0 || !strings.HasPrefix(out, "KEY ID") || strings.Count(out, "\n") != 1 {
		t.Errorf("keys list of none = %d %q", code, out)
	}
}

func TestKeysGet(t *testing.T) {
	t.Parallel()
	f, url := keyService(t)
	f.keys = testKeys()
	code, out, errOut := ctl(t, keysEnv(url), "keys", "get", "key_01")
	want := `key id     key_01
prefix     ak_live_Aa01
app        shop
tenant     acme
plan       gold
scopes     orders:read orders:write
env        live
priority   paid
status     active
created    2026-11-01T09:00:00Z
not after  2099-01-01T00:00:00Z
successor  key_05
rev        12
`
	if code != 0 || out != want || errOut != "" {
		t.Errorf("keys get = %d %q %q, want\n%s", code, out, errOut, want)
	}
	if req := only[*keysv1.GetKeyRequest](t, f, keysv1connect.KeyServiceGetKeyProcedure); req.GetKeyId() != "key_01" {
		t.Errorf("GetKey(%v)", req)
	}
	if code, out, _ = ctl(t, keysEnv(url), "keys", "get", "key_03"); code != 0 ||
		!strings.Contains(out, "status      revoked\n") || !strings.Contains(out, "revoked by  scanner:github\nreason      found in a public repository\n") {
		t.Errorf("keys get revoked = %d %q", code, out)
	}
	code, out, _ = ctl(t, keysEnv(url), "--output", "json", "keys", "get", "key_01")
	var js struct {
		Key struct{ KeyID, Priority string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || js.Key.KeyID != "key_01" || js.Key.Priority != "PRIORITY_PAID" {
		t.Errorf("keys get --output json = %d %q", code, out)
	}
	if code, _, errOut = ctl(t, keysEnv(url), "keys", "get", "key_99"); code != 1 || errOut != "porticoctl keys get: not_found: no key key_99\n" {
		t.Errorf("keys get key_99 = %d %q", code, errOut)
	}
}

// TestKeysServerErrors: every command prints a refusal's code and message
// and exits 1.
func TestKeysServerErrors(t *testing.T) {
	t.Parallel()
	f, url := keyService(t)
	denied := connect.NewError(connect.CodePermissionDenied, errors.New("token app-ci may not manage keys"))
	for _, p := range []string{
		keysv1connect.KeyServiceCreateKeyProcedure, keysv1connect.KeyServiceRotateKeyProcedure, keysv1connect.KeyServiceRevokeKeyProcedure,
		keysv1connect.KeyServiceRevokeAppProcedure, keysv1connect.KeyServiceGetKeyProcedure, keysv1connect.KeyServiceListKeysProcedure,
		keysv1connect.TokenServiceDenyProcedure, keysv1connect.TokenServiceListDenyEntriesProcedure,
	} {
		f.setFail(p, denied)
	}
	for _, args := range [][]string{
		{"keys", "create", "--app", "shop", "--tenant", "acme", "--plan", "gold"},
		{"keys", "rotate", "key_00"},
		{"keys", "revoke", "key_00"},
		{"keys", "revoke", "--app", "shop"},
		{"keys", "get", "key_00"},
		{"keys", "list"},
		{"deny", "add", "--jti", "abc"},
		{"deny", "list"},
	} {
		cmd := strings.Join(args[:2], " ")
		code, out, errOut := ctl(t, keysEnv(url), args...)
		if code != 1 || out != "" || errOut != "porticoctl "+cmd+": permission_denied: token app-ci may not manage keys\n" {
			t.Errorf("%s = %d %q %q, want 1 and the code and message", args, code, out, errOut)
		}
	}
}

// TestKeysServerAndToken: the key service's address and token have their
// own flags and variables, and default to the control plane's.
func TestKeysServerAndToken(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "keys.token")
	if err := os.WriteFile(tokenFile, []byte("from-the-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		env      map[string]string
		flags    []string
		wantAuth string
	}{
		"own variables":          {map[string]string{"PORTICO_SERVER": "http://127.0.0.1:1", "PORTICO_TOKEN": "admin", "PORTICO_KEYS_SERVER": "URL", "PORTICO_KEYS_TOKEN": "keys"}, nil, "Bearer keys"},
		"the control plane's":    {map[string]string{"PORTICO_SERVER": "URL", "PORTICO_TOKEN": "admin"}, nil, "Bearer admin"},
		"--server":               {map[string]string{"PORTICO_TOKEN": "admin"}, []string{"--server", "URL"}, "Bearer admin"},
		"--keys-server wins":     {map[string]string{"PORTICO_SERVER": "URL", "PORTICO_KEYS_SERVER": "http://127.0.0.1:1"}, []string{"--keys-server", "URL"}, ""},
		"--keys-token-file wins": {map[string]string{"PORTICO_KEYS_SERVER": "URL", "PORTICO_TOKEN": "admin", "PORTICO_KEYS_TOKEN": "keys"}, []string{"--keys-token-file", tokenFile}, "Bearer from-the-file"},
		"admin token from -file": {map[string]string{"PORTICO_KEYS_SERVER": "URL", "PORTICO_TOKEN": "admin"}, []string{"--token-file", tokenFile}, "Bearer from-the-file"},
	} {
		f, url := keyService(t)
		for k, v := range tc.env {
			if v == "URL" {
				tc.env[k] = url
			}
		}
		for i, v := range tc.flags {
			if v == "URL" {
				tc.flags[i] = url
			}
		}
		code, _, errOut := ctl(t, tc.env, append(tc.flags, "keys", "list")...)
		calls := f.requests()
		if code != 0 || len(calls) != 1 || calls[0].auth != tc.wantAuth {
			t.Errorf("%s: keys list = %d %q, calls %v, want one with Authorization %q", name, code, errOut, calls, tc.wantAuth)
		}
	}
	if code, _, errOut := ctl(t, nil, "--keys-token-file", filepath.Join(t.TempDir(), "none"), "keys", "list"); code != 2 || !strings.Contains(errOut, "--keys-token-file: ") {
		t.Errorf("a missing --keys-token-file = %d %q, want 2", code, errOut)
	}
}

// TestKeysUsage: bad usage exits 2 with a message, and calls nothing.
func TestKeysUsage(t *testing.T) {
	t.Parallel()
	f, url := keyService(t)
	create := []string{"keys", "create", "--app", "shop", "--tenant", "acme", "--plan", "gold"}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"keys alone":          {[]string{"keys"}, "create, rotate, revoke, list or get"},
		"keys nonsense":       {[]string{"keys", "make"}, `"make" is not create, rotate, revoke, list or get`},
		"create without app":  {[]string{"keys", "create", "--tenant", "acme", "--plan", "gold"}, "--app, --tenant and --plan are required"},
		"create without plan": {[]string{"keys", "create", "--app", "shop", "--tenant", "acme"}, "--app, --tenant and --plan are required"},
		"create extra":        {append(create, "key"), `unexpected "key"`},
		"create bad env":      {append(create, "--env", "prod"), `--env is live or test, not "prod"`},
		"create bad priority": {append(create, "--priority", "unspecified"), `--priority is sheddable, free, paid or partner, not "unspecified"`},
		"create bad time":     {append(create, "--not-after", "tomorrow"), `--not-after "tomorrow" is not an RFC 3339 time`},
		"create long wait":    {append(create, "--wait", "3m"), "--wait is more than 0 and at most 2m0s, not 3m0s"},
		"create no wait":      {append(create, "--wait", "0s"), "--wait is more than 0"},
		"create unknown flag": {append(create, "--secret", "x"), "unknown flag: --secret"},
		"rotate no id":        {[]string{"keys", "rotate"}, "which key? porticoctl keys rotate KEY_ID"},
		"rotate two ids":      {[]string{"keys", "rotate", "key_00", "key_01"}, `unexpected "key_01"`},
		"rotate overlap":      {[]string{"keys", "rotate", "key_00", "--overlap", "-1h"}, "--overlap is between 0 and 720h0m0s, not -1h0m0s"},
		"rotate long overlap": {[]string{"keys", "rotate", "key_00", "--overlap", "721h"}, "--overlap is between 0 and 720h0m0s"},
		"rotate long wait":    {[]string{"keys", "rotate", "key_00", "--wait", "121s"}, "--wait is more than 0 and at most 2m0s"},
		"revoke nothing":      {[]string{"keys", "revoke"}, "one key or one app"},
		"revoke both":         {[]string{"keys", "revoke", "key_00", "--app", "shop"}, "one key or one app"},
		"revoke only reason":  {[]string{"keys", "revoke", "--reason", "x"}, "one key or one app"},
		"list extra":          {[]string{"keys", "list", "shop"}, `unexpected "shop"`},
		"get no id":           {[]string{"keys", "get"}, "which key? porticoctl keys get KEY_ID"},
		"get two ids":         {[]string{"keys", "get", "key_00", "key_01"}, `unexpected "key_01"`},
	} {
		code, out, errOut := ctl(t, keysEnv(url), tc.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: %v = %d %q %q, want 2 and %q", name, tc.args, code, out, errOut, tc.want)
		}
	}
	if calls := f.requests(); len(calls) != 0 {
		t.Errorf("bad usage called %v", calls)
	}
}
