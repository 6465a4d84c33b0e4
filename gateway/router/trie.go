package router

// The compiled table is a three-level index: host group, then method, then verb, each
// leading to a segment trie whose nodes hold the routes that end there.
//
// All of it is built by compile and never written again, which is what makes Match
// safe for concurrent use without locks.

// core is the non-generic part of a Table.
type core struct {
	exact map[string]*group
	// wild is keyed by the suffix of a wildcard host with its dot: "*.example.com"
	// is ".example.com". minWild and maxWild bound the key lengths, to skip lookups
	// that cannot hit.
	wild             map[string]*group
	minWild, maxWild int
	anyHost          *group
}

// group holds the routes of one host key.
type group struct {
	methods []methodTree // sorted by method
	any     *tree        // routes that list no method
	// listed holds every route of methods together, without regard to method, so
	// that one walk tells whether a request would match under some other method.
	listed *tree
}

type methodTree struct {
	method string
	tree   *tree
}

// tree holds the routes of one host key and method.
type tree struct {
	plain *node      // templates without a verb
	verbs []verbRoot // sorted by verb
}

type verbRoot struct {
	verb string
	root *node
}

// maxListChildren is the fan-out up to which a node keeps its literal children in
// slices and scans them; above it a map is faster.
const maxListChildren = 8

// node is a position in a segment trie: the segments of a path up to here have
// matched.
type node struct {
	keys   []string // literal children when few, with kids
	kids   []*node
	litMap map[string]*node // literal children when many, or while building
	single *node            // the child for a single-segment match
	leaf   []*route         // routes ending here, in order of preference
	multi  []*route         // routes whose "**" starts here, in order of preference
}

// route is a compiled route.
type route struct {
	id      string
	index   int // into Table.values
	vars    []variable
	headers []headerMatcher
	hkey    string // identifies the header set, for ambiguity checks
}

// match returns the route for req, and the path its variables bind in: req.Path,
// or req.Path without its verb.
func (c *core) match(req *Request) (*route, string) {
	p := req.Path
	if len(p) == 0 || p[0] != '/' {
		return nil, ""
	}
	verb, stripped := splitVerb(p)
	for g, k := c.nextGroup(req.Host, 0); g != nil; g, k = c.nextGroup(req.Host, k) {
		if r, path := g.match(req.Method, p, stripped, verb, req.Header); r != nil {
			return r, path
		}
	}
	return nil, ""
}

// methodNotAllowed reports whether a route listing methods would match req's host,
// path and headers. It is called once match has found nothing, so such a route
// cannot list req.Method (nor GET for HEAD): it would have matched.
func (c *core) methodNotAllowed(req *Request) bool {
	p := req.Path
	if len(p) == 0 || p[0] != '/' {
		return false
	}
	verb, stripped := splitVerb(p)
	for g, k := c.nextGroup(req.Host, 0); g != nil; g, k = c.nextGroup(req.Host, k) {
		if g.listed != nil {
			if r, _ := g.listed.match(p, stripped, verb, req.Header); r != nil {
				return true
			}
		}
	}
	return false
}

// allowed returns, unsorted and possibly repeated, the methods under which some
// route listing methods matches req.
func (c *core) allowed(req *Request) []string {
	p := req.Path
	if len(p) == 0 || p[0] != '/' {
		return nil
	}
	verb, stripped := splitVerb(p)
	var ms []string
	for g, k := c.nextGroup(req.Host, 0); g != nil; g, k = c.nextGroup(req.Host, k) {
		for i := range g.methods {
			m := &g.methods[i]
			if r, _ := m.tree.match(p, stripped, verb, req.Header); r != nil {
				ms = append(ms, m.method)
				if m.method == "GET" {
					ms = append(ms, "HEAD")
				}
			}
		}
	}
	return ms
}

