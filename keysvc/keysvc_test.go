package keysvc_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/keysvc"
	"github.com/portico-gw/portico/keysvc/store"
	"github.com/portico-gw/portico/testing/admintest"
)

const (
	platformToken = "keysvc-test-platform-token-0123456789abcdef"
	identityToken = "keysvc-test-identity-token-0123456789abcdef"
	scannerID     = "acme-scanner"
)

// service is a key service over a new SQLite store, on a loopback server.
type service struct {
	*keysvc.Service
	store *store.Store
	// dir holds the store's database files.
	dir     string
	url     string
	keys    keysv1connect.KeyServiceClient
	tokens  keysv1connect.TokenServiceClient
	scanner *ecdsa.PrivateKey
}

// startService serves a Service over opts and a new store. Where opts
// has none, it gets a platform and an identity token, one scanner and a
// logger that discards.
func startService(t *testing.T, opts keysvc.Options) *service {
	t.Helper()
	s := &service{dir: t.TempDir()}
	if opts.Store == nil {
		st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(s.dir, "keys.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		opts.Store = st
	}
	s.store = opts.Store
	if opts.Tokens == nil {
		opts.Tokens = []keysvc.Token{
			{Name: "platform-test", Role: keysvc.RolePlatform, SHA256: svcauth.Hash(platformToken)},
			{Name: "identity-test", Role: keysvc.RoleIdentity, SHA256: svcauth.Hash(identityToken)},
		}
	}
	if opts.Scanners == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		s.scanner = k
		opts.Scanners = []keysvc.Scanner{{ID: scannerID, Key: &k.PublicKey}}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	svc, err := keysvc.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Service = svc
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	s.url = srv.URL
	s.keys = keysv1connect.NewKeyServiceClient(bearer(platformToken), srv.URL)
	s.tokens = keysv1connect.NewTokenServiceClient(bearer(platformToken), srv.URL)
	return s
}

// run runs s.Run until the test ends.
func (s *service) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// seq is the store's last rev.
func (s *service) seq(t *testing.T) uint64 {
	t.Helper()
	seq, err := s.store.Seq(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// storedKey is key id as the store holds it.
func (s *service) storedKey(t *testing.T, id string) store.Key {
	t.Helper()
	k, err := s.store.GetKey(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// create calls CreateKey for a live key of app in tenant-1.
func (s *service) create(t *testing.T, app string) *keysv1.CreateKeyResponse {
	t.Helper()
	resp, err := s.keys.CreateKey(context.Background(), connect.NewRequest(&keysv1.CreateKeyRequest{
		AppId: app, TenantId: "tenant-1", Plan: "gold", Scopes: []string{"orders:read"}, Env: keysv1.Environment_ENVIRONMENT_LIVE,
	}))
	if err != nil {
		t.Fatalf("CreateKey(%q): %v", app, err)
	}
	return resp.Msg
}

// bearer is a client that sends token on every request.
func bearer(token string) *http.Client { return admintest.HTTPClient(token) }

// headerClient is a client that sets header to value on every request
// ("" removes it).
func headerClient(header, value string) *http.Client {
	return &http.Client{Transport: headerTransport{header, value}, Timeout: 30 * time.Second}
}

type headerTransport struct{ header, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Del(h.header)
	if h.value != "" {
		r.Header.Set(h.header, h.value)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestNewRefuses: New refuses options it cannot serve safely.
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	hash := svcauth.Hash(platformToken)
	scanner, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts keysvc.Options
	}{
		{"no store", keysvc.Options{}},
		{"a token of an unknown role", keysvc.Options{Store: st, Tokens: []keysvc.Token{{Name: "root", Role: "admin", SHA256: hash}}}},
		{"a token without a role", keysvc.Options{Store: st, Tokens: []keysvc.Token{{Name: "root", SHA256: hash}}}},
		{"a token given raw, not hashed", keysvc.Options{Store: st, Tokens: []keysvc.Token{{Name: "root", Role: keysvc.RolePlatform, SHA256: platformToken}}}},
		{"a scanner without a key", keysvc.Options{Store: st, Scanners: []keysvc.Scanner{{ID: scannerID}}}},
		{"a scanner named as GitHub's protocol", keysvc.Options{Store: st, Scanners: []keysvc.Scanner{{ID: keysvc.GitHubReporter, Key: &scanner.PublicKey}}}},
	} {
		if _, err := keysvc.New(c.opts); err == nil {
			t.Errorf("New with %s succeeded", c.name)
		}
	}
}

// TestAuth: every call needs a known token; the identity service's token
// may call the token API only.
func TestAuth(t *testing.T) {
	t.Parallel()
	s := startService(t, keysvc.Options{})
	key := s.create(t, "app-auth")
	seq := s.seq(t)

	for _, c := range []struct {
		name   string
		client *http.Client
		// keys and tokens are the codes for the key and the token API.
		keys, tokens connect.Code
	}{
		{"no token", http.DefaultClient, connect.CodeUnauthenticated, connect.CodeUnauthenticated},
		{"an empty bearer token", headerClient("Authorization", "Bearer "), connect.CodeUnauthenticated, connect.CodeUnauthenticated},
		{"basic credentials", headerClient("Authorization", "Basic cGxhdGZvcm06eA=="), connect.CodeUnauthenticated, connect.CodeUnauthenticated},
		{"the platform token as basic", headerClient("Authorization", "Basic "+platformToken), connect.CodeUnauthenticated, connect.CodeUnauthenticated},
		{"an unknown token", bearer("not-a-token-of-ours"), connect.CodeUnauthenticated, connect.CodeUnauthenticated},
		{"the hash of the platform token", bearer(svcauth.Hash(platformToken)), connect.CodeUnauthenticated, connect.CodeUnauthenticated},
		{"the identity token", bearer(identityToken), connect.CodePermissionDenied, 0},
		{"the platform token", bearer(platformToken), 0, 0},
	} {
		keys := keysv1connect.NewKeyServiceClient(c.client, s.url)
		tokens := keysv1connect.NewTokenServiceClient(c.client, s.url)
		ctx := context.Background()
		keyCalls := map[string]error{}
		_, keyCalls["ListKeys"] = keys.ListKeys(ctx, connect.NewRequest(&keysv1.ListKeysRequest{}))
		_, keyCalls["GetKey"] = keys.GetKey(ctx, connect.NewRequest(&keysv1.GetKeyRequest{KeyId: key.GetKey().GetKeyId()}))
		if c.keys != 0 {
			// Calls that would change something, made only where they
			// must be refused.
			_, keyCalls["CreateKey"] = keys.CreateKey(ctx, connect.NewRequest(&keysv1.CreateKeyRequest{AppId: "app-auth", Env: keysv1.Environment_ENVIRONMENT_LIVE}))
			_, keyCalls["RevokeKey"] = keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: key.GetKey().GetKeyId()}))
			_, keyCalls["RevokeApp"] = keys.RevokeApp(ctx, connect.NewRequest(&keysv1.RevokeAppRequest{AppId: "app-auth"}))
			_, keyCalls["RotateKey"] = keys.RotateKey(ctx, connect.NewRequest(&keysv1.RotateKeyRequest{KeyId: key.GetKey().GetKeyId()}))
		}
		for name, err := range keyCalls {
			if got := connect.CodeOf(err); (err == nil && c.keys != 0) || (err != nil && got != c.keys) {
				t.Errorf("%s: KeyService.%s = %v, want code %v", c.name, name, err, c.keys)
			}
		}
		tokenCalls := map[string]error{}
		_, tokenCalls["ListDenyEntries"] = tokens.ListDenyEntries(ctx, connect.NewRequest(&keysv1.ListDenyEntriesRequest{}))
		_, tokenCalls["Deny"] = tokens.Deny(ctx, connect.NewRequest(&keysv1.DenyRequest{Entry: &configv1.DenyEntry{
			Match: &configv1.DenyEntry_Jti{Jti: "jti-" + strings.ReplaceAll(c.name, " ", "-")}, Expires: timestamppb.New(time.Now().Add(time.Hour))}}))
		for name, err := range tokenCalls {
			if got := connect.CodeOf(err); (err == nil && c.tokens != 0) || (err != nil && got != c.tokens) {
				t.Errorf("%s: TokenService.%s = %v, want code %v", c.name, name, err, c.tokens)
			}
		}
	}

	// The refused calls changed nothing; the two accepted deny entries
	// did.
	if got := s.seq(t); got != seq+2 {
		t.Errorf("after the calls the store's seq is %d, want %d (two deny entries)", got, seq+2)
	}
	if k := s.storedKey(t, key.GetKey().GetKeyId()); k.Status != store.StatusActive || k.Successor != "" {
		t.Errorf("after refused calls the key is %v, successor %q", k.Status, k.Successor)
	}
}

// TestTokenHashCase: a token's hash may be configured in upper case.
func TestTokenHashCase(t *testing.T) {
	t.Parallel()
	s := startService(t, keysvc.Options{Tokens: []keysvc.Token{{Name: "upper", Role: keysvc.RolePlatform, SHA256: strings.ToUpper(svcauth.Hash(platformToken))}}})
	if _, err := s.keys.ListKeys(context.Background(), connect.NewRequest(&keysv1.ListKeysRequest{})); err != nil {
		t.Errorf("ListKeys with a token configured by its upper-case hash: %v", err)
	}
}

// TestInvalidArgument: requests the API's rules refuse are
// InvalidArgument and change nothing.
func TestInvalidArgument(t *testing.T) {
	t.Parallel()
	s := startService(t, keysvc.Options{})
	key := s.create(t, "app-valid")
	seq := s.seq(t)
	ok := func() *keysv1.CreateKeyRequest {
		return &keysv1.CreateKeyRequest{AppId: "app-1", TenantId: "t-1", Plan: "gold", Scopes: []string{"orders:read"}, Env: keysv1.Environment_ENVIRONMENT_LIVE}
	}
	create := func(edit func(*keysv1.CreateKeyRequest)) func(context.Context) error {
		return func(ctx context.Context) error {
			m := ok()
			edit(m)
			_, err := s.keys.CreateKey(ctx, connect.NewRequest(m))
			return err
		}
	}
	deny := func(e *configv1.DenyEntry) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := s.tokens.Deny(ctx, connect.NewRequest(&keysv1.DenyRequest{Entry: e}))
			return err
		}
	}
	future := timestamppb.New(time.Now().Add(time.Hour))
	for _, c := range []struct {
		name string
		call func(context.Context) error
	}{
		{"CreateKey without an app id", create(func(m *keysv1.CreateKeyRequest) { m.AppId = "" })},
		{"CreateKey with a space in the app id", create(func(m *keysv1.CreateKeyRequest) { m.AppId = "my app" })},
		{"CreateKey with an app id starting with a dash", create(func(m *keysv1.CreateKeyRequest) { m.AppId = "-app" })},
		{"CreateKey with an app id of 65 characters", create(func(m *keysv1.CreateKeyRequest) { m.AppId = strings.Repeat("a", 65) })},
		{"CreateKey with the environment unspecified", create(func(m *keysv1.CreateKeyRequest) { m.Env = keysv1.Environment_ENVIRONMENT_UNSPECIFIED })},
		{"CreateKey with an undefined environment", create(func(m *keysv1.CreateKeyRequest) { m.Env = 7 })},
		{"CreateKey with a space in a scope", create(func(m *keysv1.CreateKeyRequest) { m.Scopes = []string{"orders read"} })},
		{"CreateKey with a quote in a scope", create(func(m *keysv1.CreateKeyRequest) { m.Scopes = []string{`orders"read`} })},
		{"CreateKey with an empty scope", create(func(m *keysv1.CreateKeyRequest) { m.Scopes = []string{""} })},
		{"CreateKey with a scope twice", create(func(m *keysv1.CreateKeyRequest) { m.Scopes = []string{"a", "a"} })},
		{"CreateKey with a wait of 121 s", create(func(m *keysv1.CreateKeyRequest) { m.WaitTimeout = durationpb.New(121 * time.Second) })},
		{"RotateKey without a key id", func(ctx context.Context) error {
			_, err := s.keys.RotateKey(ctx, connect.NewRequest(&keysv1.RotateKeyRequest{}))
			return err
		}},
		{"RotateKey with a negative overlap", func(ctx context.Context) error {
			_, err := s.keys.RotateKey(ctx, connect.NewRequest(&keysv1.RotateKeyRequest{KeyId: key.GetKey().GetKeyId(), Overlap: durationpb.New(-time.Second)}))
			return err
		}},
		{"RevokeKey with a reason of 1025 bytes", func(ctx context.Context) error {
			_, err := s.keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: key.GetKey().GetKeyId(), Reason: strings.Repeat("r", 1025)}))
			return err
		}},
		{"RevokeApp without an app id", func(ctx context.Context) error {
			_, err := s.keys.RevokeApp(ctx, connect.NewRequest(&keysv1.RevokeAppRequest{}))
			return err
		}},
		{"ListKeys with a page of 1001", func(ctx context.Context) error {
			_, err := s.keys.ListKeys(ctx, connect.NewRequest(&keysv1.ListKeysRequest{PageSize: 1001}))
			return err
		}},
		{"Deny without an entry", func(ctx context.Context) error {
			_, err := s.tokens.Deny(ctx, connect.NewRequest(&keysv1.DenyRequest{}))
			return err
		}},
		{"Deny without a match", deny(&configv1.DenyEntry{Expires: future})},
		{"Deny without expires", deny(&configv1.DenyEntry{Match: &configv1.DenyEntry_Jti{Jti: "j-1"}})},
		{"Deny expiring in the past", deny(&configv1.DenyEntry{Match: &configv1.DenyEntry_Jti{Jti: "j-1"}, Expires: timestamppb.New(time.Now().Add(-time.Minute))})},
		{"Deny of a subject without issued_before", deny(&configv1.DenyEntry{Match: &configv1.DenyEntry_Subject{Subject: "user-1"}, Expires: future})},
		{"Deny of a subject with token_expires", deny(&configv1.DenyEntry{Match: &configv1.DenyEntry_Subject{Subject: "user-1"},
			IssuedBefore: future, TokenExpires: future, Expires: future})},
		{"PublishIssuerKeys with a set without keys", func(ctx context.Context) error {
			_, err := s.tokens.PublishIssuerKeys(ctx, connect.NewRequest(&keysv1.PublishIssuerKeysRequest{Keys: &configv1.IssuerKeys{Issuer: "idp", JwksJson: `{"keys": []}`}}))
			return err
		}},
		{"PublishIssuerKeys with a key without kty", func(ctx context.Context) error {
			_, err := s.tokens.PublishIssuerKeys(ctx, connect.NewRequest(&keysv1.PublishIssuerKeysRequest{Keys: &configv1.IssuerKeys{Issuer: "idp", JwksJson: `{"keys": [{"kid": "k1"}]}`}}))
			return err
		}},
	} {
		if err := c.call(context.Background()); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", c.name, err)
		}
	}
	if got := s.seq(t); got != seq {
		t.Errorf("after refused requests the store's seq is %d, want %d", got, seq)
	}
	// The request that all but one case edit is valid.
	if err := create(func(*keysv1.CreateKeyRequest) {})(context.Background()); err != nil {
		t.Errorf("CreateKey with the valid request: %v", err)
	}
}

