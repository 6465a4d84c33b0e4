package distribution_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/distribution"
	"github.com/portico-gw/portico/gateway/fastlane"
	"github.com/portico-gw/portico/gateway/keysnapshot"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

func newSigner(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// signed returns snap signed by priv as the key service signs it; edit,
// if not nil, may change the signed message before it is marshalled.
func signed(t *testing.T, priv ed25519.PrivateKey, snap *configv1.KeySnapshot, edit func(*configv1.SignedKeySnapshot)) []byte {
	t.Helper()
	payload, err := proto.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	s := &configv1.SignedKeySnapshot{
		Payload:   payload,
		Algorithm: "Ed25519",
		KeyId:     keysnapshot.SignerID(priv.Public().(ed25519.PublicKey)),
		Signature: ed25519.Sign(priv, payload),
	}
	if edit != nil {
		edit(s)
	}
	data, err := proto.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// record is an active key record for id.
func record(id string, status configv1.KeyStatus) *configv1.KeyRecord {
	sum := sha256.Sum256([]byte("key of " + id))
	return &configv1.KeyRecord{Sha256: sum[:], KeyId: id, AppId: "app", TenantId: "acme", Plan: "pro", Status: status}
}

const (
	active  = configv1.KeyStatus_KEY_STATUS_ACTIVE
	revoked = configv1.KeyStatus_KEY_STATUS_REVOKED
)

// snapshot is a KeySnapshot at seq holding records, at revisions 1, 2, ….
func snapshot(seq uint64, records ...*configv1.KeyRecord) *configv1.KeySnapshot {
	s := &configv1.KeySnapshot{Seq: seq, Generated: timestamppb.Now()}
	for i, r := range records {
		s.Entries = append(s.Entries, &configv1.FastLaneEntry{Rev: uint64(i + 1), Entry: &configv1.FastLaneEntry_Key{Key: r}})
	}
	return s
}

func TestVerifySnapshot(t *testing.T) {
	t.Parallel()
	pub, priv := newSigner(t)
	otherPub, otherPriv := newSigner(t)
	snap := snapshot(7, record("a", active))
	flip := func(b []byte, i int) []byte {
		c := append([]byte(nil), b...)
		c[i] ^= 0x01
		return c
	}
	for _, tc := range []struct {
		name    string
		data    []byte
		trusted []ed25519.PublicKey
		want    error
	}{
		{"good", signed(t, priv, snap, nil), []ed25519.PublicKey{pub}, nil},
		{"good, second trusted key", signed(t, priv, snap, nil), []ed25519.PublicKey{otherPub, pub}, nil},
		{"payload changed", signed(t, priv, snap, func(s *configv1.SignedKeySnapshot) { s.Payload = flip(s.Payload, len(s.Payload)-1) }),
			[]ed25519.PublicKey{pub}, keysnapshot.ErrBadSignature},
		{"signature changed", signed(t, priv, snap, func(s *configv1.SignedKeySnapshot) { s.Signature = flip(s.Signature, 10) }),
			[]ed25519.PublicKey{pub}, keysnapshot.ErrBadSignature},
		{"signature short", signed(t, priv, snap, func(s *configv1.SignedKeySnapshot) { s.Signature = s.Signature[:63] }),
			[]ed25519.PublicKey{pub}, keysnapshot.ErrBadSignature},
		{"no signature", signed(t, priv, snap, func(s *configv1.SignedKeySnapshot) { s.Signature = nil }),
			[]ed25519.PublicKey{pub}, keysnapshot.ErrBadSignature},
		{"another key's signature under a trusted key id", signed(t, otherPriv, snap, func(s *configv1.SignedKeySnapshot) {
			s.KeyId = keysnapshot.SignerID(pub)
		}), []ed25519.PublicKey{pub}, keysnapshot.ErrBadSignature},
		{"unknown signer", signed(t, otherPriv, snap, nil), []ed25519.PublicKey{pub}, keysnapshot.ErrUnknownSigner},
		{"no key id", signed(t, priv, snap, func(s *configv1.SignedKeySnapshot) { s.KeyId = "" }),
			[]ed25519.PublicKey{pub}, keysnapshot.ErrUnknownSigner},
		{"nothing trusted", signed(t, priv, snap, nil), nil, keysnapshot.ErrUnknownSigner},
		{"wrong algorithm", signed(t, priv, snap, func(s *configv1.SignedKeySnapshot) { s.Algorithm = "ES256" }),
			[]ed25519.PublicKey{pub}, keysnapshot.ErrMalformed},
		{"no algorithm", signed(t, priv, snap, func(s *configv1.SignedKeySnapshot) { s.Algorithm = "" }),
			[]ed25519.PublicKey{pub}, keysnapshot.ErrMalformed},
		{"garbage", []byte("this is not a protobuf message"), []ed25519.PublicKey{pub}, keysnapshot.ErrMalformed},
		{"signed garbage", func() []byte {
			payload := []byte{0xff, 0xff, 0xff}
			data, err := proto.Marshal(&configv1.SignedKeySnapshot{Payload: payload, Algorithm: "Ed25519",
				KeyId: keysnapshot.SignerID(pub), Signature: ed25519.Sign(priv, payload)})
			if err != nil {
				t.Fatal(err)
			}
			return data
		}(), []ed25519.PublicKey{pub}, keysnapshot.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := keysnapshot.Verify(tc.data, tc.trusted)
			if tc.want != nil {
				if !errors.Is(err, tc.want) || got != nil {
					t.Errorf("VerifySnapshot = %v, %v; want nil, %v", got, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("VerifySnapshot: %v", err)
			}
			if !proto.Equal(got, snap) {
				t.Errorf("VerifySnapshot = %v, want %v", got, snap)
			}
		})
	}
}

// snapshotServer serves a signed snapshot as the key service does: with
// an ETag naming its sequence, and 304 when If-None-Match names it.
type snapshotServer struct {
	*httptest.Server

	mu     sync.Mutex
	data   []byte
	seq    uint64
	status int    // if not 0, the answer instead of the snapshot
	etag   string // if not "", the ETag instead of the sequence's
	// ifNoneMatch are the If-None-Match headers of the requests.
	ifNoneMatch []string
}

func newSnapshotServer(t *testing.T) *snapshotServer {
	s := &snapshotServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.ifNoneMatch = append(s.ifNoneMatch, r.Header.Get("If-None-Match"))
		if s.status != 0 {
			http.Error(w, "no snapshot", s.status)
			return
		}
		etag := `"seq-` + strconv.FormatUint(s.seq, 10) + `"`
		if s.etag != "" {
			etag = s.etag
		}
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(s.data)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *snapshotServer) serve(seq uint64, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq, s.data, s.status = seq, data, 0
}

func (s *snapshotServer) fail(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = status
}

func (s *snapshotServer) setETag(etag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.etag = etag
}

// lastIfNoneMatch returns the If-None-Match of the last request.
func (s *snapshotServer) lastIfNoneMatch() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ifNoneMatch) == 0 {
		return "<no request>"
	}
	return s.ifNoneMatch[len(s.ifNoneMatch)-1]
}

func newPoller(t *testing.T, srv *snapshotServer, lane *fastlane.Lane, maxBytes int64, trusted ...ed25519.PublicKey) *distribution.Poller {
	t.Helper()
	p, err := distribution.NewPoller(distribution.PollerOptions{URL: srv.URL, HTTPClient: srv.Client(), Trusted: trusted,
		Interval: 10 * time.Millisecond, MaxBytes: maxBytes, Lane: lane, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("NewPoller: %v", err)
	}
	return p
}

func lookup(l *fastlane.Lane, id string) (revoked, ok bool) {
	r, ok := l.Keys().Lookup([32]byte(record(id, active).GetSha256()))
	return r.Revoked, ok
}

func TestPollerApplies(t *testing.T) {
	t.Parallel()
	pub, priv := newSigner(t)
	srv := newSnapshotServer(t)
	lane := fastlane.New(fastlane.Options{})
	p := newPoller(t, srv, lane, 0, pub)
	ctx := context.Background()

	srv.serve(3, signed(t, priv, snapshot(3, record("a", active)), nil))
	if err := p.Poll(ctx); err != nil {
		t.Fatalf("first Poll: %v", err)
	}
	if rev, ok := lookup(lane, "a"); !ok || rev {
		t.Fatalf("after the first Poll, key a: found %v, revoked %v; want found, active", ok, rev)
	}
	if got := lane.SignedSeq(); got != 3 {
		t.Errorf("SignedSeq() = %d, want 3", got)
	}
	if got := srv.lastIfNoneMatch(); got != "" {
		t.Errorf("first request's If-None-Match = %q, want none", got)
	}

	// Nothing new: the poller names what it has and the server answers 304.
	keys := lane.Keys()
	if err := p.Poll(ctx); err != nil {
		t.Errorf("Poll answered 304: %v", err)
	}
	if got := srv.lastIfNoneMatch(); got != `"seq-3"` {
		t.Errorf("If-None-Match = %q, want %q", got, `"seq-3"`)
	}
	if lane.Keys() != keys || lane.SignedSeq() != 3 {
		t.Error("a 304 changed the lane")
	}

	// A newer snapshot: a revocation and a new key.
	srv.serve(5, signed(t, priv, snapshot(5, record("a", active), record("a", revoked), record("b", active)), nil))
	if err := p.Poll(ctx); err != nil {
		t.Fatalf("Poll of a newer snapshot: %v", err)
	}
	if rev, ok := lookup(lane, "a"); !ok || !rev {
		t.Errorf("key a: found %v, revoked %v; want found, revoked", ok, rev)
	}
	if _, ok := lookup(lane, "b"); !ok {
		t.Error("key b not applied")
	}
	if got := lane.SignedSeq(); got != 5 {
		t.Errorf("SignedSeq() = %d, want 5", got)
	}
	if polls, err := p.Status(); polls != 3 || err != nil {
		t.Errorf("Status() = %d, %v; want 3, nil", polls, err)
	}
}

// TestPollerRefuses: whatever the poller refuses leaves the lane as it was.
func TestPollerRefuses(t *testing.T) {
	t.Parallel()
	pub, priv := newSigner(t)
	_, otherPriv := newSigner(t)
	srv := newSnapshotServer(t)
	lane := fastlane.New(fastlane.Options{})
	p := newPoller(t, srv, lane, 0, pub)
	ctx := context.Background()

	srv.serve(5, signed(t, priv, snapshot(5, record("a", active)), nil))
	if err := p.Poll(ctx); err != nil {
		t.Fatalf("Poll: %v", err)
	}
	keys := lane.Keys()
	revokeAll := snapshot(0, record("a", active), record("a", revoked), record("evil", active))
	at := func(seq uint64) *configv1.KeySnapshot {
		s := proto.CloneOf(revokeAll)
		s.Seq = seq
		return s
	}
	for _, tc := range []struct {
		name  string
		setup func()
		want  error // nil: any error
		ok    bool  // Poll succeeds (and changes nothing)
	}{
		{"older", func() { srv.serve(4, signed(t, priv, at(4), nil)) }, fastlane.ErrStale, false},
		{"same sequence, If-None-Match ignored", func() { srv.serve(5, signed(t, priv, at(5), nil)); srv.setETag(`"other"`) }, nil, true},
		{"forged", func() {
			srv.serve(9, signed(t, otherPriv, at(9), func(s *configv1.SignedKeySnapshot) { s.KeyId = keysnapshot.SignerID(pub) }))
		}, keysnapshot.ErrBadSignature, false},
		{"payload changed", func() {
			srv.serve(9, signed(t, priv, at(9), func(s *configv1.SignedKeySnapshot) { s.Payload = append(s.Payload, 0x08, 0x0a) }))
		}, keysnapshot.ErrBadSignature, false},
		{"unknown signer", func() { srv.serve(9, signed(t, otherPriv, at(9), nil)) }, keysnapshot.ErrUnknownSigner, false},
		{"server error", func() { srv.fail(http.StatusInternalServerError) }, nil, false},
		{"not found", func() { srv.fail(http.StatusNotFound) }, nil, false},
		{"unauthorized", func() { srv.fail(http.StatusUnauthorized) }, nil, false},
	} {
		srv.setETag("")
		tc.setup()
		err := p.Poll(ctx)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: Poll = %v, want nil", tc.name, err)
		case !tc.ok && err == nil:
			t.Errorf("%s: Poll = nil, want an error", tc.name)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: Poll = %v, want %v", tc.name, err, tc.want)
		}
		if _, lastErr := p.Status(); lastErr != err {
			t.Errorf("%s: Status() error = %v, want Poll's %v", tc.name, lastErr, err)
		}
		if lane.Keys() != keys || lane.SignedSeq() != 5 {
			t.Fatalf("%s: the lane changed (SignedSeq %d)", tc.name, lane.SignedSeq())
		}
		// The poller still names the snapshot it applied, not a refused one.
		if err := p.Poll(ctx); err == nil && tc.want != nil {
			t.Errorf("%s: a second Poll of a refused snapshot = nil", tc.name)
		}
		if got := srv.lastIfNoneMatch(); got != `"seq-5"` {
			t.Errorf("%s: If-None-Match = %q, want %q", tc.name, got, `"seq-5"`)
		}
	}
}

func TestPollerMaxBytes(t *testing.T) {
	t.Parallel()
	pub, priv := newSigner(t)
	srv := newSnapshotServer(t)
	data := signed(t, priv, snapshot(3, record("a", active), record("b", active)), nil)
	srv.serve(3, data)

	lane := fastlane.New(fastlane.Options{})
	err := newPoller(t, srv, lane, int64(len(data)-1), pub).Poll(context.Background())
	if !errors.Is(err, keysnapshot.ErrMalformed) {
		t.Errorf("Poll of %d bytes with MaxBytes %d = %v, want ErrMalformed", len(data), len(data)-1, err)
	}
	if lane.Keys() != nil || lane.SignedSeq() != 0 {
		t.Error("a snapshot over MaxBytes changed the lane")
	}
	if err := newPoller(t, srv, lane, int64(len(data)), pub).Poll(context.Background()); err != nil {
		t.Errorf("Poll of %d bytes with MaxBytes %d = %v", len(data), len(data), err)
	}
	if _, ok := lookup(lane, "b"); !ok {
		t.Error("a snapshot of MaxBytes was not applied")
	}
}

// TestPollerRun: Run polls at once and on its interval, and returns when
// its context ends.
func TestPollerRun(t *testing.T) {
	t.Parallel()
	pub, priv := newSigner(t)
	srv := newSnapshotServer(t)
	srv.serve(1, signed(t, priv, snapshot(1, record("a", active)), nil))
	lane := fastlane.New(fastlane.Options{})
	p := newPoller(t, srv, lane, 0, pub)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return 10s after its context ended")
		}
	})

	waitSeq := func(seq uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for lane.SignedSeq() != seq {
			if time.Now().After(deadline) {
				polls, err := p.Status()
				t.Fatalf("SignedSeq() = %d after 10s, want %d (%d polls, last error %v)", lane.SignedSeq(), seq, polls, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitSeq(1)
	srv.serve(2, signed(t, priv, snapshot(2, record("a", active), record("a", revoked)), nil))
	waitSeq(2)
	if rev, ok := lookup(lane, "a"); !ok || !rev {
		t.Errorf("key a after the second snapshot: found %v, revoked %v; want revoked", ok, rev)
	}
}

func TestNewPoller(t *testing.T) {
	t.Parallel()
	pub, _ := newSigner(t)
	lane := fastlane.New(fastlane.Options{})
	for _, tc := range []struct {
		name string
		opts distribution.PollerOptions
	}{
		{"no URL", distribution.PollerOptions{Lane: lane, Trusted: []ed25519.PublicKey{pub}}},
		{"no lane", distribution.PollerOptions{URL: "http://keys.invalid/", Trusted: []ed25519.PublicKey{pub}}},
		{"no trusted key", distribution.PollerOptions{URL: "http://keys.invalid/", Lane: lane}},
	} {
		if _, err := distribution.NewPoller(tc.opts); err == nil {
			t.Errorf("NewPoller with %s = nil error", tc.name)
		}
	}
}

// TestPollerCache: the last snapshot applied is kept on disk and applied
// again at Boot (verified again) by a node that restarts with nothing to
// poll; a cache file signed by another key is refused.
func TestPollerCache(t *testing.T) {
	t.Parallel()
	pub, priv := newSigner(t)
	srv := newSnapshotServer(t)
	cache := filepath.Join(t.TempDir(), "keys.binpb")
	p, err := distribution.NewPoller(distribution.PollerOptions{URL: srv.URL + "/v1/key-snapshot", Trusted: []ed25519.PublicKey{pub},
		CacheFile: cache, Lane: fastlane.New(fastlane.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	srv.serve(4, signed(t, priv, snapshot(4, record("a", revoked)), nil))
	if err := p.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}

	// A restart: a new lane, and the key service is gone.
	srv.Close()
	lane := fastlane.New(fastlane.Options{})
	again, err := distribution.NewPoller(distribution.PollerOptions{URL: srv.URL + "/v1/key-snapshot", Trusted: []ed25519.PublicKey{pub},
		CacheFile: cache, Lane: lane})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := again.Boot(); !ok || err != nil {
		t.Fatalf("Boot() = %v, %v; want true, nil", ok, err)
	}
	if rev, ok := lookup(lane, "a"); !ok || !rev || lane.SignedSeq() != 4 {
		t.Errorf("after Boot, key a: found %v, revoked %v, seq %d; want found, revoked, 4", ok, rev, lane.SignedSeq())
	}

	// A cache the node's keys do not verify is not applied.
	other, _ := newSigner(t)
	lane = fastlane.New(fastlane.Options{})
	untrusted, err := distribution.NewPoller(distribution.PollerOptions{URL: srv.URL, Trusted: []ed25519.PublicKey{other},
		CacheFile: cache, Lane: lane})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := untrusted.Boot(); ok || !errors.Is(err, keysnapshot.ErrUnknownSigner) {
		t.Errorf("Boot() with a cache signed by an untrusted key = %v, %v; want false, ErrUnknownSigner", ok, err)
	}
	if _, ok := lookup(lane, "a"); ok {
		t.Error("an untrusted cache was applied")
	}
	// No cache file: nothing to do.
	none, _ := distribution.NewPoller(distribution.PollerOptions{URL: srv.URL, Trusted: []ed25519.PublicKey{pub},
		CacheFile: filepath.Join(t.TempDir(), "none"), Lane: fastlane.New(fastlane.Options{})})
	if ok, err := none.Boot(); ok || err != nil {
		t.Errorf("Boot() without a cache = %v, %v", ok, err)
	}
}

// TestPollerRefusesOldSnapshot: a validly signed snapshot generated long
// ago (a replay by whoever sits between node and key service) changes
// nothing, and so does one that says nothing of when it was generated.
func TestPollerRefusesOldSnapshot(t *testing.T) {
	t.Parallel()
	pub, priv := newSigner(t)
	srv := newSnapshotServer(t)
	lane := fastlane.New(fastlane.Options{})
	p := newPoller(t, srv, lane, 0, pub)
	old := snapshot(9, record("a", active))
	old.Generated = timestamppb.New(time.Now().Add(-time.Hour))
	srv.serve(9, signed(t, priv, old, nil))
	if err := p.Poll(context.Background()); !errors.Is(err, distribution.ErrTooOld) {
		t.Errorf("Poll of a snapshot generated an hour ago = %v, want ErrTooOld", err)
	}
	undated := snapshot(10, record("a", active))
	undated.Generated = nil
	srv.serve(10, signed(t, priv, undated, nil))
	if err := p.Poll(context.Background()); !errors.Is(err, distribution.ErrTooOld) {
		t.Errorf("Poll of an undated snapshot = %v, want ErrTooOld", err)
	}
	if _, ok := lookup(lane, "a"); ok || lane.SignedSeq() != 0 {
		t.Error("an old snapshot was applied")
	}
}
