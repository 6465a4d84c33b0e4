package keysvc_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/apikey"
	"github.com/portico-gw/portico/gateway/denyentry"
	"github.com/portico-gw/portico/gateway/keysnapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/keysvc"
	"github.com/portico-gw/portico/testing/testclock"
)

const nodeToken = "keysvc-test-node-token-0123456789abcdef"

// fetch sends method to the snapshot path with the given headers
// (name, value pairs) and returns the answer and its body.
func fetch(t *testing.T, s *service, method string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+keysvc.SnapshotPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func newSigningKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// snapshotState is what a snapshot holds, by id.
type snapshotState struct {
	keys    map[string]*configv1.KeyRecord
	deny    map[string]*configv1.DenyEntry // by jti
	issuers map[string]*configv1.IssuerKeys
}

func stateOf(t *testing.T, snap *configv1.KeySnapshot) snapshotState {
	t.Helper()
	st := snapshotState{keys: map[string]*configv1.KeyRecord{}, deny: map[string]*configv1.DenyEntry{}, issuers: map[string]*configv1.IssuerKeys{}}
	for _, e := range snap.GetEntries() {
		switch {
		case e.GetKey() != nil:
			st.keys[e.GetKey().GetKeyId()] = e.GetKey()
		case e.GetDeny() != nil:
			st.deny[e.GetDeny().GetJti()+e.GetDeny().GetSubject()] = e.GetDeny()
		case e.GetIssuerKeys() != nil:
			st.issuers[e.GetIssuerKeys().GetIssuer()] = e.GetIssuerKeys()
		default:
			t.Errorf("the snapshot has an empty entry at rev %d", e.GetRev())
		}
	}
	return st
}

// TestSnapshot: the snapshot is the store's whole state at its seq,
// signed; it is named by its seq in the ETag, and a poller that has it
// is answered 304 until the state changes.
func TestSnapshot(t *testing.T) {
	t.Parallel()
	clock := testclock.New(epoch)
	pub, priv := newSigningKey(t)
	s := startService(t, keysvc.Options{SigningKey: priv, Now: clock.Now})
	ctx := context.Background()

	live := s.create(t, "app-snap")
	test, err := s.keys.CreateKey(ctx, connect.NewRequest(&keysv1.CreateKeyRequest{AppId: "app-snap", TenantId: "t-2", Plan: "free", Env: keysv1.Environment_ENVIRONMENT_TEST}))
	if err != nil {
		t.Fatal(err)
	}
	revoked := s.create(t, "app-snap")
	if _, err := s.keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: revoked.GetKey().GetKeyId()})); err != nil {
		t.Fatal(err)
	}
	raw := map[string]string{}
	for _, k := range []*keysv1.CreateKeyResponse{live, test.Msg, revoked} {
		raw[k.GetKey().GetKeyId()] = k.GetRawKey()
	}
	// jti-long gets the time of the denial as its issued_before, and is
	// kept a day; user-old's tokens were all issued a day ago, so it is
	// kept only until its expires and the leeway.
	for _, e := range []*configv1.DenyEntry{
		{Match: &configv1.DenyEntry_Jti{Jti: "jti-long"}, Expires: timestamppb.New(epoch.Add(time.Hour))},
		{Match: &configv1.DenyEntry_Subject{Subject: "user-old"}, IssuedBefore: timestamppb.New(epoch.Add(-24 * time.Hour)), Expires: timestamppb.New(epoch.Add(time.Minute))},
	} {
		if _, err := s.tokens.Deny(ctx, connect.NewRequest(&keysv1.DenyRequest{Entry: e})); err != nil {
			t.Fatal(err)
		}
	}
	const jwks = `{"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "idp-2", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`
	if _, err := s.tokens.PublishIssuerKeys(ctx, connect.NewRequest(&keysv1.PublishIssuerKeysRequest{Keys: &configv1.IssuerKeys{Issuer: "idp", JwksJson: jwks}})); err != nil {
		t.Fatal(err)
	}
	seq := s.seq(t)

	resp, body := fetch(t, s, "GET")
	etag := fmt.Sprintf(`"seq-%d"`, seq)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") != etag || resp.Header.Get("Content-Type") != "application/x-protobuf" {
		t.Fatalf("GET = %d, ETag %s, Content-Type %s; want 200, %s, application/x-protobuf", resp.StatusCode, resp.Header.Get("ETag"), resp.Header.Get("Content-Type"), etag)
	}
	snap, err := keysnapshot.Verify(body, []ed25519.PublicKey{pub})
	if err != nil {
		t.Fatalf("VerifySnapshot: %v", err)
	}
	signed := &configv1.SignedKeySnapshot{}
	if err := proto.Unmarshal(body, signed); err != nil {
		t.Fatal(err)
	}
	if signed.GetKeyId() != keysnapshot.SignerID(pub) {
		t.Errorf("the snapshot is signed by key id %q, want %q", signed.GetKeyId(), keysnapshot.SignerID(pub))
	}
	other, _ := newSigningKey(t)
	if _, err := keysnapshot.Verify(body, []ed25519.PublicKey{other}); err == nil {
		t.Errorf("VerifySnapshot with another key succeeded")
	}
	if snap.GetSeq() != seq || !snap.GetGenerated().AsTime().Equal(epoch) {
		t.Errorf("snapshot seq %d, generated %v; want %d, %v", snap.GetSeq(), snap.GetGenerated().AsTime(), seq, epoch)
	}
	st := stateOf(t, snap)
	if len(st.keys) != 3 || len(st.deny) != 2 || len(st.issuers) != 1 {
		t.Errorf("the snapshot has %d keys, %d deny entries, %d issuers; want 3, 2, 1", len(st.keys), len(st.deny), len(st.issuers))
	}
	for id, r := range raw {
		k, want := st.keys[id], s.storedKey(t, id)
		if k == nil {
			t.Errorf("the snapshot lacks key %s", id)
			continue
		}
		h := apikey.Hash(r)
		if !bytes.Equal(k.GetSha256(), h[:]) || k.GetStatus() != configv1.KeyStatus(want.Status) || k.GetAppId() != want.AppID ||
			k.GetTenantId() != want.TenantID || k.GetPlan() != want.Plan {
			t.Errorf("the snapshot has key %s as %v, want the hash of its key and %+v", id, k, want)
		}
	}
	if st.keys[revoked.GetKey().GetKeyId()].GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED {
		t.Errorf("the snapshot has the revoked key as %v", st.keys[revoked.GetKey().GetKeyId()].GetStatus())
	}
	if ik := st.issuers["idp"]; ik.GetJwksJson() != jwks {
		t.Errorf("the snapshot has the issuer's keys as %v", ik)
	}

	// A poller that has it is told so.
	resp, body = fetch(t, s, "GET", "If-None-Match", etag)
	if resp.StatusCode != http.StatusNotModified || len(body) != 0 || resp.Header.Get("ETag") != etag {
		t.Errorf("GET with If-None-Match %s = %d with %d bytes, ETag %s; want 304, no body", etag, resp.StatusCode, len(body), resp.Header.Get("ETag"))
	}
	if resp, _ := fetch(t, s, "GET", "If-None-Match", `"seq-1"`); resp.StatusCode != 200 {
		t.Errorf("GET with If-None-Match of an older seq = %d, want 200", resp.StatusCode)
	}
	if resp, body := fetch(t, s, "HEAD"); resp.StatusCode != 200 || len(body) != 0 || resp.Header.Get("ETag") != etag {
		t.Errorf("HEAD = %d with %d bytes, ETag %s; want 200, no body, %s", resp.StatusCode, len(body), resp.Header.Get("ETag"), etag)
	}

	// A deny entry past its KeepUntil leaves the snapshot, though nothing
	// changed.
	clock.Add(6*time.Minute + time.Second)
	_, body = fetch(t, s, "GET")
	snap, err = keysnapshot.Verify(body, []ed25519.PublicKey{pub})
	if err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, snap); st.deny["user-old"] != nil || st.deny["jti-long"] == nil || snap.GetSeq() != seq {
		t.Errorf("6 minutes later the snapshot at seq %d has deny entries %v; want only jti-long", snap.GetSeq(), st.deny)
	}

	// A change: a new snapshot, a new ETag.
	if _, err := s.keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: live.GetKey().GetKeyId()})); err != nil {
		t.Fatal(err)
	}
	resp, body = fetch(t, s, "GET", "If-None-Match", etag)
	next := fmt.Sprintf(`"seq-%d"`, seq+1)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") != next {
		t.Fatalf("after a change GET with If-None-Match %s = %d, ETag %s; want 200, %s", etag, resp.StatusCode, resp.Header.Get("ETag"), next)
	}
	snap, err = keysnapshot.Verify(body, []ed25519.PublicKey{pub})
	if err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, snap); snap.GetSeq() != seq+1 || st.keys[live.GetKey().GetKeyId()].GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED {
		t.Errorf("after a revocation the snapshot at seq %d has the key as %v", snap.GetSeq(), st.keys[live.GetKey().GetKeyId()])
	}
}

