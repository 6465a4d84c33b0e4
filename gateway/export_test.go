package gateway

import "github.com/portico-gw/portico/gateway/exchange"

// OnFinish makes n call f with a copy of every request's record as finish
// hands it to the sinks.
func OnFinish(n *Node, f func(exchange.Record)) {
	hook := func(x *exchange.Record) { f(*x) }
	n.onFinish.Store(&hook)
}
