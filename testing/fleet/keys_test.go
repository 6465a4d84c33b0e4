package fleet_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway"
	gwdist "github.com/portico-gw/portico/gateway/distribution"
	"github.com/portico-gw/portico/gateway/keysnapshot"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/keysvc"
	keystore "github.com/portico-gw/portico/keysvc/store"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/testclock"
)

const (
	keysPlatformToken = "keys-test-platform-token-0123456789abcdef"
	keysIdentityToken = "keys-test-identity-token-0123456789abcdef"
	scannerID         = "acme-scanner"
)

// laneRecorder feeds a node's fast lane and records when each key
// entry was applied on it.
type laneRecorder struct {
	lane gwdist.Lane
	id   string

	mu sync.Mutex
	// applied is when each key id was last applied, with its status.
	applied map[string]laneApplied
}

type laneApplied struct {
	at     time.Time
	status configv1.KeyStatus
}

func (r *laneRecorder) Apply(entries []*configv1.FastLaneEntry) error {
	err := r.lane.Apply(entries)
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.applied == nil {
		r.applied = map[string]laneApplied{}
	}
	for _, e := range entries {
		k := e.GetKey()
		if k == nil {
			continue
		}
		// The first time the node applied the key's newest status: a
		// resync that sends it again does not move it.
		if a, ok := r.applied[k.GetKeyId()]; !ok || a.status != k.GetStatus() {
			r.applied[k.GetKeyId()] = laneApplied{at: now, status: k.GetStatus()}
		}
	}
	return err
}

// revokedAt is when the node applied key id's revocation, if it did.
func (r *laneRecorder) revokedAt(id string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.applied[id]
	return a.at, ok && a.status == configv1.KeyStatus_KEY_STATUS_REVOKED
}

// keyService is a key service on a test server, publishing to a control
// plane.
type keyService struct {
	svc     *keysvc.Service
	store   *keystore.Store
	srv     *httptest.Server
	url     string
	keys    keysv1connect.KeyServiceClient
	tokens  keysv1connect.TokenServiceClient
	signer  ed25519.PublicKey
	scanner *ecdsa.PrivateKey
}

// startKeysWith starts a key service publishing to the control plane at
// controlURL, with the options edit changes, if not nil.
func startKeysWith(t *testing.T, controlURL string, edit func(*keysvc.Options)) *keyService {
	t.Helper()
	st, err := keystore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	scanner, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	opts := keysvc.Options{
		Store: st, ControlURL: controlURL, HTTPClient: gatewaytest.H2CClient(t), SigningKey: priv, Logger: gatewaytest.Logger(),
		Tokens: []keysvc.Token{
			{Name: "platform-test", Role: keysvc.RolePlatform, SHA256: svcauth.Hash(keysPlatformToken)},
			{Name: "identity-test", Role: keysvc.RoleIdentity, SHA256: svcauth.Hash(keysIdentityToken)},
		},
		Scanners:    []keysvc.Scanner{{ID: scannerID, Key: &scanner.PublicKey}},
		WaitTimeout: 5 * time.Second,
	}
	if edit != nil {
		edit(&opts)
	}
	svc, err := keysvc.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	client := admintest.HTTPClient(keysPlatformToken)
	return &keyService{svc: svc, store: st, srv: srv, url: srv.URL, signer: pub, scanner: scanner,
		keys:   keysv1connect.NewKeyServiceClient(client, srv.URL),
		tokens: keysv1connect.NewTokenServiceClient(client, srv.URL)}
}

// keyFleet is a control plane, a key service and n nodes serving
// /v1/orders/* to API keys.
func keyFleet(t *testing.T, n int) (*controlPlane, *keyService, []*gatewayNode) {
	t.Helper()
	return keyFleetClock(t, n, nil)
}

