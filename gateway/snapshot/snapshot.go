// Package snapshot compiles a configv1.Snapshot into the immutable runtime
// form a gateway node serves from: validated routes, their defaults filled
// in, and one route table per listener pool.
//
// Compile is pure: no I/O, no goroutines, deterministic. The control plane
// calls the same function before it publishes a snapshot, so it rejects
// exactly what a node would NACK. Everything that needs I/O (upstream
// connections, TLS files, health checks) is built by the node from the
// compiled snapshot.
package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/openapi"
	"github.com/portico-gw/portico/gateway/router"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Defaults and bounds that a snapshot's zero values stand for. The control
// plane and every node share them through this package.
const (
	DefaultTimeout         = 15 * time.Second
	MaxTimeout             = 30 * time.Second
	DefaultMaxRequestBytes = 10 << 20
)

// Snapshot is a compiled, immutable configuration. It is safe for concurrent
// use; nothing in it may be modified after Compile returns.
//
// A snapshot holds what serving needs and keeps its source only as encoded
// bytes: a node lives with its snapshot for hours, and every pointer in it
// is work for each garbage collection on the request path.
type Snapshot struct {
	// Version and SHA256 identify the snapshot; SHA256 is the digest of the
	// source config (see Digest).
	Version string
	SHA256  string

	// Routes in source order; Route.Index is the position here.
	Routes []Route

	// ClusterNames lists the clusters, in source order.
	ClusterNames []string

	// Services are the gRPC services whose routes are derived from their
	// descriptors, in source order.
	Services []*Service

	// RateLimiting is the fleet-wide rate limit settings.
	RateLimiting RateLimiting

	// plans maps each plan to the products it includes; planLimits to its
	// rate limits.
	plans      map[string]map[string]bool
	planLimits map[string][]*RateLimit

	// source is the deterministic encoding of the config with sha256 empty:
	// the bytes SHA256 digests.
	source []byte

	// tables holds one route table per pool that some route names; shared
	// serves every other pool and holds only the routes with no pools.
	tables map[string]*router.Table[*Route]
	shared *router.Table[*Route]
}

// Route is a compiled route: its identity and effective settings.
type Route struct {
	Index           int
	ID              string
	Team            string
	Path            string
	Cluster         string
	Timeout         time.Duration
	MaxRequestBytes int64
	Priority        configv1.Priority
	// Auth is never nil.
	Auth *RouteAuth
	// RateLimits are the route's own limits, on top of the caller's plan.
	RateLimits []*RateLimit
	// RateLimitClass selects the plan limits of scope CLASS that apply.
	RateLimitClass string
	// RPC is set on a route derived from a service method: callers of
	// every protocol are transcoded to gRPC for it.
	RPC *RPC
	// RequestHeaders and ResponseHeaders edit the headers each way, and
	// Rewrite the path sent upstream; nil when the route has none.
	RequestHeaders, ResponseHeaders *HeaderOps
	Rewrite                         *Rewrite
	// OpenAPI validates the route's requests against the team's OpenAPI
	// document; nil when it has none.
	OpenAPI *openapi.Validator
	// Probe is the synthetic call canary nodes make to the route while a
	// change to it rolls out; nil when the route has none (its default
	// probe would not reach it, see compileProbes).
	Probe *Probe
}

// Source decodes the config the snapshot was compiled from, sha256 included.
// Each call returns a new copy.
func (s *Snapshot) Source() (*configv1.Snapshot, error) {
	cfg := &configv1.Snapshot{}
	if err := proto.Unmarshal(s.source, cfg); err != nil {
		return nil, err
	}
	cfg.Sha256 = s.SHA256
	return cfg, nil
}

// Encoded returns the deterministic encoding of the config the snapshot
// was compiled from, with its sha256 field empty: the bytes SHA256 is the
// digest of. The caller must not modify them.
func (s *Snapshot) Encoded() []byte { return s.source }

// Table returns the route table for listener pool; never nil.
func (s *Snapshot) Table(pool string) *router.Table[*Route] {
	if t, ok := s.tables[pool]; ok {
		return t
	}
	return s.shared
}

// Pools lists the pools that have a table of their own, sorted.
func (s *Snapshot) Pools() []string {
	pools := make([]string, 0, len(s.tables))
	for p := range s.tables {
		pools = append(pools, p)
	}
	slices.Sort(pools)
	return pools
}

// Digest is the lowercase hex SHA-256 of cfg's deterministic encoding with
// the sha256 field cleared: the snapshot's content address.
func Digest(cfg *configv1.Snapshot) (string, error) {
	digest, _, err := encode(cfg)
	return digest, err
}

// encode returns cfg's digest and the encoding it digests.
func encode(cfg *configv1.Snapshot) (string, []byte, error) {
	c := proto.Clone(cfg).(*configv1.Snapshot)
	c.Sha256 = ""
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), b, nil
}