// TestIdentityTokenIssuers: an identity token limited to issuers denies
// tokens and publishes keys of those issuers only, and may not deny
// across every issuer; the platform token may do all of it.
func TestIdentityTokenIssuers(t *testing.T) {
	t.Parallel()
	const limited = "keysvc-test-limited-identity-token-0123456789"
	s := startService(t, keysvc.Options{Tokens: []keysvc.Token{
		{Name: "platform-test", Role: keysvc.RolePlatform, SHA256: svcauth.Hash(platformToken)},
		{Name: "login-idp", Role: keysvc.RoleIdentity, SHA256: svcauth.Hash(limited), Issuers: []string{"login"}},
	}})
	idp := keysv1connect.NewTokenServiceClient(bearer(limited), s.url)
	ctx := context.Background()
	exp := timestamppb.New(time.Now().Add(15 * time.Minute))
	deny := func(c keysv1connect.TokenServiceClient, issuer string) error {
		_, err := c.Deny(ctx, connect.NewRequest(&keysv1.DenyRequest{Entry: &configv1.DenyEntry{
			Issuer: issuer, Match: &configv1.DenyEntry_Jti{Jti: "j-" + issuer}, Expires: exp}}))
		return err
	}
	publish := func(c keysv1connect.TokenServiceClient, issuer string) error {
		_, err := c.PublishIssuerKeys(ctx, connect.NewRequest(&keysv1.PublishIssuerKeysRequest{Keys: &configv1.IssuerKeys{
			Issuer: issuer, JwksJson: `{"keys":[{"kty":"EC","crv":"P-256","kid":"k2","x":"AA","y":"AA"}]}`}}))
		return err
	}
	before := s.seq(t)
	for _, c := range []struct {
		what string
		err  error
	}{
		{"deny for another issuer", deny(idp, "partner")},
		{"deny for every issuer", deny(idp, "")},
		{"keys of another issuer", publish(idp, "partner")},
	} {
		if connect.CodeOf(c.err) != connect.CodePermissionDenied {
			t.Errorf("the limited identity token: %s: %v, want PermissionDenied", c.what, c.err)
		}
	}
	if got := s.seq(t); got != before {
		t.Errorf("refused calls changed the store: seq %d, want %d", got, before)
	}
	for _, c := range []struct {
		what string
		err  error
	}{
		{"limited: deny for its issuer", deny(idp, "login")},
		{"limited: keys of its issuer", publish(idp, "login")},
		{"platform: deny for every issuer", deny(s.tokens, "")},
		{"platform: keys of any issuer", publish(s.tokens, "partner")},
	} {
		if c.err != nil {
			t.Errorf("%s: %v", c.what, c.err)
		}
	}
}