// TestSnapshotAccess: with a node token configured only its bearer gets
// the snapshot; without a signing key there is none; only GET and HEAD
// are served.
func TestSnapshotAccess(t *testing.T) {
	t.Parallel()
	_, priv := newSigningKey(t)
	guarded := startService(t, keysvc.Options{SigningKey: priv, SnapshotTokenHash: svcauth.Hash(nodeToken)})
	open := startService(t, keysvc.Options{SigningKey: priv})
	unsigned := startService(t, keysvc.Options{})
	for _, c := range []struct {
		name    string
		s       *service
		method  string
		headers []string
		want    int
	}{
		{"no token", guarded, "GET", nil, http.StatusUnauthorized},
		{"a wrong token", guarded, "GET", []string{"Authorization", "Bearer not-the-node-token"}, http.StatusUnauthorized},
		{"the platform token", guarded, "GET", []string{"Authorization", "Bearer " + platformToken}, http.StatusUnauthorized},
		{"the hash of the node token", guarded, "GET", []string{"Authorization", "Bearer " + svcauth.Hash(nodeToken)}, http.StatusUnauthorized},
		{"the node token, not as a bearer", guarded, "GET", []string{"Authorization", nodeToken}, http.StatusUnauthorized},
		{"the node token", guarded, "GET", []string{"Authorization", "Bearer " + nodeToken}, http.StatusOK},
		{"no token, none required", open, "GET", nil, http.StatusOK},
		{"no signing key", unsigned, "GET", nil, http.StatusNotFound},
		{"POST", open, "POST", nil, http.StatusMethodNotAllowed},
		{"PUT", open, "PUT", nil, http.StatusMethodNotAllowed},
		{"POST with the node token", guarded, "POST", []string{"Authorization", "Bearer " + nodeToken}, http.StatusMethodNotAllowed},
	} {
		resp, body := fetch(t, c.s, c.method, c.headers...)
		if resp.StatusCode != c.want {
			t.Errorf("%s: %s = %d, want %d", c.name, c.method, resp.StatusCode, c.want)
		}
		switch resp.StatusCode {
		case http.StatusOK:
			if _, err := keysnapshot.Verify(body, []ed25519.PublicKey{priv.Public().(ed25519.PublicKey)}); err != nil {
				t.Errorf("%s: VerifySnapshot: %v", c.name, err)
			}
		case http.StatusUnauthorized:
			if resp.Header.Get("WWW-Authenticate") == "" || resp.Header.Get("ETag") != "" {
				t.Errorf("%s: 401 with WWW-Authenticate %q, ETag %q; want a challenge and no ETag", c.name, resp.Header.Get("WWW-Authenticate"), resp.Header.Get("ETag"))
			}
		case http.StatusMethodNotAllowed:
			if resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s: 405 with Allow %q, want GET, HEAD", c.name, resp.Header.Get("Allow"))
			}
		}
	}
}

