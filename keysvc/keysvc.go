// Package keysvc is the key service (`portico keys`): it issues, rotates
// and revokes API keys, takes leaked-key reports from secret scanners
// (GitHub's partner protocol at GitHubLeakPath, Portico's signed scheme at
// LeakPath for the others), records token deny entries and issuers'
// signing keys, and puts every change on the control plane's fast lane.
//
// The service stores only each key's SHA-256 hash; the raw key exists in
// one answer (CreateKey, RotateKey) and nowhere else. Every change is
// committed first, with a revision from the store's sequence, then
// published: the publisher sends the control plane every change after the
// last one it has, in order, and retries while the control plane is away.
// A new key is shown only once every connected node has acknowledged the
// fast-lane version that holds it, so its first call works.
//
// Beside the fast lane, the service serves its whole state as a snapshot
// signed with Ed25519 (GET /v1/key-snapshot), which nodes poll: a
// revocation reaches them within one poll period even when no stream is
// up.
//
// Lifecycle: Run(ctx, Options) is the whole `portico keys` role: it opens
// the store and the signing key, serves, publishes and closes. Embedded
// (portico dev, tests): New(Options) over a store the caller holds, or
// Open(ctx, Options), which opens them and is undone by Close; serve
// Handler (at Paths); (*Service).Run(ctx) publishes in the background
// until ctx ends.
package keysvc

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"buf.build/go/protovalidate"
	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
	"github.com/portico-gw/portico/internal/lanepub"
	"github.com/portico-gw/portico/internal/svcauth"
	"github.com/portico-gw/portico/keysvc/store"
)

// Role is what a token may do.
type Role string

const (
	// RolePlatform may call everything.
	RolePlatform Role = "platform"
	// RoleIdentity is the identity service's: token deny entries and
	// issuers' keys only.
	RoleIdentity Role = "identity"
)

// Token is a credential the service accepts, held as its hash.
type Token struct {
	// Name is who the token is, recorded with the changes it makes.
	Name string
	Role Role
	// SHA256 is the hex SHA-256 of the token.
	SHA256 string
	// Issuers, for an identity token, are the issuers (by name) whose
	// tokens it may deny and whose keys it may publish; empty means every
	// issuer. An identity token limited to issuers may not add a deny
	// entry for every issuer.
	Issuers []string
}

// mayActFor reports whether the caller may deny tokens of, or publish keys
// for, issuer ("" is every issuer).
func (c caller) mayActFor(issuer string) bool {
	if c.Role == RolePlatform || len(c.Issuers) == 0 {
		return true
	}
	return issuer != "" && slices.Contains(c.Issuers, issuer)
}

// Scanner is a secret scanner whose signed reports the service accepts.
type Scanner struct {
	// ID names the scanner; reports carry it in Portico-Scanner-Id.
	ID  string
	Key *ecdsa.PublicKey
}

// Options configure a Service (New, Open) or the whole role (Run).
type Options struct {
	// Store holds the keys; the caller opens and closes it. Open and Run
	// open StoreDSN instead when Store is nil.
	Store *store.Store
	// StoreDSN is the store Open and Run open: postgres://user@host/db or
	// sqlite:PATH; empty means DefaultStoreDSN.
	StoreDSN string
	// ControlURL is the control plane whose fast lane carries the
	// changes; empty: none (nodes learn changes from the signed snapshot
	// only, and CreateKey does not wait).
	ControlURL string
	// ControlToken is the publisher token the control plane requires.
	ControlToken string
	// HTTPClient reaches the control plane; nil: http.DefaultClient.
	HTTPClient connect.HTTPClient
	// Tokens are the callers; empty refuses every call of the key and
	// token APIs.
	Tokens []Token
	// Scanners may report leaked keys at LeakPath, signed with Portico's
	// scheme; empty refuses every such report.
	Scanners []Scanner
	// GitHub, if set, takes GitHub's secret scanning reports at
	// GitHubLeakPath, verified with GitHub's published keys; nil: that
	// path answers 404.
	GitHub *GitHubOptions
	// SigningKey signs the key snapshot; nil: no snapshot is served, or,
	// for Open and Run, the key in SigningKeyFile.
	SigningKey ed25519.PrivateKey
	// SigningKeyFile, for Open and Run without a SigningKey, holds the
	// signing key (see LoadSigningKey); empty means
	// DefaultSigningKeyFile.
	SigningKeyFile string
	// SnapshotTokenHash, if set, is the hex SHA-256 of the token a node
	// must send to fetch the snapshot.
	SnapshotTokenHash string
	// WaitTimeout bounds CreateKey's and RotateKey's wait for every node
	// when the request sets none, and how long other changes try to
	// publish before they answer version 0; zero means
	// DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Overlap is how long a rotated key keeps working when the request
	// says nothing; zero means DefaultOverlap.
	Overlap time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Rand is the source of keys; nil: crypto/rand.
	Rand   io.Reader
	Logger *slog.Logger

	// Listen is the address Run serves on; empty means DefaultListen.
	Listen string
	// Listener, if set, is served by Run instead of binding Listen; Run
	// owns it.
	Listener net.Listener
	// TLSCertFile and TLSKeyFile, if set, make Run serve TLS.
	TLSCertFile, TLSKeyFile string
}

