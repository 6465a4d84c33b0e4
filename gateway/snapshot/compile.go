package snapshot

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"buf.build/go/protovalidate"

	"github.com/portico-gw/portico/gateway/openapi"
	"github.com/portico-gw/portico/gateway/router"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Compile validates cfg and builds the runtime snapshot. On failure it
// returns a *Error listing every problem: schema violations (protovalidate
// on the config protos), a mismatched sha256, duplicate cluster names,
// routes naming unknown clusters, unparsable path templates, duplicate route
// ids and ambiguous routes (each naming both routes), auth references to
// unknown scopes, products, plans or issuers, and route probes that their
// route would not answer. cfg is not modified and not referenced by the
// result.
func Compile(cfg *configv1.Snapshot) (*Snapshot, error) {
	if cfg == nil {
		return nil, &Error{Violations: []Violation{{Message: "no snapshot"}}}
	}
	errs := &Error{}
	invalidRoute := map[int]bool{}

	if err := protovalidate.Validate(cfg); err != nil {
		var verr *protovalidate.ValidationError
		if !errors.As(err, &verr) {
			return nil, fmt.Errorf("validating snapshot: %w", err)
		}
		for _, v := range verr.Violations {
			elems := v.Proto.GetField().GetElements()
			if len(elems) > 0 && elems[0].GetFieldName() == "routes" {
				invalidRoute[int(elems[0].GetIndex())] = true
			}
			errs.add(protovalidate.FieldPathString(v.Proto.GetField()), v.Proto.GetMessage())
		}
	}

	digest, source, err := encode(cfg)
	if err != nil {
		return nil, fmt.Errorf("digesting snapshot: %w", err)
	}
	if cfg.GetSha256() != "" && cfg.GetSha256() != digest {
		errs.add("sha256", "does not match the snapshot's content (computed "+digest+")")
	}

	s := &Snapshot{
		Version: cfg.GetVersion(),
		SHA256:  digest,
		source:  source,
	}
	clusters := make(map[string]configv1.Protocol, len(cfg.GetClusters()))
	for i, c := range cfg.GetClusters() {
		if _, dup := clusters[c.GetName()]; dup {
			errs.add(fmt.Sprintf("clusters[%d].name", i), fmt.Sprintf("duplicate cluster %q", c.GetName()))
			continue
		}
		clusters[c.GetName()] = c.GetProtocol()
		s.ClusterNames = append(s.ClusterNames, c.GetName())
	}

	cat := compileCatalog(cfg, s, errs)
	compileRateLimiting(cfg, s)

	// The hand-written routes, then those the services derive, each with
	// the path that problems name.
	routes := slices.Clone(cfg.GetRoutes())
	labels := make([]string, len(routes))
	for i := range routes {
		labels[i] = routePath(i)
	}
	derived := compileServices(cfg, clusters, s, errs)
	for j, sc := range cfg.GetServices() {
		// A service's auth and limits are checked once, not per route.
		at := fmt.Sprintf("services[%d]", j)
		cat.compileRouteAuth(at, &configv1.Route{Id: sc.GetId(), Auth: sc.GetAuth()}, errs)
		compileRouteLimits(at, &configv1.Route{Id: sc.GetId(), RateLimits: sc.GetRateLimits()}, errs)
		checkServiceMethodScopes(at, sc, errs)
	}
	for _, d := range derived {
		routes = append(routes, d.rc)
		labels = append(labels, d.label)
	}

	pools := map[string]bool{}
	s.Routes = make([]Route, len(routes))
	for i, rc := range routes {
		at, rerrs := labels[i], errs
		if i >= len(cfg.GetRoutes()) {
			at, rerrs = "", &Error{} // reported once per service above
		}
		r := &s.Routes[i]
		*r = Route{
			Index:           i,
			ID:              rc.GetId(),
			Team:            rc.GetTeam(),
			Path:            rc.GetPath(),
			Cluster:         rc.GetCluster(),
			Timeout:         DefaultTimeout,
			MaxRequestBytes: DefaultMaxRequestBytes,
			Priority:        rc.GetPriority(),
			Auth:            cat.compileRouteAuth(at, rc, rerrs),
			RateLimits:      compileRouteLimits(at, rc, rerrs),
			RateLimitClass:  rc.GetRateLimitClass(),
		}
		if i >= len(cfg.GetRoutes()) {
			r.RPC = derived[i-len(cfg.GetRoutes())].rpc
		} else {
			r.RequestHeaders = compileHeaderOps(at+".request_headers", rc.GetRequestHeaders(), false, errs)
			r.ResponseHeaders = compileHeaderOps(at+".response_headers", rc.GetResponseHeaders(), true, errs)
			r.Rewrite = compileRewrite(at, rc, errs)
			if oc := rc.GetOpenapi(); oc != nil {
				v, err := openapi.Compile(oc)
				if err != nil {
					errs.add(at+".openapi.document", err.Error())
				}
				r.OpenAPI = v
			}
		}
		if rc.GetTimeout() != nil {
			r.Timeout = rc.GetTimeout().AsDuration()
		}
		if rc.GetMaxRequestBytes() != 0 {
			r.MaxRequestBytes = int64(rc.GetMaxRequestBytes())
		}
		if _, ok := clusters[rc.GetCluster()]; !ok && rc.GetCluster() != "" && i < len(cfg.GetRoutes()) {
			errs.add(at+".cluster", fmt.Sprintf("route %q names unknown cluster %q", rc.GetId(), rc.GetCluster()))
		}
		for _, p := range rc.GetPools() {
			pools[p] = true
		}
	}

	s.tables = make(map[string]*router.Table[*Route], len(pools))
	tb := tableBuilder{s: s, routes: routes, labels: labels, errs: errs, skip: invalidRoute, seen: map[string]bool{}}
	s.shared = tb.build("", func(rc *configv1.Route) bool { return len(rc.GetPools()) == 0 })
	for _, pool := range slices.Sorted(maps.Keys(pools)) {
		s.tables[pool] = tb.build(pool, func(rc *configv1.Route) bool {
			return len(rc.GetPools()) == 0 || slices.Contains(rc.GetPools(), pool)
		})
	}
	compileProbes(routes, labels, invalidRoute, s, errs)

	if len(errs.Violations) > 0 {
		return nil, errs
	}
	return s, nil
}