// TestDenyKept: the key service keeps a deny entry, in ListDenyEntries
// and in the signed snapshot a late node starts from, until every token
// it covers is dead for any issuer (denyentry.KeepUntil), not until the
// expires its caller asked for. Every jti entry gets the time of the
// denial as its issued_before, whatever token_expires it names, so that
// a node keeps it for the issuer's whole token lifetime even when the
// caller's token_expires and expires are early.
func TestDenyKept(t *testing.T) {
	t.Parallel()
	clock := testclock.New(epoch)
	pub, priv := newSigningKey(t)
	s := startService(t, keysvc.Options{SigningKey: priv, Now: clock.Now})
	ctx := context.Background()
	asked := timestamppb.New(epoch.Add(15 * time.Minute))
	for _, e := range []*configv1.DenyEntry{
		{Match: &configv1.DenyEntry_Jti{Jti: "no-exp"}, Expires: asked},
		{Match: &configv1.DenyEntry_Jti{Jti: "exp"}, TokenExpires: timestamppb.New(epoch.Add(time.Hour)), Expires: asked},
		{Match: &configv1.DenyEntry_Jti{Jti: "early-exp"}, TokenExpires: timestamppb.New(epoch.Add(time.Minute)), Expires: timestamppb.New(epoch.Add(time.Minute))},
		{Match: &configv1.DenyEntry_Jti{Jti: "early-cut"}, IssuedBefore: timestamppb.New(epoch.Add(-time.Hour)), Expires: timestamppb.New(epoch.Add(time.Minute))},
		{Match: &configv1.DenyEntry_Subject{Subject: "user-7"}, IssuedBefore: timestamppb.New(epoch), Expires: asked},
	} {
		if _, err := s.tokens.Deny(ctx, connect.NewRequest(&keysv1.DenyRequest{Entry: e})); err != nil {
			t.Fatal(err)
		}
	}
	list := func() map[string]*configv1.DenyEntry {
		t.Helper()
		resp, err := s.tokens.ListDenyEntries(ctx, connect.NewRequest(&keysv1.ListDenyEntriesRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*configv1.DenyEntry{}
		for _, e := range resp.Msg.GetEntries() {
			out[e.GetJti()+e.GetSubject()] = e
		}
		return out
	}
	snapshot := func() map[string]*configv1.DenyEntry {
		t.Helper()
		_, body := fetch(t, s, "GET")
		snap, err := keysnapshot.Verify(body, []ed25519.PublicKey{pub})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*configv1.DenyEntry{}
		for _, e := range snap.GetEntries() {
			if d := e.GetDeny(); d != nil {
				out[d.GetJti()+d.GetSubject()] = d
			}
		}
		return out
	}
	got := list()
	for _, jti := range []string{"no-exp", "exp", "early-exp", "early-cut"} {
		if ib := got[jti].GetIssuedBefore(); !ib.AsTime().Equal(epoch) {
			t.Errorf("jti entry %s has issued_before %v, want the time of the denial %v", jti, ib.AsTime(), epoch)
		}
		// A node with the default lifetime, 15 minutes, and 30 s of
		// leeway keeps it until then at least.
		if lapse, want := denyentry.Lapse(got[jti], 15*time.Minute, 30*time.Second), epoch.Add(15*time.Minute+30*time.Second); lapse.Before(want) {
			t.Errorf("jti entry %s lapses on a node at %v, before a token issued at the denial dies (%v)", jti, lapse, want)
		}
	}
	all := []string{"early-cut", "early-exp", "exp", "no-exp", "user-7"}
	for _, c := range []struct {
		at   time.Duration
		want []string
	}{
		{20 * time.Minute, all},
		// More than snapshotMaxAge apart, so that the snapshot is built
		// again.
		{time.Hour + 6*time.Minute, all},
		{24*time.Hour + 5*time.Minute - time.Second, all},
		{24*time.Hour + 6*time.Minute, nil},
	} {
		clock.Set(epoch.Add(c.at))
		for where, m := range map[string]map[string]*configv1.DenyEntry{"ListDenyEntries": list(), "the signed snapshot": snapshot()} {
			got := slices.Sorted(maps.Keys(m))
			if !slices.Equal(got, c.want) {
				t.Errorf("%s at +%v = %v, want %v", where, c.at, got, c.want)
			}
		}
	}
}
