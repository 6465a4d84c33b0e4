package keysvc_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/apikey"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/keysvc"
	"github.com/portico-gw/portico/keysvc/store"
	"github.com/portico-gw/portico/testing/testclock"
)

// epoch is the test clocks' start: whole seconds, as the store keeps
// microseconds.
var epoch = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

// TestCreateKey: without a control plane CreateKey answers at once with a
// key of its environment; the store holds the key's hash and metadata and
// never the key.
func TestCreateKey(t *testing.T) {
	t.Parallel()
	clock := testclock.New(epoch)
	s := startService(t, keysvc.Options{Now: clock.Now})
	notAfter := epoch.Add(90 * 24 * time.Hour)

	for _, c := range []struct {
		env     keysv1.Environment
		prefix  string
		env2    apikey.Env
		envName string
	}{
		{keysv1.Environment_ENVIRONMENT_LIVE, "ak_live_", apikey.Live, "live"},
		{keysv1.Environment_ENVIRONMENT_TEST, "ak_test_", apikey.Test, "test"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := s.keys.CreateKey(ctx, connect.NewRequest(&keysv1.CreateKeyRequest{
			AppId: "app-create", TenantId: "tenant-1", Plan: "gold", Scopes: []string{"orders:read", "orders:write"}, Env: c.env,
			Priority: configv1.Priority(1), NotAfter: timestamppb.New(notAfter),
		}))
		cancel()
		if err != nil {
			t.Fatalf("CreateKey(%v): %v", c.env, err)
		}
		raw, got := resp.Msg.GetRawKey(), resp.Msg.GetKey()
		if !strings.HasPrefix(raw, c.prefix) {
			t.Errorf("CreateKey(%v) = key %.12s…, want prefix %s", c.env, raw, c.prefix)
		}
		if env, err := apikey.Parse(raw); err != nil || env != c.env2 {
			t.Errorf("apikey.Parse(the %v key) = %v, %v; want %v", c.env, env, err, c.env2)
		}
		if got.GetPrefix() != raw[:12] {
			t.Errorf("CreateKey(%v).Key.Prefix = %q, want the key's first 12 characters %q", c.env, got.GetPrefix(), raw[:12])
		}
		want := &keysv1.Key{AppId: "app-create", TenantId: "tenant-1", Plan: "gold", Scopes: []string{"orders:read", "orders:write"}, Env: c.env,
			Priority: configv1.Priority(1), Status: configv1.KeyStatus_KEY_STATUS_ACTIVE}
		if got.GetAppId() != want.GetAppId() || got.GetTenantId() != want.GetTenantId() || got.GetPlan() != want.GetPlan() ||
			!slices.Equal(got.GetScopes(), want.GetScopes()) || got.GetEnv() != want.GetEnv() || got.GetPriority() != want.GetPriority() ||
			got.GetStatus() != want.GetStatus() || !strings.HasPrefix(got.GetKeyId(), "key_") {
			t.Errorf("CreateKey(%v).Key = %v, want %v", c.env, got, want)
		}
		if !got.GetCreated().AsTime().Equal(epoch) || !got.GetNotAfter().AsTime().Equal(notAfter) {
			t.Errorf("CreateKey(%v).Key created %v, not after %v; want %v, %v", c.env, got.GetCreated().AsTime(), got.GetNotAfter().AsTime(), epoch, notAfter)
		}
		if seq := s.seq(t); got.GetRev() != seq {
			t.Errorf("CreateKey(%v).Key.Rev = %d, want the store's seq %d", c.env, got.GetRev(), seq)
		}

		k := s.storedKey(t, got.GetKeyId())
		if k.Hash != apikey.Hash(raw) || k.Env != c.envName || k.Prefix != raw[:12] || k.AppID != "app-create" || k.Status != store.StatusActive {
			t.Errorf("stored key = %+v, want the hash of the key, env %s", k, c.envName)
		}
		if strings.Contains(fmt.Sprintf("%+v", k), raw[12:]) {
			t.Errorf("the stored key holds the key: %+v", k)
		}
		byHash, err := s.store.KeyByHash(context.Background(), apikey.Hash(raw))
		if err != nil || byHash.ID != got.GetKeyId() {
			t.Errorf("KeyByHash(the key's hash) = %q, %v; want %q", byHash.ID, err, got.GetKeyId())
		}
		get, err := s.keys.GetKey(context.Background(), connect.NewRequest(&keysv1.GetKeyRequest{KeyId: got.GetKeyId()}))
		if err != nil || get.Msg.GetKey().GetPrefix() != raw[:12] || get.Msg.GetKey().GetRev() != got.GetRev() {
			t.Errorf("GetKey(%q) = %v, %v", got.GetKeyId(), get.Msg.GetKey(), err)
		}

		// Nothing the database wrote holds the secret part of the key.
		files, err := os.ReadDir(s.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(s.dir, f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), raw[12:]) {
				t.Errorf("database file %s holds the %v key", f.Name(), c.env)
			}
		}
	}
}

