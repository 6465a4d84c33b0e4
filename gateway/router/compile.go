package router

import (
	"fmt"
	"strconv"
	"strings"
)

// compiled is a route that passed validation, with what building the trie needs.
type compiled struct {
	id      string
	index   int
	tmpl    *template
	hosts   []string // deduplicated; empty for any host
	methods []string // deduplicated; empty for any method
	headers []headerMatcher
	hkey    string // identifies the header set, for ambiguity checks
	ok      bool   // false if the route has a problem; the rest is then unset
}

// buildGroup, buildTree and buildNode are the trie while compile adds routes to it,
// laid out for adding; freeze then lays it out for matching, as a core.
type buildGroup struct {
	methods map[string]*buildTree
	any     *buildTree
	listed  *buildTree
}

type buildTree struct {
	plain *buildNode
	verbs map[string]*buildNode
}

type buildNode struct {
	lits   map[string]*buildNode
	single *buildNode
	leaf   []*compiled // routes ending here
	multi  []*compiled // routes whose "**" starts here
}

// compiler accumulates problems and the trie while routes are added.
type compiler struct {
	problems []*Problem
	groups   map[string]*buildGroup // by host key; "" for any host
	reported map[[2]int]bool        // ambiguous pairs already reported
	// What freeze will need room for.
	methods, trees, verbs, nodes, cands int
}

func compile(specs []routeSpec) (core, error) {
	cp := &compiler{groups: map[string]*buildGroup{}, reported: map[[2]int]bool{}}
	routes := cp.validate(specs)
	for i := range routes {
		if routes[i].ok {
			cp.add(&routes[i])
		}
	}
	if len(cp.problems) > 0 {
		return core{}, &CompileError{Problems: cp.problems}
	}
	return freeze(cp, routes), nil
}

func (cp *compiler) problem(kind ProblemKind, idx []int, ids []string, err error, format string, args ...any) {
	cp.problems = append(cp.problems, &Problem{
		Kind:    kind,
		Routes:  ids,
		Indexes: idx,
		Message: fmt.Sprintf(format, args...),
		Err:     err,
	})
}

// validate checks each route on its own and returns them compiled; a route with a
// problem is left with ok unset.
func (cp *compiler) validate(specs []routeSpec) []compiled {
	out := make([]compiled, len(specs))
	firstIndex := make(map[string]int, len(specs))
	for i := range specs {
		s := &specs[i]
		ok := true
		name := strconv.Quote(s.ID)
		switch first, dup := firstIndex[s.ID]; {
		case s.ID == "":
			name = "#" + strconv.Itoa(i)
			cp.problem(MissingID, []int{i}, []string{""}, nil, "route %s has no id", name)
			ok = false
		case dup:
			cp.problem(DuplicateID, []int{first, i}, []string{s.ID, s.ID}, nil,
				"routes #%d and #%d have the same id %q", first, i, s.ID)
			ok = false
		default:
			firstIndex[s.ID] = i
		}

		tmpl, err := parseTemplate(s.Path)
		if err != nil {
			cp.problem(InvalidTemplate, []int{i}, []string{s.ID}, err, "route %s: %v", name, err)
			ok = false
		} else if len(tmpl.vars) > MaxParams {
			cp.problem(TooManyVariables, []int{i}, []string{s.ID}, nil,
				"route %s: path template %q has %d variables, more than the %d a match can bind",
				name, s.Path, len(tmpl.vars), MaxParams)
			ok = false
		}

		hosts := dedup(s.Hosts)
		for _, h := range hosts {
			if reason := checkHost(h); reason != "" {
				cp.problem(InvalidHost, []int{i}, []string{s.ID}, nil, "route %s: host %q %s", name, h, reason)
				ok = false
			}
		}
		methods := dedup(s.Methods)
		for _, m := range methods {
			if reason := checkMethod(m); reason != "" {
				cp.problem(InvalidMethod, []int{i}, []string{s.ID}, nil, "route %s: method %q %s", name, m, reason)
				ok = false
			}
		}
		headers, errs := compileHeaders(s.Headers)
		for _, err := range errs {
			cp.problem(InvalidHeader, []int{i}, []string{s.ID}, err, "route %s: %v", name, err)
			ok = false
		}
		if !ok {
			continue
		}
		out[i] = compiled{
			id:      s.ID,
			index:   i,
			tmpl:    tmpl,
			hosts:   hosts,
			methods: methods,
			headers: headers,
			hkey:    headerSetKey(headers),
			ok:      true,
		}
	}
	return out
}

