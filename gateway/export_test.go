package gateway

import (
	"context"

	"github.com/portico-gw/portico/gateway/exchange"
	"github.com/portico-gw/portico/gateway/snapshot"
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