// The defaults of Options for Open and Run, which `portico keys`'s flags
// show.
const (
	DefaultListen         = ":7100"
	DefaultStoreDSN       = "sqlite:portico-keys.db"
	DefaultSigningKeyFile = "portico-keys-signing.pem"
	// DefaultWaitTimeout and DefaultOverlap are what a zero WaitTimeout
	// and Overlap mean.
	DefaultWaitTimeout = 10 * time.Second
	DefaultOverlap     = 24 * time.Hour
)

// Service is the key service. It is safe for concurrent use.
type Service struct {
	opts  Options
	store *store.Store
	// ownStore is set when Open opened the store, which Close closes.
	ownStore bool
	log      *slog.Logger
	now      func() time.Time
	pub      *lanepub.Publisher
	snap     *snapshotter
	github   *githubKeys      // nil: GitHub's reports are not taken
	tokens   map[string]Token // by hash
}

// New returns a Service over opts.Store.
func New(opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("keysvc: a store is required")
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = DefaultWaitTimeout
	}
	if opts.Overlap <= 0 {
		opts.Overlap = DefaultOverlap
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Rand == nil {
		opts.Rand = rand.Reader
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = http.DefaultClient
	}
	s := &Service{opts: opts, store: opts.Store, log: opts.Logger, now: opts.Now, tokens: map[string]Token{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	for _, t := range opts.Tokens {
		if t.Role != RolePlatform && t.Role != RoleIdentity {
			return nil, fmt.Errorf("keysvc: token %q: unknown role %q", t.Name, t.Role)
		}
		if len(t.SHA256) != 64 {
			return nil, fmt.Errorf("keysvc: token %q: SHA256 must be 64 hex digits", t.Name)
		}
		s.tokens[strings.ToLower(t.SHA256)] = t
	}
	s.opts.SnapshotTokenHash = strings.ToLower(opts.SnapshotTokenHash)
	for _, sc := range opts.Scanners {
		if sc.ID == "" || sc.Key == nil {
			return nil, errors.New("keysvc: a scanner needs an id and a public key")
		}
		if sc.ID == GitHubReporter {
			return nil, fmt.Errorf("keysvc: the scanner id %q is GitHub's own protocol's (Options.GitHub); name the scanner otherwise", sc.ID)
		}
	}
	if opts.GitHub != nil {
		var err error
		if s.github, err = newGitHubKeys(*opts.GitHub, s.now, s.log); err != nil {
			return nil, fmt.Errorf("keysvc: %w", err)
		}
	}
	s.pub = newPublisher(s)
	if opts.SigningKey != nil {
		s.snap = &snapshotter{s: s, key: opts.SigningKey}
	}
	return s, nil
}

// Run publishes the changes the control plane lacks until ctx ends: at
// once, after every change that could not be published, and every 30 s.
func (s *Service) Run(ctx context.Context) { s.pub.Run(ctx) }

// Handler serves the key and token APIs, the scanners' endpoint and the
// signed snapshot.
func (s *Service) Handler() http.Handler {
	opts := []connect.HandlerOption{connect.WithInterceptors(&authz{s: s}), connect.WithReadMaxBytes(1 << 20)}
	mux := http.NewServeMux()
	mux.Handle(keysv1connect.NewKeyServiceHandler(&keyAPI{s}, opts...))
	mux.Handle(keysv1connect.NewTokenServiceHandler(&tokenAPI{s}, opts...))
	mux.Handle(LeakPath, http.HandlerFunc(s.serveLeakReport))
	mux.Handle(GitHubLeakPath, http.HandlerFunc(s.serveGitHubReport))
	mux.Handle(SnapshotPath, http.HandlerFunc(s.serveSnapshot))
	return mux
}

// Paths are the http.ServeMux patterns Handler serves, for mounting it
// beside another service on one listener.
func (s *Service) Paths() []string {
	return []string{"/" + keysv1connect.KeyServiceName + "/", "/" + keysv1connect.TokenServiceName + "/", LeakPath, GitHubLeakPath, SnapshotPath}
}

// caller is who made a call.
type caller struct{ Token }

type callerKey struct{}

func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// authz authenticates every call, checks the caller's role against the
// service called, and validates the request message.
type authz struct{ s *Service }

func (a *authz) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		token, ok := svcauth.Token(req.Header())
		if !ok {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("a key service token is required (Authorization: Bearer …)"))
		}
		t, found := a.s.lookupToken(token)
		if !found {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown token"))
		}
		if t.Role != RolePlatform && !strings.HasPrefix(req.Spec().Procedure, "/"+keysv1connect.TokenServiceName+"/") {
			return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("role %s may not call %s", t.Role, req.Spec().Procedure))
		}
		if m, ok := req.Any().(proto.Message); ok {
			if err := protovalidate.Validate(m); err != nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, err)
			}
		}
		return next(context.WithValue(ctx, callerKey{}, caller{t}), req)
	}
}

func (a *authz) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a *authz) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return connect.NewError(connect.CodeUnimplemented, errors.New("no streaming calls"))
	}
}

// lookupToken finds a token by its hash (as control/admin does: the hash
// of a guess tells nothing of a token).
func (s *Service) lookupToken(token string) (Token, bool) {
	t, ok := s.tokens[svcauth.Hash(token)]
	return t, ok
}

// internal is the answer to a failure the caller cannot mend; the cause
// goes to the log only.
func (s *Service) internal(what string, err error) error {
	s.log.Error("key service: "+what, "err", err)
	return connect.NewError(connect.CodeInternal, errors.New(what))
}
