package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// What a probe may cost the node, which serves traffic meanwhile: one
// probe at a time, at most probeClusters clusters of it, probeEndpoints
// endpoints of each, probeParallel clusters at once (so at most
// probeParallel × probeEndpoints connections).
const (
	probeClusters  = 1000
	probeEndpoints = 8
	probeParallel  = 32
)

// UpstreamIdentities describes the client certificates the node holds for
// mTLS to backends (Options.Upstream.Identities), sorted by name: what the
// node tells the control plane it has.
func (n *Node) UpstreamIdentities() []upstream.IdentityInfo {
	return n.opts.Upstream.Identities.Info()
}

// ClusterStatus returns the current snapshot's clusters with their
// endpoints' health, ejections and refused connections.
func (n *Node) ClusterStatus() []upstream.ClusterStatus {
	return n.state.Load().set.Status()
}

// ProbeClusters tries clusters the node does not run yet, as the control
// plane asks before it commits a change that adds or changes them: each
// is built as a snapshot's would be, with this node's identities, dialer
// and networks, and its endpoints (the first probeEndpoints) are checked
// once within timeout (see upstream.Probe). Nothing the node serves
// changes. A cluster that does not validate is reported, not probed. While
// a probe runs, another gets no answer (nil).
func (n *Node) ProbeClusters(ctx context.Context, clusters []*configv1.Cluster, timeout time.Duration) []upstream.ProbeResult {
	select {
	case n.probing <- struct{}{}:
		defer func() { <-n.probing }()
	default:
		return nil // a probe runs already: this one says nothing
	}
	opts := withLogger(n.opts.Upstream, n.log)
	clusters = clusters[:min(len(clusters), probeClusters)]
	out := make([]upstream.ProbeResult, len(clusters))
	sem := make(chan struct{}, probeParallel)
	var wg sync.WaitGroup
	for i, c := range clusters {
		if err := protovalidate.Validate(c); err != nil {
			out[i] = upstream.ProbeResult{Cluster: c.GetName(), Err: fmt.Errorf("the cluster does not validate: %w", err)}
			continue
		}
		if len(c.GetEndpoints()) > probeEndpoints {
			c = proto.CloneOf(c)
			c.Endpoints = c.Endpoints[:probeEndpoints]
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = upstream.Probe(ctx, c, opts, timeout)
		})
	}
	wg.Wait()
	return out
}