// TestGetKeyNotFound: an unknown key id is NotFound.
func TestGetKeyNotFound(t *testing.T) {
	t.Parallel()
	s := startService(t, keysvc.Options{})
	_, err := s.keys.GetKey(context.Background(), connect.NewRequest(&keysv1.GetKeyRequest{KeyId: "key_nope"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetKey(key_nope) = %v, want NotFound", err)
	}
}

// TestListKeys: pages hold page_size keys in id order, a next page token
// while more remain, and none on the last page; filters select by app
// and tenant.
func TestListKeys(t *testing.T) {
	t.Parallel()
	s := startService(t, keysvc.Options{})
	type created struct{ id, app, tenant string }
	var keys []created
	for i, c := range []struct{ app, tenant string }{
		{"app-a", "t-1"}, {"app-a", "t-1"}, {"app-a", "t-2"}, {"app-b", "t-2"}, {"app-b", "t-2"}, {"app-c", "t-1"}, {"app-a", "t-1"}, {"app-c", "t-3"},
	} {
		resp, err := s.keys.CreateKey(context.Background(), connect.NewRequest(&keysv1.CreateKeyRequest{AppId: c.app, TenantId: c.tenant, Plan: "gold", Env: keysv1.Environment_ENVIRONMENT_TEST}))
		if err != nil {
			t.Fatalf("CreateKey %d: %v", i, err)
		}
		keys = append(keys, created{resp.Msg.GetKey().GetKeyId(), c.app, c.tenant})
	}
	// want is the ids of the keys the filter selects, in id order.
	want := func(app, tenant string) []string {
		var ids []string
		for _, k := range keys {
			if (app == "" || k.app == app) && (tenant == "" || k.tenant == tenant) {
				ids = append(ids, k.id)
			}
		}
		slices.Sort(ids)
		return ids
	}
	// list pages through a filter and returns the ids and page sizes.
	list := func(app, tenant string, size int32) (ids []string, pages []int) {
		t.Helper()
		token := ""
		for range 100 {
			resp, err := s.keys.ListKeys(context.Background(), connect.NewRequest(&keysv1.ListKeysRequest{AppId: app, TenantId: tenant, PageSize: size, PageToken: token}))
			if err != nil {
				t.Fatalf("ListKeys(app %q, tenant %q, size %d, token %q): %v", app, tenant, size, token, err)
			}
			for _, k := range resp.Msg.GetKeys() {
				ids = append(ids, k.GetKeyId())
			}
			pages = append(pages, len(resp.Msg.GetKeys()))
			if token = resp.Msg.GetNextPageToken(); token == "" {
				return ids, pages
			}
		}
		t.Fatalf("ListKeys(app %q, tenant %q, size %d) did not end after 100 pages", app, tenant, size)
		return nil, nil
	}
	for _, c := range []struct {
		app, tenant string
		size        int32
		pages       []int
	}{
		{"", "", 0, []int{8}},
		{"", "", 3, []int{3, 3, 2}},
		{"", "", 4, []int{4, 4}}, // no empty page after a full last one
		{"", "", 8, []int{8}},
		{"", "", 1, []int{1, 1, 1, 1, 1, 1, 1, 1}},
		{"app-a", "", 2, []int{2, 2}},
		{"", "t-2", 2, []int{2, 1}},
		{"app-a", "t-1", 2, []int{2, 1}},
		{"app-b", "t-1", 0, []int{0}},
		{"app-none", "", 5, []int{0}},
	} {
		ids, pages := list(c.app, c.tenant, c.size)
		if w := want(c.app, c.tenant); !slices.Equal(ids, w) || !slices.Equal(pages, c.pages) {
			t.Errorf("ListKeys(app %q, tenant %q, size %d) = %v in pages %v, want %v in pages %v", c.app, c.tenant, c.size, ids, pages, w, c.pages)
		}
	}
}

// TestListKeysLargestPage: a page of 1000 keys, the most one may ask
// for, is followed by a next page token when more keys remain.
func TestListKeysLargestPage(t *testing.T) {
	t.Parallel()
	s := startService(t, keysvc.Options{})
	ctx := context.Background()
	const n = 1001
	for i := range n {
		raw := fmt.Sprintf("ak_test_%032d", i)
		if _, err := s.store.CreateKey(ctx, store.Key{ID: fmt.Sprintf("key_%04d", i), Hash: apikey.Hash(raw), Prefix: raw[:12], AppID: "app-big", Env: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := s.keys.ListKeys(ctx, connect.NewRequest(&keysv1.ListKeysRequest{PageSize: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Msg.GetKeys()) != 1000 || first.Msg.GetNextPageToken() == "" {
		t.Fatalf("ListKeys(size 1000) of %d keys = %d keys, next page token %q; want 1000 and a token", n, len(first.Msg.GetKeys()), first.Msg.GetNextPageToken())
	}
	rest, err := s.keys.ListKeys(ctx, connect.NewRequest(&keysv1.ListKeysRequest{PageSize: 1000, PageToken: first.Msg.GetNextPageToken()}))
	if err != nil {
		t.Fatal(err)
	}
	if len(rest.Msg.GetKeys()) != 1 || rest.Msg.GetKeys()[0].GetKeyId() != "key_1000" || rest.Msg.GetNextPageToken() != "" {
		t.Errorf("ListKeys(size 1000, second page) = %d keys, next page token %q; want key_1000 and no token", len(rest.Msg.GetKeys()), rest.Msg.GetNextPageToken())
	}
}

// TestRotateKey: the successor works with the old key's metadata and
// environment; the old key ends after the overlap (the service's default,
// or the request's) and the two name each other.
func TestRotateKey(t *testing.T) {
	t.Parallel()
	clock := testclock.New(epoch)
	const defaultOverlap = 2 * time.Hour
	s := startService(t, keysvc.Options{Now: clock.Now, Overlap: defaultOverlap})
	ctx := context.Background()

	for _, c := range []struct {
		name    string
		overlap *durationpb.Duration
		want    time.Duration
	}{
		{"no overlap asked for", nil, defaultOverlap},
		{"an overlap of 90 s", durationpb.New(90 * time.Second), 90 * time.Second},
		{"an overlap of 0", durationpb.New(0), 0},
	} {
		created, err := s.keys.CreateKey(ctx, connect.NewRequest(&keysv1.CreateKeyRequest{
			AppId: "app-rot", TenantId: "tenant-9", Plan: "silver", Scopes: []string{"a", "b"}, Env: keysv1.Environment_ENVIRONMENT_TEST,
			Priority: configv1.Priority(2)}))
		if err != nil {
			t.Fatal(err)
		}
		old := created.Msg.GetKey()
		clock.Add(time.Minute)
		now := clock.Now()
		rot, err := s.keys.RotateKey(ctx, connect.NewRequest(&keysv1.RotateKeyRequest{KeyId: old.GetKeyId(), Overlap: c.overlap}))
		if err != nil {
			t.Fatalf("%s: RotateKey: %v", c.name, err)
		}
		next, prev, raw := rot.Msg.GetKey(), rot.Msg.GetPrevious(), rot.Msg.GetRawKey()
		if got := prev.GetNotAfter().AsTime(); prev.GetNotAfter() == nil || !got.Equal(now.Add(c.want)) {
			t.Errorf("%s: the old key ends at %v, want %v", c.name, got, now.Add(c.want))
		}
		if prev.GetKeyId() != old.GetKeyId() || prev.GetSuccessorKeyId() != next.GetKeyId() || next.GetPredecessorKeyId() != old.GetKeyId() ||
			prev.GetStatus() != configv1.KeyStatus_KEY_STATUS_ACTIVE {
			t.Errorf("%s: RotateKey = key %v, previous %v; want them linked, the old one active", c.name, next, prev)
		}
		if next.GetKeyId() == old.GetKeyId() || raw == created.Msg.GetRawKey() || !strings.HasPrefix(raw, "ak_test_") || next.GetPrefix() != raw[:12] {
			t.Errorf("%s: the successor %q (%.12s…) is not a new test key", c.name, next.GetKeyId(), raw)
		}
		if next.GetAppId() != "app-rot" || next.GetTenantId() != "tenant-9" || next.GetPlan() != "silver" || !slices.Equal(next.GetScopes(), []string{"a", "b"}) ||
			next.GetEnv() != keysv1.Environment_ENVIRONMENT_TEST || next.GetPriority() != configv1.Priority(2) || next.GetNotAfter() != nil ||
			!next.GetCreated().AsTime().Equal(now) {
			t.Errorf("%s: the successor is %v, want the old key's metadata", c.name, next)
		}
		if seq := s.seq(t); next.GetRev() != seq || prev.GetRev() != seq-1 {
			t.Errorf("%s: revs old %d, successor %d; want %d, %d", c.name, prev.GetRev(), next.GetRev(), seq-1, seq)
		}
		stored := s.storedKey(t, next.GetKeyId())
		if stored.Hash != apikey.Hash(raw) || stored.Predecessor != old.GetKeyId() {
			t.Errorf("%s: the stored successor is %+v", c.name, stored)
		}
		if o := s.storedKey(t, old.GetKeyId()); o.Successor != next.GetKeyId() || !o.NotAfter.Equal(now.Add(c.want)) {
			t.Errorf("%s: the stored old key is %+v", c.name, o)
		}
	}

	// A revoked key is not rotated.
	revoked := s.create(t, "app-rot")
	if _, err := s.keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: revoked.GetKey().GetKeyId()})); err != nil {
		t.Fatal(err)
	}
	seq := s.seq(t)
	if _, err := s.keys.RotateKey(ctx, connect.NewRequest(&keysv1.RotateKeyRequest{KeyId: revoked.GetKey().GetKeyId()})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("RotateKey(a revoked key) = %v, want FailedPrecondition", err)
	}
	if _, err := s.keys.RotateKey(ctx, connect.NewRequest(&keysv1.RotateKeyRequest{KeyId: "key_nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("RotateKey(key_nope) = %v, want NotFound", err)
	}
	if got := s.seq(t); got != seq {
		t.Errorf("refused rotations moved the store's seq from %d to %d", seq, got)
	}
	if k := s.storedKey(t, revoked.GetKey().GetKeyId()); k.Successor != "" {
		t.Errorf("the revoked key got successor %q", k.Successor)
	}
}

// TestRevokeKey: a revocation records who, when and why; revoking again
// answers the key as it is, with no new rev.
func TestRevokeKey(t *testing.T) {
	t.Parallel()
	clock := testclock.New(epoch)
	s := startService(t, keysvc.Options{Now: clock.Now})
	ctx := context.Background()
	key := s.create(t, "app-rev")
	other := s.create(t, "app-rev")

	clock.Add(time.Hour)
	first, err := s.keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: key.GetKey().GetKeyId(), Reason: "compromised"}))
	if err != nil {
		t.Fatal(err)
	}
	k := first.Msg.GetKey()
	seq := s.seq(t)
	if k.GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED || k.GetRevokeReason() != "compromised" || k.GetRevokedBy() != "platform-test" ||
		!k.GetRevoked().AsTime().Equal(epoch.Add(time.Hour)) || k.GetRev() != seq {
		t.Errorf("RevokeKey = %v, want revoked by platform-test at %v for compromised, rev %d", k, epoch.Add(time.Hour), seq)
	}
	if first.Msg.GetVersion() != 0 {
		t.Errorf("RevokeKey without a control plane = version %d, want 0", first.Msg.GetVersion())
	}

	clock.Add(time.Hour)
	again, err := s.keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: key.GetKey().GetKeyId(), Reason: "again"}))
	if err != nil {
		t.Fatalf("revoking a revoked key: %v", err)
	}
	if a := again.Msg.GetKey(); a.GetRev() != k.GetRev() || a.GetRevokeReason() != "compromised" || !a.GetRevoked().AsTime().Equal(k.GetRevoked().AsTime()) ||
		a.GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED {
		t.Errorf("revoking a revoked key = %v, want the first revocation %v", a, k)
	}
	if got := s.seq(t); got != seq {
		t.Errorf("revoking a revoked key moved the store's seq from %d to %d", seq, got)
	}
	if o := s.storedKey(t, other.GetKey().GetKeyId()); o.Status != store.StatusActive {
		t.Errorf("revoking one key revoked another: %+v", o)
	}
	if _, err := s.keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: "key_nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("RevokeKey(key_nope) = %v, want NotFound", err)
	}
}