func checkHost(h string) string {
	if h == "" {
		return "is empty"
	}
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case 'A' <= c && c <= 'Z':
			return "is not lowercase"
		case c <= ' ' || c == 0x7f || c == '/':
			return fmt.Sprintf("has invalid byte %q", c)
		case c == '*' && (i != 0 || len(h) < 3 || h[1] != '.'):
			return `has a '*' that is not a leading "*." before a suffix`
		}
	}
	return ""
}

func checkMethod(m string) string {
	if !isToken(m) {
		return "is not a token"
	}
	if strings.ToUpper(m) != m {
		return "is not uppercase"
	}
	return ""
}

// dedup returns ss without repeats, in order.
func dedup(ss []string) []string {
	var out []string
	for i, s := range ss {
		seen := false
		for _, t := range ss[:i] {
			if s == t {
				seen = true
				break
			}
		}
		if !seen {
			out = append(out, s)
		}
	}
	return out
}

// add inserts a validated route into the tree of every host and method it lists.
func (cp *compiler) add(rt *compiled) {
	hosts := rt.hosts
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	methods := rt.methods
	if len(methods) == 0 {
		methods = []string{""}
	}
	for _, h := range hosts {
		g := cp.group(h)
		for _, m := range methods {
			t := cp.tree(g, m)
			root := cp.root(t, rt.tmpl.verb)
			cp.insert(root, rt, h, m, true)
		}
		if len(rt.methods) > 0 {
			if g.listed == nil {
				g.listed = cp.newTree()
			}
			cp.insert(cp.root(g.listed, rt.tmpl.verb), rt, h, "", false)
		}
	}
}

func (cp *compiler) group(host string) *buildGroup {
	g := cp.groups[host]
	if g == nil {
		g = &buildGroup{}
		cp.groups[host] = g
	}
	return g
}

func (cp *compiler) tree(g *buildGroup, method string) *buildTree {
	if method == "" {
		if g.any == nil {
			g.any = cp.newTree()
		}
		return g.any
	}
	t := g.methods[method]
	if t == nil {
		t = cp.newTree()
		cp.methods++
		if g.methods == nil {
			g.methods = map[string]*buildTree{}
		}
		g.methods[method] = t
	}
	return t
}

func (cp *compiler) newTree() *buildTree {
	cp.trees++
	return &buildTree{}
}

func (cp *compiler) root(t *buildTree, verb string) *buildNode {
	if verb == "" {
		if t.plain == nil {
			t.plain = cp.newNode()
		}
		return t.plain
	}
	n := t.verbs[verb]
	if n == nil {
		n = cp.newNode()
		cp.verbs++
		if t.verbs == nil {
			t.verbs = map[string]*buildNode{}
		}
		t.verbs[verb] = n
	}
	return n
}

func (cp *compiler) newNode() *buildNode {
	cp.nodes++
	return &buildNode{}
}

// insert walks the route's segments from root, creating nodes, and adds it to the
// candidates where it ends, reporting any candidate it is ambiguous with if check
// is set.
func (cp *compiler) insert(root *buildNode, rt *compiled, host, method string, check bool) {
	n := root
	for _, s := range rt.tmpl.segs {
		switch s.kind {
		case segLiteral:
			c := n.lits[s.lit]
			if c == nil {
				c = cp.newNode()
				if n.lits == nil {
					n.lits = map[string]*buildNode{}
				}
				n.lits[s.lit] = c
			}
			n = c
		case segSingle:
			if n.single == nil {
				n.single = cp.newNode()
			}
			n = n.single
		case segMulti:
			// "**" is always last: the route is a candidate at n.
			n.multi = cp.candidate(n.multi, rt, host, method, check)
			return
		}
	}
	n.leaf = cp.candidate(n.leaf, rt, host, method, check)
}

func (cp *compiler) candidate(list []*compiled, r *compiled, host, method string, check bool) []*compiled {
	cp.cands++
	if !check {
		return append(list, r)
	}
	for _, o := range list {
		if o.hkey != r.hkey {
			continue
		}
		pair := [2]int{o.index, r.index}
		if cp.reported[pair] {
			continue
		}
		cp.reported[pair] = true
		hostDesc, methodDesc := "(any)", "(any)"
		if host != "" {
			hostDesc = strconv.Quote(host)
		}
		if method != "" {
			methodDesc = method
		}
		msg := fmt.Sprintf("routes %q and %q are ambiguous: same host %s, method %s and path shape %s",
			o.id, r.id, hostDesc, methodDesc, r.tmpl.shape())
		if len(r.headers) > 0 {
			var hs []string
			for i := range r.headers {
				hs = append(hs, r.headers[i].String())
			}
			msg += " and header matches [" + strings.Join(hs, ", ") + "]"
		}
		cp.problem(Ambiguous, []int{o.index, r.index}, []string{o.id, r.id}, nil, "%s", msg)
	}
	return append(list, r)
}
