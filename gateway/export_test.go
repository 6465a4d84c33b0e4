package gateway

import (
	"context"

	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/snapshot"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
)

// OnFinish makes n call f with a copy of every request's record as finish
// hands it to the sinks.
func OnFinish(n *Node, f func(exchange.Record)) {
	hook := func(x *exchange.Record) { f(*x) }
	n.onFinish.Store(&hook)
}

// Probe sends route r's probe once through n's chain, as the probe runner
// does, whichever snapshot r is of.
func Probe(n *Node, r *snapshot.Route) {
	n.probe(context.Background(), &pool{node: n, name: r.Probe.Pool, index: -1}, r)
}

// UsageOf is what n's control-plane stream sees of its usage counting;
// nil without Options.Usage.
func UsageOf(n *Node) interface {
	UsageSpool() *distributionv1.UsageSpool
	ResendUsage(*distributionv1.ResendUsage)
} {
	if n.usage == nil {
		return nil
	}
	return n.usage
}
