package upstream

import (
	"crypto/sha256"
	"errors"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Registry builds [Cluster]s from config and keeps them across snapshot
// swaps, so that a new snapshot does not drop warm connections, health
// verdicts and ejections of the clusters it did not change.
//
// A cluster is identified by the SHA-256 of its config's deterministic
// encoding (the name included). Each [Set] holding a cluster counts as one
// reference; the cluster is closed when the last Set holding it is released.
//
// Lifecycle:
//
//  1. NewRegistry.
//  2. Build for each snapshot, from the goroutine that installs snapshots
//     (Build may be called concurrently, but gains nothing from it).
//  3. Release each Set when its snapshot is no longer used by any request.
//  4. Close at shutdown; Builds after that fail, Releases do nothing.
type Registry struct {
	opts Options

	mu       sync.Mutex
	clusters map[clusterKey]*entry
	closed   bool
}

type clusterKey [sha256.Size]byte

type entry struct {
	key  clusterKey
	c    *Cluster
	refs int // live Sets holding c; guarded by Registry.mu
}

// NewRegistry returns an empty registry. See [Options] for the defaults.
func NewRegistry(opts Options) *Registry {
	return &Registry{opts: opts.withDefaults(), clusters: make(map[clusterKey]*entry)}
}

// Build returns the clusters of one snapshot: the existing *Cluster for each
// config seen before (compared by deterministic encoding), a new one for
// each other. Configs must have passed protovalidate; Build copies them, so
// the caller may reuse its messages.
//
// Build fails, holding nothing, if cluster names repeat, a cluster's TLS
// CA cannot be read or parsed, it names an identity the node does not
// hold, or a gRPC health probe is set on an HTTP/1 cluster; the error is
// a *ClusterError naming the cluster and the field.
func (r *Registry) Build(clusters []*configv1.Cluster) (*Set, error) {
	keys := make([]clusterKey, len(clusters))
	seen := make(map[string]struct{}, len(clusters))
	for i, cfg := range clusters {
		if _, dup := seen[cfg.GetName()]; dup {
			return nil, &ClusterError{Cluster: cfg.GetName(), Err: errors.New("defined twice")}
		}
		seen[cfg.GetName()] = struct{}{}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cfg)
		if err != nil {
			return nil, &ClusterError{Cluster: cfg.GetName(), Err: err}
		}
		keys[i] = sha256.Sum256(b)
	}

	s := &Set{
		r:      r,
		byName: make(map[string]*Cluster, len(clusters)),
		list:   make([]*Cluster, 0, len(clusters)),
		held:   make([]*entry, 0, len(clusters)),
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errors.New("upstream: registry closed")
	}
	for i, cfg := range clusters {
		e, ok := r.clusters[keys[i]]
		if !ok {
			c, err := newCluster(proto.CloneOf(cfg), r.opts)
			if err != nil {
				unused := r.releaseLocked(s.held)
				r.mu.Unlock()
				closeAll(unused)
				return nil, err
			}
			c.start()
			e = &entry{key: keys[i], c: c}
			r.clusters[keys[i]] = e
		}
		e.refs++
		s.held = append(s.held, e)
		s.byName[e.c.name] = e.c
		s.list = append(s.list, e.c)
	}
	r.mu.Unlock()
	return s, nil
}

// Close closes every cluster, whether or not Sets still hold it, and waits
// for their health checks to stop.
func (r *Registry) Close() {
	r.mu.Lock()
	var all []*Cluster
	for _, e := range r.clusters {
		all = append(all, e.c)
	}
	r.clusters = nil
	r.closed = true
	r.mu.Unlock()
	closeAll(all)
}

// releaseLocked drops one reference to each entry and returns the clusters
// that no Set holds any more, to be closed after unlocking.
func (r *Registry) releaseLocked(held []*entry) []*Cluster {
	if r.closed {
		return nil
	}
	var unused []*Cluster
	for _, e := range held {
		e.refs--
		if e.refs == 0 {
			delete(r.clusters, e.key)
			unused = append(unused, e.c)
		}
	}
	return unused
}

func closeAll(cs []*Cluster) {
	for _, c := range cs {
		c.close()
	}
}

// Set is the clusters of one snapshot. Its lookups are safe for concurrent
// use and do not allocate.
type Set struct {
	r        *Registry
	byName   map[string]*Cluster
	list     []*Cluster
	held     []*entry
	released atomic.Bool
}

// Cluster returns the named cluster, or nil if the snapshot has none by
// that name.
func (s *Set) Cluster(name string) *Cluster { return s.byName[name] }

// Clusters returns the set's clusters in the order they were given to
// Build. The slice is shared: do not modify it.
func (s *Set) Clusters() []*Cluster { return s.list }

// ClusterStatus is one cluster's endpoints as the node sees them now.
type ClusterStatus struct {
	Name      string
	Endpoints []EndpointStatus
}

// Status returns every cluster of the set with its endpoints' state, in
// Build order. It takes each cluster's lock: not for the request path.
func (s *Set) Status() []ClusterStatus {
	out := make([]ClusterStatus, len(s.list))
	for i, c := range s.list {
		out[i] = ClusterStatus{Name: c.name, Endpoints: c.Endpoints()}
	}
	return out
}

// Release says that the snapshot holding s is gone. Clusters that no other
// live Set holds are closed before Release returns (their health checks
// stopped, idle connections closed). Release is idempotent; lookups on s
// keep working, for requests that still finish on the old snapshot.
func (s *Set) Release() {
	if !s.released.CompareAndSwap(false, true) {
		return
	}
	s.r.mu.Lock()
	unused := s.r.releaseLocked(s.held)
	s.r.mu.Unlock()
	closeAll(unused)
}