// nextGroup returns the first host group for host at or after state k, in order of
// precedence, and the state to resume from; nil when there are no more. State 0 is
// the exact host; state 1+i looks for a wildcard suffix starting at byte i or later;
// state len(host)+2 is the group of routes without hosts.
func (c *core) nextGroup(host string, k int) (*group, int) {
	if k == 0 {
		k = 1
		if g := c.exact[host]; g != nil {
			return g, k
		}
	}
	end := len(host) + 2
	if k < end {
		if len(c.wild) > 0 {
			// The longest suffix comes first: it starts at the first dot after a
			// non-empty label.
			for i := max(k-1, 1); i < len(host); i++ {
				if host[i] != '.' {
					continue
				}
				if n := len(host) - i; n < c.minWild {
					break
				} else if n > c.maxWild {
					continue
				}
				if g := c.wild[host[i:]]; g != nil {
					return g, i + 2
				}
			}
		}
		k = end
	}
	if k == end {
		if c.anyHost != nil {
			return c.anyHost, k + 1
		}
	}
	return nil, k + 1
}

// match tries the group's method tables in order of precedence.
func (g *group) match(method, full, stripped, verb string, h map[string][]string) (*route, string) {
	if t := g.method(method); t != nil {
		if r, p := t.match(full, stripped, verb, h); r != nil {
			return r, p
		}
	}
	if method == "HEAD" {
		if t := g.method("GET"); t != nil {
			if r, p := t.match(full, stripped, verb, h); r != nil {
				return r, p
			}
		}
	}
	if g.any != nil {
		return g.any.match(full, stripped, verb, h)
	}
	return nil, ""
}

func (g *group) method(m string) *tree {
	for i := range g.methods {
		if g.methods[i].method == m {
			return g.methods[i].tree
		}
	}
	return nil
}

// match tries the routes with the request's verb on the stripped path, then the
// routes without a verb on the full path.
func (t *tree) match(full, stripped, verb string, h map[string][]string) (*route, string) {
	if verb != "" {
		for i := range t.verbs {
			if t.verbs[i].verb == verb {
				if r := t.verbs[i].root.match(stripped, 1, h); r != nil {
					return r, stripped
				}
				break
			}
		}
	}
	if t.plain != nil {
		if r := t.plain.match(full, 1, h); r != nil {
			return r, full
		}
	}
	return nil, ""
}

// match returns the preferred route that matches the segments of p from byte i on,
// or nil. i is past len(p) once every segment has been consumed.
func (n *node) match(p string, i int, h map[string][]string) *route {
	if i > len(p) {
		if r := pick(n.leaf, h); r != nil {
			return r
		}
		return pick(n.multi, h)
	}
	// Segments are short: a plain loop beats strings.IndexByte's setup.
	j := i
	for j < len(p) && p[j] != '/' {
		j++
	}
	if c := n.child(p[i:j]); c != nil {
		if r := c.match(p, j+1, h); r != nil {
			return r
		}
	}
	if n.single != nil && j > i {
		if r := n.single.match(p, j+1, h); r != nil {
			return r
		}
	}
	return pick(n.multi, h)
}

// child returns the literal child for seg, or nil.
func (n *node) child(seg string) *node {
	if n.litMap != nil {
		return n.litMap[seg]
	}
	for i, k := range n.keys {
		if k == seg {
			return n.kids[i]
		}
	}
	return nil
}

// pick returns the first of rs whose header matches hold.
func pick(rs []*route, h map[string][]string) *route {
	for _, r := range rs {
		if r.headersMatch(h) {
			return r
		}
	}
	return nil
}

func (r *route) headersMatch(h map[string][]string) bool {
	for i := range r.headers {
		if !r.headers[i].match(h) {
			return false
		}
	}
	return true
}

// splitVerb returns the verb of p and p without ":verb", or "" and p. The verb
// follows the last ':' of the last segment and is not empty. One backward scan
// finds both the segment and the colon.
func splitVerb(p string) (verb, stripped string) {
	colon := -1
	for j := len(p) - 1; j >= 0 && p[j] != '/'; j-- {
		if p[j] == ':' && colon < 0 {
			colon = j
		}
	}
	if colon < 0 || colon+1 == len(p) {
		return "", p
	}
	return p[colon+1:], p[:colon]
}
