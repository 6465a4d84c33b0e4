// Package kafkatest runs an in-process Kafka broker for tests: kfake
// (github.com/twmb/franz-go/pkg/kfake), which speaks the Kafka wire
// protocol, so the project's Kafka clients (kafka-go) talk to it as they
// would to a real cluster. Kafka has no Debian package on these machines;
// production points the same client code at a real cluster.
//
// A Cluster also takes the place of a network fault: SetDown cuts every
// live connection to its brokers and closes each new one at once, until
// SetDown(false), so a test can make Kafka unreachable for a while without
// closing the broker (its log is in memory: closing it loses every
// message). The cluster is closed when the test ends.
package kafkatest

import (
	"net"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Cluster is an in-process Kafka cluster on loopback.
type Cluster struct {
	kf *kfake.Cluster

	mu    sync.Mutex
	down  bool
	conns map[*tracked]struct{}
	cuts  int
}

// Start starts a cluster of one broker with topics created, each with
// partitions partitions (at least 1), and closes it when t ends.
func Start(t testing.TB, partitions int32, topics ...string) *Cluster {
	t.Helper()
	if partitions < 1 {
		partitions = 1
	}
	c := &Cluster{conns: map[*tracked]struct{}{}}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ListenFn(c.listen),
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	kf, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kafkatest: starting the broker: %v", err)
	}
	c.kf = kf
	t.Cleanup(kf.Close)
	return c
}

// Addrs are the brokers' addresses (host:port), the bootstrap list.
func (c *Cluster) Addrs() []string { return c.kf.ListenAddrs() }

// Kfake is the broker itself, for its control hooks (Control, ControlKey)
// that fail or delay chosen requests.
func (c *Cluster) Kfake() *kfake.Cluster { return c.kf }

// SetDown makes the brokers unreachable (true: every live connection is
// cut now and every new one is closed as soon as it is accepted) or
// reachable again (false).
func (c *Cluster) SetDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
	if !down {
		return
	}
	for conn := range c.conns {
		// The connection underneath: its own Close would take c.mu.
		_ = conn.Conn.Close()
		c.cuts++
	}
	clear(c.conns)
}

// Cuts counts the connections SetDown cut or refused.
func (c *Cluster) Cuts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cuts
}

func (c *Cluster) listen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return &listener{Listener: ln, c: c}, nil
}

// listener hands kfake the connections the cluster lets through.
type listener struct {
	net.Listener
	c *Cluster
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.c.mu.Lock()
		if l.c.down {
			l.c.cuts++
			l.c.mu.Unlock()
			_ = conn.Close()
			continue
		}
		tc := &tracked{Conn: conn, c: l.c}
		l.c.conns[tc] = struct{}{}
		l.c.mu.Unlock()
		return tc, nil
	}
}

// tracked is a connection SetDown can cut; it forgets itself when closed.
type tracked struct {
	net.Conn
	c    *Cluster
	once sync.Once
}

func (t *tracked) Close() error {
	t.once.Do(func() {
		t.c.mu.Lock()
		delete(t.c.conns, t)
		t.c.mu.Unlock()
	})
	return t.Conn.Close()
}
