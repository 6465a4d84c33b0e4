package snapshot

import (
	"fmt"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// RouteAuth is a route's compiled authentication and authorisation.
type RouteAuth struct {
	// Public routes take no credential.
	Public bool
	// Scopes the caller must all have, unless MethodScopes has the method.
	Scopes []string
	// MethodScopes replace Scopes for an HTTP method ("POST") or a gRPC
	// method ("/pkg.Service/Method").
	MethodScopes map[string][]string
	// Product the route belongs to; "" for none.
	Product string
	// QueryKey names the query parameter that may carry an API key; "" for
	// none.
	QueryKey string
	// Issuers whose tokens the route accepts; empty means every issuer.
	Issuers []string
}

// RequiredScopes returns the scopes a request with this HTTP method and
// path must have.
func (a *RouteAuth) RequiredScopes(method, path string) []string {
	if len(a.MethodScopes) > 0 {
		if s, ok := a.MethodScopes[path]; ok {
			return s
		}
		if s, ok := a.MethodScopes[method]; ok {
			return s
		}
	}
	return a.Scopes
}

// AcceptsIssuer reports whether tokens of the named issuer may call the route.
func (a *RouteAuth) AcceptsIssuer(name string) bool {
	if len(a.Issuers) == 0 {
		return true
	}
	for _, i := range a.Issuers {
		if i == name {
			return true
		}
	}
	return false
}

// PlanIncludes reports whether plan includes product. An unknown plan
// includes nothing.
func (s *Snapshot) PlanIncludes(plan, product string) bool {
	return s.plans[plan][product]
}

// publicAuth is shared by every public route.
var publicAuth = &RouteAuth{Public: true}

// catalog holds the names the auth config may refer to, for checking
// references.
type catalog struct {
	products, scopes, issuers, plans map[string]bool
}

// compileCatalog checks products, scopes, plans and issuers (unique names,
// plans naming known products) and fills s.plans.
func compileCatalog(cfg *configv1.Snapshot, s *Snapshot, errs *Error) *catalog {
	c := &catalog{products: map[string]bool{}, scopes: map[string]bool{}, issuers: map[string]bool{}, plans: map[string]bool{}}
	unique := func(set map[string]bool, kind string, i int, name string) bool {
		if set[name] {
			errs.add(fmt.Sprintf("%ss[%d].name", kind, i), fmt.Sprintf("duplicate %s %q", kind, name))
			return false
		}
		set[name] = true
		return true
	}
	for i, p := range cfg.GetProducts() {
		unique(c.products, "product", i, p.GetName())
	}
	for i, sc := range cfg.GetScopes() {
		unique(c.scopes, "scope", i, sc.GetName())
	}
	iss := map[string]bool{}
	for i, is := range cfg.GetIssuers() {
		unique(c.issuers, "issuer", i, is.GetName())
		if iss[is.GetIssuer()] {
			errs.add(fmt.Sprintf("issuers[%d].issuer", i), fmt.Sprintf("issuer %q configured twice", is.GetIssuer()))
		}
		iss[is.GetIssuer()] = true
	}
	s.plans = make(map[string]map[string]bool, len(cfg.GetPlans()))
	s.planLimits = make(map[string][]*RateLimit, len(cfg.GetPlans()))
	for i, p := range cfg.GetPlans() {
		if !unique(c.plans, "plan", i, p.GetName()) {
			continue
		}
		if l := compileLimits(fmt.Sprintf("plans[%d].rate_limits", i), "plan/"+p.GetName()+"/", p.GetRateLimits(), errs); l != nil {
			s.planLimits[p.GetName()] = l
		}
		products := make(map[string]bool, len(p.GetProducts()))
		for j, prod := range p.GetProducts() {
			if !c.products[prod] {
				errs.add(fmt.Sprintf("plans[%d].products[%d]", i, j), fmt.Sprintf("plan %q names unknown product %q", p.GetName(), prod))
			}
			products[prod] = true
		}
		s.plans[p.GetName()] = products
	}
	for i, is := range cfg.GetIssuers() {
		if dp := is.GetDefaultPlan(); dp != "" && !c.plans[dp] {
			errs.add(fmt.Sprintf("issuers[%d].default_plan", i), fmt.Sprintf("issuer %q names unknown plan %q", is.GetName(), dp))
		}
	}
	for i, k := range cfg.GetKeys() {
		if !c.plans[k.GetPlan()] {
			errs.add(fmt.Sprintf("keys[%d].plan", i), fmt.Sprintf("key %q names unknown plan %q", k.GetKeyId(), k.GetPlan()))
		}
		for j, sc := range k.GetScopes() {
			if !c.scopes[sc] {
				errs.add(fmt.Sprintf("keys[%d].scopes[%d]", i, j), fmt.Sprintf("key %q names unknown scope %q", k.GetKeyId(), sc))
			}
		}
	}
	for i, d := range cfg.GetDenyList() {
		if d.GetIssuer() != "" && !c.issuers[d.GetIssuer()] {
			errs.add(fmt.Sprintf("deny_list[%d].issuer", i), fmt.Sprintf("deny entry names unknown issuer %q", d.GetIssuer()))
		}
	}
	return c
}

// compileRouteAuth checks route i's auth against the catalog and compiles it.
func (c *catalog) compileRouteAuth(at string, rc *configv1.Route, errs *Error) *RouteAuth {
	ac := rc.GetAuth()
	if ac.GetPublic() {
		return publicAuth
	}
	path := at + ".auth"
	a := &RouteAuth{Product: ac.GetProduct(), QueryKey: ac.GetQueryKey()}
	checkScopes := func(field string, scopes []string) []string {
		for j, sc := range scopes {
			if !c.scopes[sc] {
				errs.add(fmt.Sprintf("%s.%s[%d]", path, field, j), fmt.Sprintf("route %q requires unknown scope %q", rc.GetId(), sc))
			}
		}
		return scopes
	}
	a.Scopes = checkScopes("scopes", ac.GetScopes())
	if ms := ac.GetMethodScopes(); len(ms) > 0 {
		a.MethodScopes = make(map[string][]string, len(ms))
		for j, m := range ms {
			if _, dup := a.MethodScopes[m.GetMethod()]; dup {
				errs.add(fmt.Sprintf("%s.method_scopes[%d].method", path, j), fmt.Sprintf("route %q lists method %q twice", rc.GetId(), m.GetMethod()))
			}
			a.MethodScopes[m.GetMethod()] = checkScopes(fmt.Sprintf("method_scopes[%d].scopes", j), m.GetScopes())
		}
	}
	if a.Product != "" && !c.products[a.Product] {
		errs.add(path+".product", fmt.Sprintf("route %q belongs to unknown product %q", rc.GetId(), a.Product))
	}
	for j, is := range ac.GetIssuers() {
		if !c.issuers[is] {
			errs.add(fmt.Sprintf("%s.issuers[%d]", path, j), fmt.Sprintf("route %q accepts unknown issuer %q", rc.GetId(), is))
		}
	}
	a.Issuers = ac.GetIssuers()
	return a
}
