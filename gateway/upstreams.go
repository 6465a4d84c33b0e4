package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"buf.build/go/protovalidate"

	"github.com/portico-gw/portico/gateway/upstream"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// maxParallelProbes bounds how many clusters ProbeClusters tries at once.
const maxParallelProbes = 16

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
// and networks, and every endpoint is checked once within timeout (see
// upstream.Probe). Nothing the node serves changes. A cluster that does
// not validate is reported, not probed.
func (n *Node) ProbeClusters(ctx context.Context, clusters []*configv1.Cluster, timeout time.Duration) []upstream.ProbeResult {
	opts := withLogger(n.opts.Upstream, n.log)
	out := make([]upstream.ProbeResult, len(clusters))
	sem := make(chan struct{}, maxParallelProbes)
	var wg sync.WaitGroup
	for i, c := range clusters {
		if err := protovalidate.Validate(c); err != nil {
			out[i] = upstream.ProbeResult{Cluster: c.GetName(), Err: fmt.Errorf("the cluster does not validate: %w", err)}
			continue
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
