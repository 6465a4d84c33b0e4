package router

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// compiled is a route that passed validation, with what building the trie needs.
type compiled struct {
	r       *route
	tmpl    *template
	hosts   []string // deduplicated; empty for any host
	methods []string // deduplicated; empty for any method
}

// compiler accumulates problems and the trie while routes are added.
type compiler struct {
	problems []*Problem
	c        core
	groups   map[string]*group // by host key; "" for any host
	reported map[[2]int]bool   // ambiguous pairs already reported
	trees    []*tree
	nodes    []*node
}

func compile(specs []routeSpec) (core, error) {
	cp := &compiler{groups: map[string]*group{}, reported: map[[2]int]bool{}}
	routes := cp.validate(specs)
	for i := range routes {
		if routes[i].r != nil {
			cp.add(&routes[i])
		}
	}
	if len(cp.problems) > 0 {
		return core{}, &CompileError{Problems: cp.problems}
	}
	cp.finish()
	return cp.c, nil
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
// problem is left with a nil r.
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
			r: &route{
				id:      s.ID,
				index:   i,
				vars:    tmpl.vars,
				headers: headers,
				hkey:    headerSetKey(headers),
			},
			tmpl:    tmpl,
			hosts:   hosts,
			methods: methods,
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
				g.listed = &tree{}
				cp.trees = append(cp.trees, g.listed)
			}
			cp.insert(cp.root(g.listed, rt.tmpl.verb), rt, h, "", false)
		}
	}
}

func (cp *compiler) group(host string) *group {
	g := cp.groups[host]
	if g != nil {
		return g
	}
	g = &group{}
	cp.groups[host] = g
	switch {
	case host == "":
		cp.c.anyHost = g
	case host[0] == '*':
		if cp.c.wild == nil {
			cp.c.wild = map[string]*group{}
		}
		cp.c.wild[host[1:]] = g
	default:
		if cp.c.exact == nil {
			cp.c.exact = map[string]*group{}
		}
		cp.c.exact[host] = g
	}
	return g
}

func (cp *compiler) tree(g *group, method string) *tree {
	if method == "" {
		if g.any == nil {
			g.any = &tree{}
			cp.trees = append(cp.trees, g.any)
		}
		return g.any
	}
	if t := g.method(method); t != nil {
		return t
	}
	t := &tree{}
	cp.trees = append(cp.trees, t)
	g.methods = append(g.methods, methodTree{method: method, tree: t})
	return t
}

func (cp *compiler) root(t *tree, verb string) *node {
	if verb == "" {
		if t.plain == nil {
			t.plain = cp.newNode()
		}
		return t.plain
	}
	for _, v := range t.verbs {
		if v.verb == verb {
			return v.root
		}
	}
	n := cp.newNode()
	t.verbs = append(t.verbs, verbRoot{verb: verb, root: n})
	return n
}

func (cp *compiler) newNode() *node {
	n := &node{}
	cp.nodes = append(cp.nodes, n)
	return n
}

// insert walks the route's segments from root, creating nodes, and adds it to the
// candidates where it ends, reporting any candidate it is ambiguous with if check
// is set.
func (cp *compiler) insert(root *node, rt *compiled, host, method string, check bool) {
	n := root
	for _, s := range rt.tmpl.segs {
		switch s.kind {
		case segLiteral:
			c := n.litMap[s.lit]
			if c == nil {
				c = cp.newNode()
				if n.litMap == nil {
					n.litMap = map[string]*node{}
				}
				n.litMap[s.lit] = c
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

func (cp *compiler) candidate(list []*route, rt *compiled, host, method string, check bool) []*route {
	r := rt.r
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
			o.id, r.id, hostDesc, methodDesc, rt.tmpl.shape())
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

// finish puts every node and table in its lookup form.
func (cp *compiler) finish() {
	for _, n := range cp.nodes {
		if len(n.litMap) <= maxListChildren {
			n.keys = make([]string, 0, len(n.litMap))
			for k := range n.litMap {
				n.keys = append(n.keys, k)
			}
			sort.Strings(n.keys)
			n.kids = make([]*node, len(n.keys))
			for i, k := range n.keys {
				n.kids[i] = n.litMap[k]
			}
			n.litMap = nil
		}
		sortCandidates(n.leaf)
		sortCandidates(n.multi)
	}
	for _, t := range cp.trees {
		sort.Slice(t.verbs, func(i, j int) bool { return t.verbs[i].verb < t.verbs[j].verb })
	}
	for _, g := range cp.groups {
		sort.Slice(g.methods, func(i, j int) bool { return g.methods[i].method < g.methods[j].method })
	}
	for k := range cp.c.wild {
		if cp.c.minWild == 0 || len(k) < cp.c.minWild {
			cp.c.minWild = len(k)
		}
		cp.c.maxWild = max(cp.c.maxWild, len(k))
	}
}

// sortCandidates orders routes of the same shape by preference: more header
// matches first, then by ID.
func sortCandidates(rs []*route) {
	sort.Slice(rs, func(i, j int) bool {
		if a, b := len(rs[i].headers), len(rs[j].headers); a != b {
			return a > b
		}
		return rs[i].id < rs[j].id
	})
}