// TestRevokeApp: RevokeApp revokes the app's active keys and no others,
// and answers only those it revoked.
func TestRevokeApp(t *testing.T) {
	t.Parallel()
	s := startService(t, keysvc.Options{})
	ctx := context.Background()
	a1, a2, a3 := s.create(t, "app-x"), s.create(t, "app-x"), s.create(t, "app-x")
	b := s.create(t, "app-y")
	prefix := s.create(t, "app-xx") // an app whose id starts with the other's
	if _, err := s.keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: a3.GetKey().GetKeyId(), Reason: "earlier"})); err != nil {
		t.Fatal(err)
	}
	before := s.storedKey(t, a3.GetKey().GetKeyId())

	resp, err := s.keys.RevokeApp(ctx, connect.NewRequest(&keysv1.RevokeAppRequest{AppId: "app-x", Reason: "app deleted"}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range resp.Msg.GetKeys() {
		got = append(got, k.GetKeyId())
		if k.GetStatus() != configv1.KeyStatus_KEY_STATUS_REVOKED || k.GetRevokeReason() != "app deleted" || k.GetRevokedBy() != "platform-test" {
			t.Errorf("RevokeApp answered %v, want revoked for the app's deletion", k)
		}
	}
	want := []string{a1.GetKey().GetKeyId(), a2.GetKey().GetKeyId()}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("RevokeApp(app-x) = %v, want %v", got, want)
	}
	if after := s.storedKey(t, a3.GetKey().GetKeyId()); after.Rev != before.Rev || after.RevokeReason != "earlier" {
		t.Errorf("RevokeApp changed a key revoked before: %+v, was %+v", after, before)
	}
	for _, k := range []*keysv1.CreateKeyResponse{b, prefix} {
		if st := s.storedKey(t, k.GetKey().GetKeyId()); st.Status != store.StatusActive {
			t.Errorf("RevokeApp(app-x) revoked key %s of %s", st.ID, st.AppID)
		}
	}

	seq := s.seq(t)
	again, err := s.keys.RevokeApp(ctx, connect.NewRequest(&keysv1.RevokeAppRequest{AppId: "app-x"}))
	if err != nil || len(again.Msg.GetKeys()) != 0 {
		t.Errorf("RevokeApp(app-x) again = %v, %v; want no keys", again.Msg.GetKeys(), err)
	}
	if none, err := s.keys.RevokeApp(ctx, connect.NewRequest(&keysv1.RevokeAppRequest{AppId: "app-none"})); err != nil || len(none.Msg.GetKeys()) != 0 {
		t.Errorf("RevokeApp(app-none) = %v, %v; want no keys", none.Msg.GetKeys(), err)
	}
	if got := s.seq(t); got != seq {
		t.Errorf("RevokeApp with nothing to revoke moved the store's seq from %d to %d", seq, got)
	}
}
