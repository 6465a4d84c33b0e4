package keysvc_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-gw/portico/control"
	cstore "github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/gateway/apikey"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/keysvc"
	"github.com/portico-gw/portico/keysvc/store"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

const publisherToken = "keysvc-test-publisher-token-0123456789abcdef"

// controlPlane is a control plane over a new SQLite store. Its handler
// is served by the test (serve), so that a test can choose the address.
type controlPlane struct {
	*control.Plane
	store *cstore.Store
}

func newControl(t *testing.T) *controlPlane {
	t.Helper()
	st, err := cstore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	p, err := control.New(context.Background(), control.Options{Store: st, PublisherToken: publisherToken, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &controlPlane{Plane: p, store: st}
}

// serve serves h on l (nil: a new loopback listener) with HTTP/1.1 and
// h2c, as `portico control` does, and returns its URL.
func serve(t *testing.T, h http.Handler, l net.Listener) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	if l != nil {
		_ = srv.Listener.Close()
		srv.Listener = l
	}
	gatewaytest.StartH2C(t, srv)
	return srv.URL
}

// closedAddr returns a loopback address nothing listens on, for now.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// listenAgain listens on addr, which was free a moment ago, retrying
// briefly while the system releases it.
func listenAgain(t *testing.T, addr string) net.Listener {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("listening on %s again: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// source is how far the control plane at url has the key service's
// changes.
func source(t *testing.T, url string) *distributionv1.SourceResponse {
	t.Helper()
	client := distributionv1connect.NewFastLaneServiceClient(bearer(publisherToken), url)
	resp, err := client.Source(context.Background(), connect.NewRequest(&distributionv1.SourceRequest{Source: "keys"}))
	if err != nil {
		t.Fatalf("Source(keys): %v", err)
	}
	return resp.Msg
}

// waitSource waits until the control plane at url has the key service's
// changes up to seq.
func waitSource(t *testing.T, url string, seq uint64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := source(t, url).GetSeq()
		if got == seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the control plane has the key service's changes up to %d, want %d", within, got, seq)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// laneKeys are the keys on the control plane's fast lane, by id.
func (cp *controlPlane) laneKeys(t *testing.T) map[string]*configv1.KeyRecord {
	t.Helper()
	rows, _, err := cp.store.FastLaneSince(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*configv1.KeyRecord{}
	for _, r := range rows {
		e := &configv1.FastLaneEntry{}
		if err := proto.Unmarshal(r.Data, e); err != nil {
			t.Fatalf("fast-lane entry %s %q: %v", r.Kind, r.ID, err)
		}
		if k := e.GetKey(); k != nil {
			out[k.GetKeyId()] = k
		}
	}
	return out
}

// switchHandler serves whichever handler it holds, so that one address
// can be served by one control plane, then another.
type switchHandler struct{ h atomic.Pointer[http.Handler] }

func (s *switchHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *switchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// TestPublishAfterControlPlaneReturns: with the control plane down a
// revocation is committed and answered with version 0, and a new key is
// withdrawn; once a control plane listens at the address, Run sends it
// every change.
func TestPublishAfterControlPlaneReturns(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	s := startService(t, keysvc.Options{ControlURL: "http://" + addr, ControlToken: publisherToken, WaitTimeout: 2 * time.Second})
	ctx := context.Background()
	// A key made while there was no fast lane to wait for.
	seeded, err := s.store.CreateKey(ctx, store.Key{ID: "key_seeded", Hash: apikey.Hash("ak_live_seeded"), Prefix: "ak_live_Seed",
		AppID: "app-down", TenantID: "t-1", Plan: "gold", Env: "live"})
	if err != nil {
		t.Fatal(err)
	}
	s.run(t)

	// It asks to wait for the nodes: there is no one to ask, and the
	// answer says so.
	rv, err := s.keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: seeded.ID, Reason: "leaked", WaitForNodes: durationpb.New(time.Second)}))
	if err != nil {
		t.Fatalf("RevokeKey with the control plane down: %v", err)
	}
	if rv.Msg.GetVersion() != 0 || rv.Msg.GetKey().GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED || rv.Msg.GetPropagation().GetState() != keysv1.Propagation_STATE_UNREACHED {
		t.Errorf("RevokeKey with the control plane down = %v, want revoked at version 0, the nodes unreached", rv.Msg)
	}
	if k := s.storedKey(t, seeded.ID); k.Status != store.StatusRevoked {
		t.Errorf("after RevokeKey the stored key is %v, want revoked", k.Status)
	}

	// A new key nobody can be sure works is not shown, and withdrawn.
	_, err = s.keys.CreateKey(ctx, connect.NewRequest(&keysv1.CreateKeyRequest{AppId: "app-down", TenantId: "t-1", Plan: "gold", Env: keysv1.Environment_ENVIRONMENT_LIVE}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "withdrawn") {
		t.Errorf("CreateKey with the control plane down = %v, want Unavailable, the key withdrawn", err)
	}
	list, err := s.keys.ListKeys(ctx, connect.NewRequest(&keysv1.ListKeysRequest{AppId: "app-down"}))
	if err != nil {
		t.Fatal(err)
	}
	var withdrawn string
	for _, k := range list.Msg.GetKeys() {
		if k.GetKeyId() != seeded.ID {
			withdrawn = k.GetKeyId()
			if k.GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED {
				t.Errorf("the key CreateKey could not confirm is %v, want revoked", k.GetStatus())
			}
		}
	}
	if withdrawn == "" {
		t.Fatalf("ListKeys(app-down) = %v, want the withdrawn key too", list.Msg.GetKeys())
	}

	cp := newControl(t)
	url := serve(t, cp.Handler, listenAgain(t, addr))
	seq := s.seq(t)
	waitSource(t, url, seq, 10*time.Second)
	lane := cp.laneKeys(t)
	for _, id := range []string{seeded.ID, withdrawn} {
		if k := lane[id]; k.GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED {
			t.Errorf("the control plane's lane has key %s as %v, want revoked", id, k)
		}
	}
	// And the next change goes out at once.
	key := s.create(t, "app-up")
	if lane := cp.laneKeys(t); lane[key.GetKey().GetKeyId()].GetStatus() != configv1.KeyStatus_KEY_STATUS_ACTIVE {
		t.Errorf("a key created with the control plane up is not on its lane: %v", lane[key.GetKey().GetKeyId()])
	}
}

// TestRunPublishesAtOnce: changes committed while no key service
// published (it was stopped, or the control plane was away) reach the
// control plane as soon as Run starts, not after the periodic resync.
func TestRunPublishesAtOnce(t *testing.T) {
	t.Parallel()
	cp := newControl(t)
	url := serve(t, cp.Handler, nil)
	// The changes of an earlier key service with no control plane.
	earlier := startService(t, keysvc.Options{})
	for range 3 {
		earlier.create(t, "app-early")
	}
	s := startService(t, keysvc.Options{Store: earlier.store, ControlURL: url, ControlToken: publisherToken})
	if got := source(t, url).GetSeq(); got != 0 {
		t.Fatalf("before Run the control plane has changes up to %d", got)
	}
	s.run(t)
	waitSource(t, url, s.seq(t), 5*time.Second)
	if lane := cp.laneKeys(t); len(lane) != 3 {
		t.Errorf("the control plane's lane has %d keys, want 3", len(lane))
	}
}

// TestPublishToReplacedControlPlane: a control plane whose database was
// replaced has none of the key service's changes; the next change sends
// it all of them.
func TestPublishToReplacedControlPlane(t *testing.T) {
	t.Parallel()
	first, second := newControl(t), newControl(t)
	h := &switchHandler{}
	h.set(first.Handler)
	url := serve(t, h, nil)
	s := startService(t, keysvc.Options{ControlURL: url, ControlToken: publisherToken, WaitTimeout: 5 * time.Second})
	s.run(t)

	var ids []string
	for range 3 {
		ids = append(ids, s.create(t, "app-replace").GetKey().GetKeyId())
	}
	if got, want := source(t, url).GetSeq(), s.seq(t); got != want {
		t.Fatalf("the first control plane has changes up to %d, want %d", got, want)
	}

	h.set(second.Handler) // a new database: no changes at all
	if got := source(t, url).GetSeq(); got != 0 {
		t.Fatalf("the new control plane has changes up to %d", got)
	}
	rv, err := s.keys.RevokeKey(context.Background(), connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: ids[0], Reason: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	src := source(t, url)
	if rv.Msg.GetVersion() == 0 || rv.Msg.GetVersion() != src.GetVersion() || src.GetSeq() != s.seq(t) {
		t.Errorf("RevokeKey = version %d; the new control plane is at version %d with changes up to %d; want the version, and %d",
			rv.Msg.GetVersion(), src.GetVersion(), src.GetSeq(), s.seq(t))
	}
	lane := second.laneKeys(t)
	for i, id := range ids {
		want := configv1.KeyStatus_KEY_STATUS_ACTIVE
		if i == 0 {
			want = configv1.KeyStatus_KEY_STATUS_REVOKED
		}
		if got := lane[id].GetStatus(); got != want {
			t.Errorf("the new control plane has key %s as %v, want %v", id, got, want)
		}
	}

	// Back to the first: it has all but the revocation, and gets it with
	// the next change.
	h.set(first.Handler)
	key := s.create(t, "app-replace")
	if got, want := source(t, url).GetSeq(), s.seq(t); got != want {
		t.Errorf("the first control plane, back, has changes up to %d, want %d", got, want)
	}
	lane = first.laneKeys(t)
	if lane[ids[0]].GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED || lane[key.GetKey().GetKeyId()] == nil {
		t.Errorf("the first control plane, back, has %v and %v", lane[ids[0]], lane[key.GetKey().GetKeyId()])
	}
}

// TestPublishNeedsPublisherToken: a control plane that refuses the key
// service's token does not get its changes; the change is still
// committed and answered with version 0.
func TestPublishNeedsPublisherToken(t *testing.T) {
	t.Parallel()
	cp := newControl(t)
	url := serve(t, cp.Handler, nil)
	s := startService(t, keysvc.Options{ControlURL: url, ControlToken: "not-the-publisher-token"})
	_, err := s.keys.CreateKey(context.Background(), connect.NewRequest(&keysv1.CreateKeyRequest{AppId: "app-tok", TenantId: "t-1", Plan: "gold", Env: keysv1.Environment_ENVIRONMENT_TEST}))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
		t.Errorf("CreateKey with a control plane that refuses the token = %v, want Unavailable", err)
	}
	if got := source(t, url).GetSeq(); got != 0 {
		t.Errorf("the control plane has changes up to %d from a key service with the wrong token", got)
	}
}

// TestRevokeKeyWithUnresponsiveControlPlane: a control plane that
// accepts connections and never answers holds up neither a revocation,
// which is committed (RevokeKey answers version 0 within the service's
// wait timeout), nor a new key's refusal.
func TestRevokeKeyWithUnresponsiveControlPlane(t *testing.T) {
	t.Parallel()
	// A listener nobody accepts on: the kernel completes the handshake,
	// and the request is never read.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	const wait = 300 * time.Millisecond
	s := startService(t, keysvc.Options{ControlURL: "http://" + l.Addr().String(), WaitTimeout: wait})
	seeded, err := s.store.CreateKey(context.Background(), store.Key{ID: "key_seeded", Hash: apikey.Hash("ak_live_seeded"), Prefix: "ak_live_Seed",
		AppID: "app-hang", TenantID: "t-1", Plan: "gold", Env: "live"})
	if err != nil {
		t.Fatal(err)
	}
	// The background round, stuck too, must not hold up the revocation.
	s.run(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*wait)
	defer cancel()
	start := time.Now()
	rv, err := s.keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: seeded.ID, Reason: "leaked"}))
	if err != nil {
		t.Fatalf("RevokeKey with a control plane that does not answer: %v after %s", err, time.Since(start).Round(time.Millisecond))
	}
	if rv.Msg.GetVersion() != 0 || rv.Msg.GetKey().GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED {
		t.Errorf("RevokeKey with a control plane that does not answer = %v, want revoked at version 0", rv.Msg)
	}

	// A new key cannot be confirmed: refused within its wait timeout, as
	// the timeout it is.
	start = time.Now()
	_, err = s.keys.CreateKey(ctx, connect.NewRequest(&keysv1.CreateKeyRequest{AppId: "app-hang", TenantId: "t-1", Plan: "gold", Env: keysv1.Environment_ENVIRONMENT_LIVE}))
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !strings.Contains(err.Error(), "withdrawn") {
		t.Errorf("CreateKey with a control plane that does not answer: %v after %s, want DeadlineExceeded, the key withdrawn", err, time.Since(start).Round(time.Millisecond))
	}
}

// TestPublishAfterStoreRestore: a key store restored from a backup holds
// fewer changes than the control plane; at start the service moves its
// sequence past the control plane's, so its new changes carry revs above
// every rev the nodes hold and reach them.
func TestPublishAfterStoreRestore(t *testing.T) {
	t.Parallel()
	cp := newControl(t)
	url := serve(t, cp.Handler, nil)
	before := startService(t, keysvc.Options{ControlURL: url, ControlToken: publisherToken, WaitTimeout: 5 * time.Second})
	for range 4 {
		before.create(t, "app-before")
	}
	held := source(t, url).GetSeq()
	if held != before.seq(t) || held == 0 {
		t.Fatalf("the control plane holds changes up to %d, want %d", held, before.seq(t))
	}

	// The same service on a store "restored" from an empty backup.
	after := startService(t, keysvc.Options{ControlURL: url, ControlToken: publisherToken, WaitTimeout: 5 * time.Second})
	after.run(t)
	deadline := time.Now().Add(10 * time.Second)
	for after.seq(t) < held {
		if time.Now().After(deadline) {
			t.Fatalf("the restored store's sequence is %d, want %d or more", after.seq(t), held)
		}
		time.Sleep(5 * time.Millisecond)
	}
	k := after.create(t, "app-after")
	if k.GetKey().GetRev() <= held {
		t.Errorf("a key created after the restore has rev %d, want above %d", k.GetKey().GetRev(), held)
	}
	if got := cp.laneKeys(t)[k.GetKey().GetKeyId()]; got.GetStatus() != configv1.KeyStatus_KEY_STATUS_ACTIVE {
		t.Errorf("the control plane has the new key as %v, want active", got)
	}
}

// slowWait is a control plane whose Wait does not answer a waiting call
// in time (a loaded control plane), except when asked for an immediate
// answer: it answers after the caller's deadline (late), or with its
// own deadline_exceeded a moment before the caller's deadline passes
// (early).
type slowWait struct {
	distributionv1connect.FastLaneServiceHandler
	early, never bool
	asked        atomic.Int32
}

func (s *slowWait) Wait(ctx context.Context, req *connect.Request[distributionv1.WaitRequest]) (*connect.Response[distributionv1.WaitResponse], error) {
	s.asked.Add(1)
	if s.never {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if d := req.Msg.GetTimeout().AsDuration(); d > 10*time.Millisecond {
		if s.early {
			return nil, connect.NewError(connect.CodeDeadlineExceeded, errors.New("the wait's deadline passed"))
		}
		select {
		case <-time.After(d + time.Second): // well past the caller's deadline
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return connect.NewResponse(&distributionv1.WaitResponse{Nodes: 2, Behind: []*distributionv1.NodeFastLane{{NodeId: "slow-node", Version: 1}}}), nil
}

// TestCreateKeyNamesLaggingNodesAfterALateWait: when the control plane's
// answer to Wait comes after the caller's deadline, or is its own
// deadline_exceeded, the key service asks again at once, so the answer
// is the timeout it is, naming the nodes that lack the key, not "could
// not be reached".
func TestCreateKeyNamesLaggingNodesAfterALateWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		early, never bool
		want         string
	}{
		{"late_answer", false, false, "slow-node"},
		{"early_deadline_exceeded", true, false, "slow-node"},
		// A control plane that took the key and never answers, even at
		// once: still the timeout it is.
		{"never_answers", false, true, "did not say which nodes have the key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cp := newControl(t)
			slow := &slowWait{FastLaneServiceHandler: cp.Distribution.Publisher(), early: tc.early, never: tc.never}
			mux := http.NewServeMux()
			mux.Handle("/", cp.Handler)
			path, h := distributionv1connect.NewFastLaneServiceHandler(slow)
			mux.Handle(path, h)
			url := serve(t, mux, nil)
			s := startService(t, keysvc.Options{ControlURL: url, ControlToken: publisherToken, WaitTimeout: 300 * time.Millisecond})
			_, err := s.keys.CreateKey(context.Background(), connect.NewRequest(&keysv1.CreateKeyRequest{AppId: "app-late", TenantId: "t-1", Plan: "gold", Env: keysv1.Environment_ENVIRONMENT_LIVE}))
			if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CreateKey whose Wait answers late: %v, want DeadlineExceeded saying %q", err, tc.want)
			}
			if n := slow.asked.Load(); n != 2 {
				t.Errorf("Wait asked %d times, want 2 (the wait, then at once)", n)
			}
		})
	}
}

