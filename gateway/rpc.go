package gateway

import (
	"context"
	"net/http"

	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/proxy"
	"github.com/portico-gw/portico/gateway/snapshot"
)

// rpcCall is what serveRPC needs of a transcoded call: the route it
// matched and where to forward it.
type rpcCall struct {
	route  *snapshot.Route
	target *proxy.Target
	st     *state
}

type rpcCallKey struct{}

// transcode hands a gRPC-Web, Connect or REST call of a service route to
// the service's transcoder, which calls serveRPC with the gRPC request.
func (n *Node) transcode(w http.ResponseWriter, r *http.Request, st *state, route *snapshot.Route, t *proxy.Target) {
	ctx := context.WithValue(r.Context(), rpcCallKey{}, &rpcCall{route: route, target: t, st: st})
	r2 := r.WithContext(ctx)
	// The transcoder routes by path again: give it the normalised path and
	// the query the upstream may see (an API key in it removed).
	u := *r.URL
	u.Path, u.RawPath, u.RawQuery = t.Path, "", t.RawQuery
	r2.URL = &u
	st.rpc.For(route.RPC.Service).ServeHTTP(w, r2)
}

// serveRPC forwards the gRPC request the transcoder made of a call.
func (n *Node) serveRPC(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(rpcCallKey{}).(*rpcCall)
	if c == nil || r.URL.Path != c.route.RPC.Path {
		// The transcoder resolved the call to another method than the
		// route the gateway authorised: never forward that.
		problem.Write(w, r, problem.Problem{Code: problem.Internal, Detail: "the call resolved to another method than its route"})
		return
	}
	t := *c.target
	t.Path, t.RawQuery = r.URL.Path, ""
	n.forwardRPC(w, r, c.st, c.route, &t)
}

// forwardRPC forwards a gRPC call of a service route once its request
// passes the service's validation rules.
func (n *Node) forwardRPC(w http.ResponseWriter, r *http.Request, st *state, route *snapshot.Route, t *proxy.Target) {
	if p := st.rpc.Validate(r, route); p != nil {
		p.Instance, p.RequestID = route.RPC.Path, t.RequestID
		problem.Write(w, r, *p)
		return
	}
	n.fwd.Serve(w, r, t)
}
