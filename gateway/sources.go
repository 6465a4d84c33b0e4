package gateway

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-gw/portico/gateway/configfile"
	"github.com/portico-gw/portico/gateway/distribution"
	"github.com/portico-gw/portico/internal/svcauth"
)

// ControlOptions make a node follow a control plane: it runs the
// snapshots the control plane sends on its stream (and the fast lane
// beside it), ACKs or NACKs each, and reports its route counters and
// endpoint health for rollouts.
type ControlOptions struct {
	// URL is the control plane's base URL ("http://control:7000").
	URL string
	// Token, if set, is the node's credential on the stream.
	Token string
	// NodeID names the node to the control plane, stably across
	// restarts; empty means the host name.
	NodeID string
	// Region and Labels describe the node to staged rollouts; its pool is
	// its first listener's.
	Region string
	Labels map[string]string
	// CacheFile keeps the last snapshot the node ran, served at start
	// when the control plane is unreachable; empty: none.
	CacheFile string
}

// KeySnapshotOptions make a node poll the key service's signed key
// snapshot into its fast lane: the fallback that brings revocations when
// the fast lane's stream is down.
type KeySnapshotOptions struct {
	// URL serves the snapshot ("http://keys:7100/v1/key-snapshot").
	URL string
	// Token, if set, is what the key service requires to serve it.
	Token string
	// Trusted are the key service's signing keys (more than one during a
	// rotation); at least one is required.
	Trusted []ed25519.PublicKey
	// Interval between polls; zero means DefaultKeySnapshotInterval.
	Interval time.Duration
	// CacheFile keeps the last snapshot applied, applied again (verified)
	// at start; empty: none.
	CacheFile string
}

// ConfigFileOptions make a node run the snapshot config in a file, read
// at start and again whenever it changes.
type ConfigFileOptions struct {
	// Path of the YAML or JSON file.
	Path string
	// Reload, if set, forces a reload of unchanged content (SIGHUP).
	Reload <-chan struct{}
}

// DefaultKeySnapshotInterval is how often a node polls the signed key
// snapshot unless told.
const DefaultKeySnapshotInterval = time.Minute

// sources are what feed a Node besides Apply: the config file or the
// control plane, and the signed key snapshot. Run starts and stops them.
type sources struct {
	file    *configfile.Watcher
	control *distribution.Client
	cache   string // the control client's cache file
	poller  *distribution.Poller
}

// newSources builds the sources opts ask for; it does no I/O.
func (n *Node) newSources(opts Options) (*sources, error) {
	s := &sources{}
	if opts.ConfigFile != nil && opts.Control != nil {
		return nil, errors.New("gateway: a node runs a config file or follows a control plane, not both")
	}
	if f := opts.ConfigFile; f != nil {
		if f.Path == "" {
			return nil, errors.New("gateway: ConfigFile needs a Path")
		}
		s.file = &configfile.Watcher{Path: f.Path, Reload: f.Reload, Logger: n.log, Apply: n.Apply}
	}
	if c := opts.Control; c != nil {
		if c.URL == "" {
			return nil, errors.New("gateway: Control needs the control plane's URL")
		}
		id, err := nodeID(opts)
		if err != nil {
			return nil, err
		}
		pool := opts.Listeners[0].Pool
		if pool == "" {
			pool = "public"
		}
		s.cache = c.CacheFile
		do := distribution.Options{
			URL: c.URL, Token: c.Token,
			NodeID: id, Pool: pool, Region: c.Region, Labels: c.Labels, CacheFile: c.CacheFile,
			Apply: n.Apply, Logger: n.log, Stats: n.RouteStats, Lane: n.lane, Node: n,
			// The offset the stream measures corrects the clock the usage
			// windows are stamped on: it must be measured on that clock.
			Now: n.opts.Now,
		}
		if n.usage != nil {
			// Set only with usage: a nil *nodeUsage is not a nil
			// interface.
			do.Usage = n.usage
		}
		s.control = distribution.New(do)
	}
	if k := opts.KeySnapshot; k != nil {
		client := &http.Client{Timeout: 60 * time.Second}
		if k.Token != "" {
			client.Transport = svcauth.Transport(k.Token, nil)
		}
		interval := k.Interval
		if interval <= 0 {
			interval = DefaultKeySnapshotInterval
		}
		p, err := distribution.NewPoller(distribution.PollerOptions{URL: k.URL, HTTPClient: client, Trusted: k.Trusted,
			Interval: interval, CacheFile: k.CacheFile, Lane: n.lane, Logger: n.log})
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		s.poller = p
	}
	return s, nil
}

// nodeID is the node's id, to the control plane and in its usage
// windows: ControlOptions.NodeID, or the host name.
func nodeID(opts Options) (string, error) {
	if c := opts.Control; c != nil && c.NodeID != "" {
		return c.NodeID, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("gateway: a node id (-node-id) is needed: %w", err)
	}
	return host, nil
}

// boot runs what the sources hold before the node serves: the config
// file (whose failure is fatal: there is nothing older to serve), the
// control plane's cached snapshot and the cached key snapshot (whose
// failures are not: the control plane and the key service send the
// current state when they answer).
func (s *sources) boot(n *Node) error {
	if s.file != nil {
		cfg, err := s.file.Load()
		if err != nil {
			return err
		}
		if err := n.Apply(cfg); err != nil {
			return err
		}
	}
	if s.poller != nil {
		if _, err := s.poller.Boot(); err != nil {
			n.log.Warn("not applying the cached key snapshot", "err", err)
		}
	}
	if s.control != nil {
		booted, err := s.control.Boot()
		if err != nil {
			n.log.Warn("not serving the cached snapshot", "err", err)
		}
		if booted {
			// Apply logged the snapshot, with its sha256.
			n.log.Info("serving the cached snapshot until the control plane answers", "file", s.cache)
		}
	}
	return nil
}

// run runs every source until ctx ends; wait returns once all have
// stopped. A source that fails is reported on errc.
func (s *sources) run(ctx context.Context, errc chan<- error) (wait func()) {
	var wg sync.WaitGroup
	if s.file != nil {
		wg.Go(func() { s.file.Run(ctx) })
	}
	if s.poller != nil {
		wg.Go(func() { s.poller.Run(ctx) })
	}
	if s.control != nil {
		wg.Go(func() {
			if err := s.control.Run(ctx); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("gateway: following the control plane: %w", err)
			}
		})
	}
	return wg.Wait
}

// redisClient is the client of RateLimitOptions.RedisAddrs: a cluster
// client for several seed addresses.
func redisClient(o RateLimitOptions) redis.UniversalClient {
	if len(o.RedisAddrs) == 1 {
		return redis.NewClient(&redis.Options{Addr: o.RedisAddrs[0], Password: o.RedisPassword})
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: o.RedisAddrs, Password: o.RedisPassword})
}

// defaultRateLimitNodeID names a node in Redis when no id is given:
// unique per process, since two processes on one host are two nodes.
func defaultRateLimitNodeID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "node"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}