// tableBuilder compiles the route table of one pool at a time and turns the
// router's problems into violations.
type tableBuilder struct {
	s      *Snapshot
	routes []*configv1.Route
	labels []string // by route index: the path problems name
	errs   *Error
	skip   map[int]bool    // routes that failed schema validation
	seen   map[string]bool // problems already reported by another pool's table
}

func (tb *tableBuilder) build(pool string, include func(*configv1.Route) bool) *router.Table[*Route] {
	var specs []router.Route[*Route]
	var index []int
	for i, rc := range tb.routes {
		if tb.skip[i] || !include(rc) {
			continue
		}
		specs = append(specs, routerRoute(rc, &tb.s.Routes[i]))
		index = append(index, i)
	}
	t, err := router.New(specs)
	if err == nil {
		return t
	}
	var cerr *router.CompileError
	if !errors.As(err, &cerr) {
		tb.errs.add("routes", err.Error())
		return nil
	}
	for _, p := range cerr.Problems {
		path := "routes"
		if len(p.Indexes) > 0 {
			path = tb.labels[index[p.Indexes[0]]]
		}
		msg := p.Message
		if p.Kind == router.InvalidTemplate && p.Err != nil && path != "" && path != "routes" {
			// The field is known: name it, and leave out the route id
			// the path already has.
			path, msg = path+".path", p.Err.Error()
		}
		// A problem between routes with no pools shows up in every table;
		// report it once.
		key := path + "\x00" + p.Message
		if tb.seen[key] {
			continue
		}
		tb.seen[key] = true
		if pool != "" {
			msg += " in pool " + strconv.Quote(pool)
		}
		tb.errs.add(path, msg)
	}
	return nil
}

func routePath(i int) string { return "routes[" + strconv.Itoa(i) + "]" }

// routerRoute is the router's view of rc, with r as its value. The router
// copies what it keeps, so rc may be dropped after compiling.
func routerRoute(rc *configv1.Route, r *Route) router.Route[*Route] {
	rr := router.Route[*Route]{
		ID:      rc.GetId(),
		Hosts:   rc.GetHosts(),
		Methods: rc.GetMethods(),
		Path:    rc.GetPath(),
		Value:   r,
	}
	for _, h := range rc.GetHeaders() {
		m := router.HeaderMatch{Name: h.GetName(), Invert: h.GetInvert()}
		switch v := h.GetMatch().(type) {
		case *configv1.HeaderMatch_Exact:
			m.Kind, m.Value = router.Exact, v.Exact
		case *configv1.HeaderMatch_Prefix:
			m.Kind, m.Value = router.Prefix, v.Prefix
		case *configv1.HeaderMatch_Regex:
			m.Kind, m.Value = router.Regex, v.Regex
		case *configv1.HeaderMatch_Present:
			m.Kind = router.Present
		}
		rr.Headers = append(rr.Headers, m)
	}
	return rr
}
