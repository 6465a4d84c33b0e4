package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds how long a new cluster may take to agree that it
// is up.
const clusterTimeout = 30 * time.Second

// slots is the number of hash slots of a Redis Cluster.
const slots = 16384

// Cluster is a Redis Cluster of masters only, on loopback.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts masters (at least 3) redis-server processes with
// cluster mode on, gives each an equal range of the hash slots, introduces
// them to each other with CLUSTER MEET, and waits until every node reports
// cluster_state:ok and knows all the others. The nodes are killed when the
// test ends.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a Redis Cluster needs at least 3 masters, not %d", masters)
	}
	c := &Cluster{}
	for range masters {
		c.nodes = append(c.nodes, start(t, true))
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	for i, n := range c.nodes {
		lo, hi := i*slots/masters, (i+1)*slots/masters-1
		if _, err := do(ctx, n.Addr(), "CLUSTER", "ADDSLOTSRANGE", lo, hi); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE %d %d on %s: %v", lo, hi, n.Addr(), err)
		}
	}
	first := c.nodes[0]
	for _, n := range c.nodes[1:] {
		if _, err := do(ctx, first.Addr(), "CLUSTER", "MEET", "127.0.0.1", n.port, n.busPort); err != nil {
			t.Fatalf("redistest: CLUSTER MEET %s from %s: %v", n.Addr(), first.Addr(), err)
		}
	}
	if err := c.waitOK(ctx); err != nil {
		t.Fatalf("redistest: cluster of %d masters did not come up: %v", masters, err)
	}
	return c
}

// waitOK polls CLUSTER INFO on every node until all say the cluster is ok
// and know every node.
func (c *Cluster) waitOK(ctx context.Context) error {
	want := []string{"cluster_state:ok", fmt.Sprintf("cluster_known_nodes:%d", len(c.nodes)), fmt.Sprintf("cluster_slots_ok:%d", slots)}
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	var last string
	for {
		ok := true
		for _, n := range c.nodes {
			info, err := do(ctx, n.Addr(), "CLUSTER", "INFO")
			if err != nil {
				last = fmt.Sprintf("%s: %v", n.Addr(), err)
				ok = false
				break
			}
			s := fmt.Sprint(info)
			for _, w := range want {
				if !strings.Contains(s, w+"\r\n") {
					last = fmt.Sprintf("%s: no %q in CLUSTER INFO", n.Addr(), w)
					ok = false
				}
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %s)", ctx.Err(), last)
		case <-ticker.C:
		}
	}
}

// Addrs are the nodes' host:port addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes are the cluster's servers, for fault tests: a node that is killed
// and restarted rejoins the cluster with its slots.
func (c *Cluster) Nodes() []*Server {
	return c.nodes
}

// Client returns a cluster client seeded with every node, closed when the
// test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { cc.Close() })
	return cc
}