// keyFleetClock is keyFleet with the key service and the nodes on clock,
// if not nil (the control plane keeps the real time).
func keyFleetClock(t *testing.T, n int, clock func() time.Time) (*controlPlane, *keyService, []*gatewayNode) {
	t.Helper()
	cp := startControl(t, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	ks := startKeysWith(t, cp.url, func(o *keysvc.Options) { o.Now = clock })
	setUp(t, cp, backend(t, "orders"))
	ch, err := cp.admin.PutRoute(context.Background(), connect.NewRequest(&adminv1.PutRouteRequest{Team: "orders", Route: &configv1.Route{
		Id: "orders.keyed", Hosts: []string{"api.example.com"}, Path: "/v1/orders/*", Cluster: "orders", Auth: &configv1.RouteAuth{}}}))
	if err != nil {
		t.Fatal(err)
	}
	version := ch.Msg.GetChange().GetVersion().GetNumber()
	nodes := make([]*gatewayNode, n)
	for i := range nodes {
		nodes[i] = startClockNode(t, cp.url, fmt.Sprintf("node-%d", i), clock)
	}
	waitFleet(t, cp, "every node on the keyed route", allRun(n, version))
	waitLane(t, cp, n, 0)
	return cp, ks, nodes
}

// startClockNode starts a node on the control plane at url, on clock if
// not nil.
func startClockNode(t *testing.T, url, id string, clock func() time.Time) *gatewayNode {
	t.Helper()
	return startNodeEdit(t, url, id, "", "local", nil, nodeToken, func(o *gateway.Options) { o.Now = clock })
}

// waitLane waits until n nodes are on the fast lane, each at version or
// later.
func waitLane(t *testing.T, cp *controlPlane, n int, version uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := cp.Distribution.WaitLane(ctx, func(nodes []*distributionv1.NodeFastLane) bool {
		if len(nodes) != n {
			return false
		}
		for _, nd := range nodes {
			if nd.GetVersion() < version {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("waiting for %d nodes at fast-lane version %d: %v; nodes %v", n, version, err, cp.Distribution.LaneNodes())
	}
}

// call calls the keyed route on node with key and returns the status.
func (n *gatewayNode) call(t *testing.T, key string) int {
	t.Helper()
	return n.callWith(t, "X-Api-Key", key)
}

// callWith calls the keyed route on node with a credential header and
// returns the status.
func (n *gatewayNode) callWith(t *testing.T, header, value string) int {
	t.Helper()
	req, err := http.NewRequest("GET", n.gw.URL()+"/v1/orders/o-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "api.example.com"
	req.Header.Set(header, value)
	resp, err := gatewaytest.HTTP1Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func createKey(t *testing.T, ks *keyService, app string) *keysv1.CreateKeyResponse {
	t.Helper()
	resp, err := ks.keys.CreateKey(context.Background(), connect.NewRequest(&keysv1.CreateKeyRequest{
		AppId: app, TenantId: "tenant-1", Plan: "gold", Scopes: []string{"orders:read"}, Env: keysv1.Environment_ENVIRONMENT_LIVE,
	}))
	if err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	return resp.Msg
}

func everyNode(t *testing.T, nodes []*gatewayNode, key string, want int, what string) {
	t.Helper()
	everyNodeWith(t, nodes, "X-Api-Key", key, want, what)
}

// everyNodeWith calls the keyed route on every node with a credential
// header and checks the status.
func everyNodeWith(t *testing.T, nodes []*gatewayNode, header, value string, want int, what string) {
	t.Helper()
	for _, n := range nodes {
		if got := n.callWith(t, header, value); got != want {
			t.Errorf("%s: node %s answered %d, want %d", what, n.lane.id, got, want)
		}
	}
}

// TestKeyLifecycle: a new key's first call succeeds on every node; after
// its revocation reaches the nodes every call is a 401; the store keeps
// its hash only.
func TestKeyLifecycle(t *testing.T) {
	t.Parallel()
	cp, ks, nodes := keyFleet(t, 3)

	created := createKey(t, ks, "app-1")
	key := created.GetRawKey()
	if !strings.HasPrefix(key, "ak_live_") || created.GetKey().GetPrefix() != key[:12] {
		t.Fatalf("CreateKey = key %q, prefix %q", key[:12], created.GetKey().GetPrefix())
	}
	// No wait of our own: CreateKey answered once every node had it.
	everyNode(t, nodes, key, 200, "first call with a new key")

	rec, err := ks.store.GetKey(context.Background(), created.GetKey().GetKeyId())
	if err != nil {
		t.Fatal(err)
	}
	if rec.Hash == [32]byte{} || strings.Contains(fmt.Sprintf("%+v", rec), key) {
		t.Errorf("the store holds %+v", rec)
	}
	list, err := ks.keys.ListKeys(context.Background(), connect.NewRequest(&keysv1.ListKeysRequest{AppId: "app-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if j, _ := json.Marshal(list.Msg); len(list.Msg.GetKeys()) != 1 || bytes.Contains(j, []byte(key[8:])) || bytes.Contains(j, rec.Hash[:4]) {
		t.Errorf("ListKeys = %s", j)
	}

	rv, err := ks.keys.RevokeKey(context.Background(), connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: created.GetKey().GetKeyId(), Reason: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	if rv.Msg.GetVersion() == 0 || rv.Msg.GetKey().GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED {
		t.Fatalf("RevokeKey = %v", rv.Msg)
	}
	waitLane(t, cp, len(nodes), rv.Msg.GetVersion())
	everyNode(t, nodes, key, 401, "a call with a revoked key")
	ro, err := cp.admin.GetRollout(context.Background(), connect.NewRequest(&adminv1.GetRolloutRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ro.Msg.GetNodes() {
		if n.GetFastLaneVersion() < rv.Msg.GetVersion() {
			t.Errorf("the admin API shows node %s at fast-lane version %d, want %d or later", n.GetId(), n.GetFastLaneVersion(), rv.Msg.GetVersion())
		}
	}

	// A node that connects later gets the whole lane: the revocation too.
	late := startNode(t, cp.url, "node-late", "")
	waitFleet(t, cp, "the late node on the keyed route", allRun(len(nodes)+1, cp.Distribution.Status().Version))
	waitLane(t, cp, len(nodes)+1, rv.Msg.GetVersion())
	if got := late.call(t, key); got != 401 {
		t.Errorf("a node that joined later answered %d to a revoked key", got)
	}
	other := createKey(t, ks, "app-2")
	everyNode(t, append(nodes, late), other.GetRawKey(), 200, "a key created after a node joined")

	// RevokeApp stops every key of the app.
	more := createKey(t, ks, "app-2")
	ra, err := ks.keys.RevokeApp(context.Background(), connect.NewRequest(&keysv1.RevokeAppRequest{AppId: "app-2", Reason: "compromised"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(ra.Msg.GetKeys()) != 2 {
		t.Fatalf("RevokeApp revoked %d keys, want 2", len(ra.Msg.GetKeys()))
	}
	waitLane(t, cp, len(nodes)+1, ra.Msg.GetVersion())
	everyNode(t, nodes, other.GetRawKey(), 401, "an app's first key after RevokeApp")
	everyNode(t, nodes, more.GetRawKey(), 401, "an app's second key after RevokeApp")
}

// TestKeyRotation: after RotateKey both keys work on every node until the
// overlap ends; then only the successor does, with no further message.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	_, ks, nodes := keyFleet(t, 2)
	old := createKey(t, ks, "app-rot")
	const overlap = 1500 * time.Millisecond
	rot, err := ks.keys.RotateKey(context.Background(), connect.NewRequest(&keysv1.RotateKeyRequest{
		KeyId: old.GetKey().GetKeyId(), Overlap: durationpb.New(overlap)}))
	if err != nil {
		t.Fatal(err)
	}
	end := rot.Msg.GetPrevious().GetNotAfter().AsTime()
	if rot.Msg.GetPrevious().GetSuccessorKeyId() != rot.Msg.GetKey().GetKeyId() || rot.Msg.GetKey().GetPredecessorKeyId() != old.GetKey().GetKeyId() {
		t.Fatalf("RotateKey = %v", rot.Msg)
	}
	everyNode(t, nodes, rot.Msg.GetRawKey(), 200, "the successor during the overlap")
	if time.Now().Before(end) {
		everyNode(t, nodes, old.GetRawKey(), 200, "the old key during the overlap")
	} else {
		t.Fatalf("the overlap of %s ended before the test could call", overlap)
	}
	time.Sleep(time.Until(end) + 10*time.Millisecond) // the old key's own end: nothing is sent
	everyNode(t, nodes, old.GetRawKey(), 401, "the old key after the overlap")
	everyNode(t, nodes, rot.Msg.GetRawKey(), 200, "the successor after the overlap")

	// A key is rotated once.
	if _, err := ks.keys.RotateKey(context.Background(), connect.NewRequest(&keysv1.RotateKeyRequest{KeyId: old.GetKey().GetKeyId()})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("rotating a rotated key: %v, want FailedPrecondition", err)
	}
}

// report posts a leaked-key report, signed at `at` by key, and returns
// the status and the decoded answer.
func report(t *testing.T, ks *keyService, key *ecdsa.PrivateKey, at time.Time, body []byte, edit func(http.Header)) (int, []map[string]string) {
	t.Helper()
	h, err := keysvc.SignReport(scannerID, key, at, body)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(h)
	}
	req, err := http.NewRequest("POST", ks.url+keysvc.LeakPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []map[string]string
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// TestLeakedKeyReport: a signed scanner report revokes the key on every
// node; forged, replayed, tampered and unsigned reports change nothing.
func TestLeakedKeyReport(t *testing.T) {
	t.Parallel()
	cp, ks, nodes := keyFleet(t, 2)
	leaked := createKey(t, ks, "app-leak")
	body, _ := json.Marshal([]map[string]string{
		{"token": leaked.GetRawKey(), "type": "portico_api_key", "url": "https://github.com/someone/repo/blob/main/.env", "source": "content"},
		{"token": "ak_live_00000000000000000000000000000000abcdef", "type": "portico_api_key", "url": "https://github.com/someone/repo/blob/main/.env", "source": "content"},
	})

	forger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		key  *ecdsa.PrivateKey
		at   time.Time
		edit func(http.Header)
		body []byte
	}{
		{"signed by another key", forger, time.Now(), nil, body},
		{"replayed after the window", ks.scanner, time.Now().Add(-6 * time.Minute), nil, body},
		{"dated in the future", ks.scanner, time.Now().Add(6 * time.Minute), nil, body},
		{"unsigned", ks.scanner, time.Now(), func(h http.Header) { h.Del("Portico-Scanner-Signature") }, body},
		{"unknown scanner", ks.scanner, time.Now(), func(h http.Header) { h.Set("Portico-Scanner-Id", "someone") }, body},
		{"timestamp changed after signing", ks.scanner, time.Now(), func(h http.Header) {
			h.Set("Portico-Scanner-Timestamp", fmt.Sprint(time.Now().Unix()+1))
		}, body},
	} {
		sent := c.body
		if c.name == "unsigned" {
			sent = body
		}
		status, _ := report(t, ks, c.key, c.at, sent, c.edit)
		if status != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", c.name, status)
		}
	}
	// A body changed after signing.
	h, err := keysvc.SignReport(scannerID, ks.scanner, time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(body, []byte("main"), []byte("dev!"), 1)
	req, _ := http.NewRequest("POST", ks.url+keysvc.LeakPath, bytes.NewReader(tampered))
	req.Header = h
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("a tampered body: %v %v, want 401", resp.StatusCode, err)
	}
	k, err := ks.store.GetKey(context.Background(), leaked.GetKey().GetKeyId())
	if err != nil || k.Status != keystore.StatusActive {
		t.Fatalf("after refused reports the key is %v (%v), want active", k.Status, err)
	}
	if reps, _ := ks.store.LeakReports(context.Background(), 10); len(reps) != 0 {
		t.Errorf("refused reports were recorded: %v", reps)
	}
	everyNode(t, nodes, leaked.GetRawKey(), 200, "after refused reports")

	status, answers := report(t, ks, ks.scanner, time.Now(), body, nil)
	if status != 200 || len(answers) != 2 {
		t.Fatalf("signed report: status %d, answers %v", status, answers)
	}
	if answers[0]["outcome"] != "revoked" || answers[0]["key_id"] != leaked.GetKey().GetKeyId() || answers[1]["outcome"] != "unknown" {
		t.Errorf("answers = %v", answers)
	}
	for _, a := range answers {
		for _, v := range a {
			if strings.Contains(v, leaked.GetRawKey()[12:]) {
				t.Errorf("the answer repeats the reported key: %v", a)
			}
		}
	}
	k, err = ks.store.GetKey(context.Background(), leaked.GetKey().GetKeyId())
	if err != nil || k.Status != keystore.StatusRevoked || k.RevokedBy != "scanner:"+scannerID {
		t.Fatalf("after the report the key is %+v (%v)", k, err)
	}
	reps, err := ks.store.LeakReports(context.Background(), 10)
	if err != nil || len(reps) != 2 || reps[0].Reporter != scannerID || !strings.Contains(reps[0].URL, "github.com/someone") {
		t.Errorf("recorded reports = %+v (%v)", reps, err)
	}
	seq, _ := ks.store.Seq(context.Background())
	waitLaneRev(t, cp, nodes, seq)
	everyNode(t, nodes, leaked.GetRawKey(), 401, "a leaked key after the report")

	if status, answers := report(t, ks, ks.scanner, time.Now(), body, nil); status != 200 || answers[0]["outcome"] != "already_revoked" {
		t.Errorf("a second report: %d %v", status, answers)
	}
}

// waitLaneRev waits until every node's lane has every change up to rev:
// the control plane's fast lane holds the key service's changes up to its
// source seq.
func waitLaneRev(t *testing.T, cp *controlPlane, nodes []*gatewayNode, rev uint64) {
	t.Helper()
	client := distributionv1connect.NewFastLaneServiceClient(http.DefaultClient, cp.url)
	deadline := time.Now().Add(10 * time.Second)
	for {
		src, err := client.Source(context.Background(), connect.NewRequest(&distributionv1.SourceRequest{Source: "keys"}))
		if err != nil {
			t.Fatal(err)
		}
		if src.Msg.GetSeq() >= rev {
			waitLane(t, cp, len(nodes), src.Msg.GetVersion())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the control plane has the key service's changes up to %d, want %d", src.Msg.GetSeq(), rev)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCreateKeyWaitsForEveryNode: a node on the lane that does not
// acknowledge makes CreateKey fail after its timeout, naming the node;
// the key is withdrawn and never shown.
func TestCreateKeyWaitsForEveryNode(t *testing.T) {
	t.Parallel()
	cp, ks, nodes := keyFleet(t, 1)
	rotating := createKey(t, ks, "app-rotate")
	// A node that says hello and never acknowledges.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h2c := gatewaytest.H2CClient(t)
	dc := distributionv1connect.NewDistributionServiceClient(&http.Client{Transport: admintest.Bearer(nodeToken, h2c.Transport)}, cp.url)
	stream := dc.FastLane(ctx)
	if err := stream.Send(&distributionv1.FastLaneRequest{Message: &distributionv1.FastLaneRequest_Hello{Hello: &distributionv1.FastLaneHello{NodeId: "stuck-node"}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stream.CloseRequest(); _ = stream.CloseResponse() })
	waitLane(t, cp, 2, 0)

	// The wait covers the publish too: long enough for that on a loaded
	// machine, so that what runs out is the stuck node's acknowledgement.
	_, err := ks.keys.CreateKey(context.Background(), connect.NewRequest(&keysv1.CreateKeyRequest{
		AppId: "app-wait", TenantId: "t", Plan: "gold", Env: keysv1.Environment_ENVIRONMENT_LIVE, WaitTimeout: durationpb.New(time.Second),
	}))
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !strings.Contains(err.Error(), "stuck-node") || strings.Contains(err.Error(), "node-0") {
		t.Fatalf("CreateKey with a node that does not acknowledge: %v", err)
	}
	var ce *connect.Error
	if errors.As(err, &ce) && strings.Contains(ce.Message(), "ak_live_") {
		t.Errorf("the error shows a key: %v", err)
	}
	keys, err := ks.keys.ListKeys(context.Background(), connect.NewRequest(&keysv1.ListKeysRequest{AppId: "app-wait"}))
	if err != nil || len(keys.Msg.GetKeys()) != 1 || keys.Msg.GetKeys()[0].GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED {
		t.Fatalf("the unconfirmed key: %v (%v), want one, revoked", keys.Msg.GetKeys(), err)
	}

	// A rotation that cannot be confirmed is undone: the old key keeps
	// working with no end, and can be rotated again later.
	_, err = ks.keys.RotateKey(context.Background(), connect.NewRequest(&keysv1.RotateKeyRequest{
		KeyId: rotating.GetKey().GetKeyId(), WaitTimeout: durationpb.New(time.Second)}))
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !strings.Contains(err.Error(), "stuck-node") {
		t.Fatalf("RotateKey with a node that does not acknowledge: %v", err)
	}
	old, err := ks.keys.GetKey(context.Background(), connect.NewRequest(&keysv1.GetKeyRequest{KeyId: rotating.GetKey().GetKeyId()}))
	if err != nil {
		t.Fatal(err)
	}
	if k := old.Msg.GetKey(); k.GetSuccessorKeyId() != "" || k.GetNotAfter() != nil || k.GetStatus() != configv1.KeyStatus_KEY_STATUS_ACTIVE {
		t.Errorf("the old key after an unconfirmed rotation = %v, want active, no successor, no end", k)
	}
	everyNode(t, nodes, rotating.GetRawKey(), 200, "the old key after an unconfirmed rotation")
}

// TestRevocationWithoutControlPlane: with the control plane gone, a
// revocation still reaches every node through the signed snapshot they
// poll, within one poll period.
func TestRevocationWithoutControlPlane(t *testing.T) {
	t.Parallel()
	cp, ks, nodes := keyFleet(t, 2)
	key := createKey(t, ks, "app-poll")
	const period = 300 * time.Millisecond
	pollers := make([]*gwdist.Poller, len(nodes))
	for i, n := range nodes {
		p, err := gwdist.NewPoller(gwdist.PollerOptions{URL: ks.url + keysvc.SnapshotPath, Trusted: []ed25519.PublicKey{ks.signer},
			Interval: period, Lane: n.gw.Node.FastLane(), Logger: gatewaytest.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		pollers[i] = p
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); p.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	// Every stream down: the control plane is gone.
	cp.srv.CloseClientConnections()
	cp.srv.Close()
	cp.Close()

	start := time.Now()
	rv, err := ks.keys.RevokeKey(context.Background(), connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: key.GetKey().GetKeyId(), Reason: "leaked"}))
	if err != nil {
		t.Fatalf("RevokeKey with no control plane: %v", err)
	}
	if rv.Msg.GetVersion() != 0 {
		t.Errorf("RevokeKey said fast-lane version %d with no control plane", rv.Msg.GetVersion())
	}
	for i, n := range nodes {
		deadline := time.Now().Add(10 * period)
		for n.gw.Node.FastLane().SignedSeq() < rv.Msg.GetKey().GetRev() {
			if time.Now().After(deadline) {
				polls, perr := pollers[i].Status()
				t.Fatalf("node %d has not polled the revocation after %s (%d polls, last error %v)", i, 10*period, polls, perr)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Logf("revocation reached %d nodes through the signed snapshot in %s (poll period %s)", len(nodes), time.Since(start).Round(time.Millisecond), period)
	everyNode(t, nodes, key.GetRawKey(), 401, "a key revoked while the control plane was down")

}

func everyNodeToken(t *testing.T, nodes []*gatewayNode, token string, want int, what string) {
	t.Helper()
	everyNodeWith(t, nodes, "Authorization", "Bearer "+token, want, what)
}

// TestTokenRevocation: deny entries (by jti, by subject issued before a
// time) and an issuer's new signing key reach every node through the
// fast lane; the identity service's token may add them but not touch
// keys.
func TestTokenRevocation(t *testing.T) {
	t.Parallel()
	cp, ks, nodes := keyFleet(t, 2)
	idp := gatewaytest.NewIssuer(t, "idp")
	ch, err := cp.admin.PutPlatform(context.Background(), connect.NewRequest(&adminv1.PutPlatformRequest{Platform: &adminv1.Platform{
		RateLimiting: &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Disabled: true}},
		Issuers:      []*configv1.Issuer{idp.Config(t)}}}))
	if err != nil {
		t.Fatal(err)
	}
	waitFleet(t, cp, "the issuer on every node", allRun(len(nodes), ch.Msg.GetChange().GetVersion().GetNumber()))

	identity := admintest.HTTPClient(keysIdentityToken)
	tokens := keysv1connect.NewTokenServiceClient(identity, ks.url)
	if _, err := keysv1connect.NewKeyServiceClient(identity, ks.url).ListKeys(context.Background(), connect.NewRequest(&keysv1.ListKeysRequest{})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("the identity token listing keys: %v, want PermissionDenied", err)
	}
	if _, err := keysv1connect.NewTokenServiceClient(http.DefaultClient, ks.url).ListDenyEntries(context.Background(), connect.NewRequest(&keysv1.ListDenyEntriesRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("no token: %v, want Unauthenticated", err)
	}

	one := idp.Mint(t, map[string]any{"jti": "token-one"})
	two := idp.Mint(t, map[string]any{"jti": "token-two"})
	everyNodeToken(t, nodes, one, 200, "a token before any deny entry")
	expires := timestamppb.New(time.Now().Add(15 * time.Minute))
	d, err := tokens.Deny(context.Background(), connect.NewRequest(&keysv1.DenyRequest{Entry: &configv1.DenyEntry{
		Match: &configv1.DenyEntry_Jti{Jti: "token-one"}, Expires: expires}}))
	if err != nil {
		t.Fatal(err)
	}
	waitLane(t, cp, len(nodes), d.Msg.GetVersion())
	everyNodeToken(t, nodes, one, 401, "a token denied by jti")
	everyNodeToken(t, nodes, two, 200, "another token of the same user")

	// Every token of user-7 issued before the cut.
	cut := time.Now().Add(-time.Minute)
	old := idp.Mint(t, map[string]any{"sub": "user-7", "iat": cut.Add(-time.Minute).Unix(), "exp": cut.Add(10 * time.Minute).Unix()})
	fresh := idp.Mint(t, map[string]any{"sub": "user-7"})
	d, err = tokens.Deny(context.Background(), connect.NewRequest(&keysv1.DenyRequest{Entry: &configv1.DenyEntry{
		Issuer: "idp", Match: &configv1.DenyEntry_Subject{Subject: "user-7"}, IssuedBefore: timestamppb.New(cut), Expires: expires}}))
	if err != nil {
		t.Fatal(err)
	}
	waitLane(t, cp, len(nodes), d.Msg.GetVersion())
	everyNodeToken(t, nodes, old, 401, "a token of a denied user issued before the cut")
	everyNodeToken(t, nodes, fresh, 200, "a token of the user issued after the cut")
	list, err := tokens.ListDenyEntries(context.Background(), connect.NewRequest(&keysv1.ListDenyEntriesRequest{}))
	if err != nil || len(list.Msg.GetEntries()) != 2 {
		t.Errorf("ListDenyEntries = %v (%v), want 2", list.Msg.GetEntries(), err)
	}

	// The issuer publishes a new signing key before using it.
	next := gatewaytest.NewIssuer(t, "idp")
	next.KID = "idp-2"
	rotated := next.Mint(t, nil)
	everyNodeToken(t, nodes, rotated, 401, "a token signed with a key not yet published")
	pk, err := tokens.PublishIssuerKeys(context.Background(), connect.NewRequest(&keysv1.PublishIssuerKeysRequest{Keys: &configv1.IssuerKeys{
		Issuer: "idp", JwksJson: next.JWKS(t)}}))
	if err != nil {
		t.Fatal(err)
	}
	waitLane(t, cp, len(nodes), pk.Msg.GetVersion())
	everyNodeToken(t, nodes, rotated, 200, "a token signed with the published key")
	everyNodeToken(t, nodes, two, 200, "a token signed with the issuer's configured key")
	if _, err := tokens.PublishIssuerKeys(context.Background(), connect.NewRequest(&keysv1.PublishIssuerKeysRequest{Keys: &configv1.IssuerKeys{
		Issuer: "idp", JwksJson: `{"keys": "nope"}`}})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("publishing a malformed key set: %v, want InvalidArgument", err)
	}
}

// TestTokenRevocationOutlivesItsExpiry: a deny entry made through the key
// service keeps refusing its tokens on every node after the expires its
// caller asked for, as long as the tokens live (an hour, which this
// issuer allows), on the nodes that had it and on one that joins later;
// the key service's signed snapshot still carries it. That holds for a
// jti entry whose caller names a token_expires that is early too (a
// minute, with an expires of a minute): the token still has its hour.
func TestTokenRevocationOutlivesItsExpiry(t *testing.T) {
	t.Parallel()
	clk := testclock.New(time.Now())
	cp, ks, nodes := keyFleetClock(t, 2, clk.Now)
	idp := gatewaytest.NewIssuer(t, "idp")
	cfg := idp.Config(t)
	cfg.MaxTokenLifetime = durationpb.New(time.Hour)
	ch, err := cp.admin.PutPlatform(context.Background(), connect.NewRequest(&adminv1.PutPlatformRequest{Platform: &adminv1.Platform{
		RateLimiting: &configv1.RateLimiting{Anonymous: &configv1.AnonymousLimit{Disabled: true}},
		Issuers:      []*configv1.Issuer{cfg}}}))
	if err != nil {
		t.Fatal(err)
	}
	waitFleet(t, cp, "the issuer on every node", allRun(len(nodes), ch.Msg.GetChange().GetVersion().GetNumber()))

	// Tokens of an hour, on the fleet's clock.
	now := clk.Now()
	hour := func(claims map[string]any) string {
		claims["iat"], claims["nbf"], claims["exp"] = now.Add(-time.Second).Unix(), now.Add(-time.Second).Unix(), now.Add(time.Hour-time.Second).Unix()
		return idp.Mint(t, claims)
	}
	byJTI := hour(map[string]any{"jti": "hour-token"})
	bySubject := hour(map[string]any{"sub": "user-9"})
	other := hour(map[string]any{"jti": "another"})
	earlyExp := hour(map[string]any{"jti": "early-exp"})
	everyNodeToken(t, nodes, byJTI, 200, "an hour's token before any deny entry")

	// porticoctl deny add's default expiry: 15 minutes.
	tokens := keysv1connect.NewTokenServiceClient(admintest.HTTPClient(keysIdentityToken), ks.url)
	asked := timestamppb.New(now.Add(15 * time.Minute))
	var version uint64
	for _, e := range []*configv1.DenyEntry{
		{Match: &configv1.DenyEntry_Jti{Jti: "hour-token"}, Expires: asked},
		{Issuer: "idp", Match: &configv1.DenyEntry_Subject{Subject: "user-9"}, IssuedBefore: timestamppb.New(now), Expires: asked},
		{Match: &configv1.DenyEntry_Jti{Jti: "early-exp"}, TokenExpires: timestamppb.New(now.Add(time.Minute)), Expires: timestamppb.New(now.Add(time.Minute))},
	} {
		d, err := tokens.Deny(context.Background(), connect.NewRequest(&keysv1.DenyRequest{Entry: e}))
		if err != nil {
			t.Fatal(err)
		}
		version = d.Msg.GetVersion()
	}
	waitLane(t, cp, len(nodes), version)
	everyNodeToken(t, nodes, byJTI, 401, "a token denied by jti")
	everyNodeToken(t, nodes, bySubject, 401, "a token denied by subject")

	// Past the expiry asked for, and near the end of the tokens' hour.
	for _, after := range []time.Duration{20 * time.Minute, time.Hour - 2*time.Second} {
		clk.Set(now.Add(after))
		everyNodeToken(t, nodes, byJTI, 401, fmt.Sprintf("a token denied by jti, %v later", after))
		everyNodeToken(t, nodes, bySubject, 401, fmt.Sprintf("a token denied by subject, %v later", after))
		everyNodeToken(t, nodes, earlyExp, 401, fmt.Sprintf("a token denied by jti with an early token_expires, %v later", after))
		everyNodeToken(t, nodes, other, 200, fmt.Sprintf("a token not denied, %v later", after))
	}

	// A node that joins now gets the entries from the control plane.
	late := startClockNode(t, cp.url, "node-late", clk.Now)
	waitFleet(t, cp, "the late node on the config", allRun(len(nodes)+1, cp.Distribution.Status().Version))
	waitLane(t, cp, len(nodes)+1, version)
	everyNodeToken(t, []*gatewayNode{late}, byJTI, 401, "a token denied by jti, on a node that joined later")
	everyNodeToken(t, []*gatewayNode{late}, bySubject, 401, "a token denied by subject, on a node that joined later")
	everyNodeToken(t, []*gatewayNode{late}, earlyExp, 401, "a token denied by jti with an early token_expires, on a node that joined later")
	everyNodeToken(t, []*gatewayNode{late}, other, 200, "a token not denied, on a node that joined later")

	// And so would one that started from the signed snapshot.
	resp, err := http.Get(ks.url + keysvc.SnapshotPath)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	snap, err := keysnapshot.Verify(body, []ed25519.PublicKey{ks.signer})
	if err != nil {
		t.Fatal(err)
	}
	var denied []string
	for _, e := range snap.GetEntries() {
		if d := e.GetDeny(); d != nil {
			denied = append(denied, d.GetJti()+d.GetSubject())
		}
	}
	if slices.Sort(denied); !slices.Equal(denied, []string{"early-exp", "hour-token", "user-9"}) {
		t.Errorf("the signed snapshot at +%v, past the asked expiry, has deny entries %v; want early-exp, hour-token and user-9", clk.Now().Sub(now), denied)
	}
}

// TestRevokeKeyWaitsForEveryNode: a revocation that asks to wait answers
// once every node has it, so the next call with the key is a 401 on
// every node at once, with no wait of the caller's own; a node that never
// acknowledges is named in the answer, and the revocation is committed
// all the same.
func TestRevokeKeyWaitsForEveryNode(t *testing.T) {
	t.Parallel()
	cp, ks, nodes := keyFleet(t, 3)
	first, second := createKey(t, ks, "app-first"), createKey(t, ks, "app-second")
	resp, err := ks.keys.RevokeKey(context.Background(), connect.NewRequest(&keysv1.RevokeKeyRequest{
		KeyId: first.GetKey().GetKeyId(), Reason: "leaked", WaitForNodes: durationpb.New(10 * time.Second)}))
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.Msg.GetPropagation(); p.GetState() != keysv1.Propagation_STATE_COMPLETE || p.GetNodes() != 3 || len(p.GetBehind()) != 0 {
		t.Errorf("RevokeKey waiting for every node: propagation %v, want complete on 3 nodes", p)
	}
	everyNode(t, nodes, first.GetRawKey(), 401, "the key revoked with a wait, at once")

	// A node that says hello and never acknowledges.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dc := distributionv1connect.NewDistributionServiceClient(&http.Client{Transport: admintest.Bearer(nodeToken, gatewaytest.H2CClient(t).Transport)}, cp.url)
	stream := dc.FastLane(ctx)
	if err := stream.Send(&distributionv1.FastLaneRequest{Message: &distributionv1.FastLaneRequest_Hello{Hello: &distributionv1.FastLaneHello{NodeId: "stuck-node"}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stream.CloseRequest(); _ = stream.CloseResponse() })
	waitLane(t, cp, 4, 0)
	resp, err = ks.keys.RevokeKey(context.Background(), connect.NewRequest(&keysv1.RevokeKeyRequest{
		KeyId: second.GetKey().GetKeyId(), Reason: "leaked", WaitForNodes: durationpb.New(time.Second)}))
	if err != nil {
		t.Fatal(err)
	}
	// (A live node slow to acknowledge on a loaded machine may be named
	// too: only the stuck one must be.)
	p := resp.Msg.GetPropagation()
	if p.GetState() != keysv1.Propagation_STATE_INCOMPLETE || p.GetNodes() != 4 ||
		!slices.ContainsFunc(p.GetBehind(), func(n *keysv1.LaggingNode) bool { return n.GetNodeId() == "stuck-node" }) {
		t.Errorf("RevokeKey with a node that does not acknowledge: propagation %v, want stuck-node behind, of 4", p)
	}
	if resp.Msg.GetKey().GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED {
		t.Errorf("the key revoked with a node behind is %v, want revoked", resp.Msg.GetKey().GetStatus())
	}
	// The three live nodes have it (the stuck one gone).
	_ = stream.CloseRequest()
	_ = stream.CloseResponse()
	cancel()
	waitLaneRev(t, cp, nodes, resp.Msg.GetKey().GetRev())
	everyNode(t, nodes, second.GetRawKey(), 401, "the key revoked with a node behind")
}