// slowPublish is a control plane that takes a publish only after the
// caller's deadline has passed (a loaded control plane).
type slowPublish struct {
	distributionv1connect.FastLaneServiceHandler
	hold time.Duration
}

func (s *slowPublish) Publish(ctx context.Context, req *connect.Request[distributionv1.PublishRequest]) (*connect.Response[distributionv1.PublishResponse], error) {
	select {
	case <-time.After(s.hold):
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	return s.FastLaneServiceHandler.Publish(ctx, req)
}

// TestCreateKeyTimesOutWhenTheControlPlaneTakesItLate: a control plane
// that is reached but takes the new key only after the wait has run out
// makes CreateKey a DeadlineExceeded, the key withdrawn, not an
// Unavailable "could not be reached".
func TestCreateKeyTimesOutWhenTheControlPlaneTakesItLate(t *testing.T) {
	t.Parallel()
	cp := newControl(t)
	const wait = 300 * time.Millisecond
	slow := &slowPublish{FastLaneServiceHandler: cp.Distribution.Publisher(), hold: 2 * wait}
	mux := http.NewServeMux()
	mux.Handle("/", cp.Handler)
	path, h := distributionv1connect.NewFastLaneServiceHandler(slow)
	mux.Handle(path, h)
	url := serve(t, mux, nil)
	s := startService(t, keysvc.Options{ControlURL: url, ControlToken: publisherToken, WaitTimeout: wait})
	_, err := s.keys.CreateKey(context.Background(), connect.NewRequest(&keysv1.CreateKeyRequest{AppId: "app-slow", TenantId: "t-1", Plan: "gold", Env: keysv1.Environment_ENVIRONMENT_LIVE}))
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !strings.Contains(err.Error(), "withdrawn") {
		t.Fatalf("CreateKey whose publish is taken late: %v, want DeadlineExceeded, the key withdrawn", err)
	}
	list, err := s.keys.ListKeys(context.Background(), connect.NewRequest(&keysv1.ListKeysRequest{AppId: "app-slow"}))
	if err != nil {
		t.Fatal(err)
	}
	if keys := list.Msg.GetKeys(); len(keys) != 1 || keys[0].GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED {
		t.Errorf("the key taken late: %v, want one, revoked", keys)
	}
}
