package router

import (
	"sort"
	"strings"
)

// freezer lays out a built trie as a core.
type freezer struct {
	c     core
	strs  strings.Builder
	spans map[string]span // the strings in strs so far
	// hashed is the number of literal children of the nodes that have more than
	// maxListChildren of them.
	hashed int
}

// freeze lays out the trie cp has built, and the routes in it, as a core that
// refers to none of them: once compile returns they are garbage, and what stays
// is a few slices without pointers, one string, the host maps and the regexps.
// Every slice is allocated at its final size, so none keeps spare capacity.
func freeze(cp *compiler, routes []compiled) core {
	f := &freezer{spans: map[string]span{}}
	c := &f.c
	c.groups = make([]group, 1, 1+len(cp.groups))
	c.methods = make([]methodTree, 0, cp.methods)
	c.trees = make([]tree, 1, 1+cp.trees)
	c.verbs = make([]verbRoot, 0, cp.verbs)
	c.nodes = make([]node, 1, 1+cp.nodes)
	c.cands = make([]int32, 0, cp.cands)

	// Groups are numbered in the order of their host keys, so that compiling the
	// same routes twice gives the same table.
	hosts := sortedKeys(cp.groups)
	hostStrs := make([]span, len(hosts))
	for i, h := range hosts {
		hostStrs[i] = f.str(h)
		g := f.group(cp.groups[h])
		c.groups = append(c.groups, g)
	}
	f.routes(routes)
	c.strs = strings.Clone(f.strs.String())

	for i, h := range hosts {
		g := int32(1 + i)
		switch {
		case h == "":
			c.anyHost = g
		case h[0] == '*':
			suffix := c.str(hostStrs[i])[1:]
			if c.wild == nil {
				c.wild = map[string]int32{}
			}
			c.wild[suffix] = g
			if c.minWild == 0 || len(suffix) < c.minWild {
				c.minWild = len(suffix)
			}
			c.maxWild = max(c.maxWild, len(suffix))
		default:
			if c.exact == nil {
				c.exact = map[string]int32{}
			}
			c.exact[c.str(hostStrs[i])] = g
		}
	}
	f.hashChildren()
	return f.c
}

// str returns the span of s in the table's strings, adding s if it is not there.
func (f *freezer) str(s string) span {
	if sp, ok := f.spans[s]; ok {
		return sp
	}
	sp := span{off: int32(f.strs.Len()), len: int32(len(s))}
	f.strs.WriteString(s)
	f.spans[s] = sp
	return sp
}

// key returns s as the key of a node.
func (f *freezer) key(s string) key { return key{pre: prefix(s), s: f.str(s)} }

func (f *freezer) group(bg *buildGroup) group {
	c := &f.c
	methods := sortedKeys(bg.methods)
	g := group{methods: span{off: int32(len(c.methods)), len: int32(len(methods))}}
	for _, m := range methods {
		mt := methodTree{method: f.str(m), tree: f.tree(bg.methods[m])}
		c.methods = append(c.methods, mt)
		if i := stdMethod(m); i >= 0 {
			g.std[i] = mt.tree
		}
	}
	g.any = f.tree(bg.any)
	g.listed = f.tree(bg.listed)
	return g
}

// tree places bt and returns its index, or 0 for none.
func (f *freezer) tree(bt *buildTree) int32 {
	if bt == nil {
		return 0
	}
	c := &f.c
	verbs := sortedKeys(bt.verbs)
	t := tree{plain: f.root(bt.plain), verbs: span{off: int32(len(c.verbs)), len: int32(len(verbs))}}
	for _, v := range verbs {
		vr := verbRoot{verb: f.str(v), root: f.root(bt.verbs[v])}
		c.verbs = append(c.verbs, vr)
	}
	c.trees = append(c.trees, t)
	return int32(len(c.trees) - 1)
}

// root places the trie under bn and returns the index of its root, or 0 for none.
func (f *freezer) root(bn *buildNode) int32 {
	if bn == nil {
		return 0
	}
	n := int32(len(f.c.nodes))
	f.c.nodes = append(f.c.nodes, node{})
	f.place(n, bn)
	return n
}

// place fills in node n from bn and places what lies under it. The children of n
// go together in one block, the literal ones sorted by key and then the single
// one, as Match looks at them in turn; then the block of each child in that order.
func (f *freezer) place(n int32, bn *buildNode) {
	c := &f.c
	keys := sortedKeys(bn.lits)
	nd := node{key: c.nodes[n].key, kids: int32(len(c.nodes)), nkids: int32(len(keys))}
	for _, k := range keys {
		c.nodes = append(c.nodes, node{key: f.key(k)})
	}
	if bn.single != nil {
		nd.single = int32(len(c.nodes))
		c.nodes = append(c.nodes, node{})
	}
	if len(keys) > maxListChildren {
		f.hashed += len(keys)
	}
	nd.leaf = int32(len(c.cands))
	c.cands = appendCandidates(c.cands, bn.leaf)
	nd.multi = int32(len(c.cands))
	c.cands = appendCandidates(c.cands, bn.multi)
	nd.end = int32(len(c.cands))
	c.nodes[n] = nd

	for i, k := range keys {
		f.place(nd.kids+int32(i), bn.lits[k])
	}
	if bn.single != nil {
		f.place(nd.single, bn.single)
	}
}

// appendCandidates appends the indexes of rs to cands, in order of preference:
// more header matches first, then by ID.
func appendCandidates(cands []int32, rs []*compiled) []int32 {
	sort.Slice(rs, func(i, j int) bool {
		if a, b := len(rs[i].headers), len(rs[j].headers); a != b {
			return a > b
		}
		return rs[i].id < rs[j].id
	})
	for _, r := range rs {
		cands = append(cands, int32(r.index))
	}
	return cands
}

// routes lays out the variables and header matches of every route.
func (f *freezer) routes(routes []compiled) {
	c := &f.c
	var nparams, nheaders int
	for i := range routes {
		nparams += len(routes[i].tmpl.vars)
		nheaders += len(routes[i].headers)
	}
	c.routes = make([]route, len(routes))
	c.params = make([]param, 0, nparams)
	c.headers = make([]header, 0, nheaders)
	for i := range routes {
		rt := &routes[i]
		r := &c.routes[i]
		r.params = span{off: int32(len(c.params)), len: int32(len(rt.tmpl.vars))}
		for _, v := range rt.tmpl.vars {
			c.params = append(c.params, param{
				name:    f.str(v.name),
				start:   int32(v.start),
				end:     int32(v.end),
				fromEnd: int32(v.fromEnd),
				multi:   v.multi,
			})
		}
		r.headers = span{off: int32(len(c.headers)), len: int32(len(rt.headers))}
		for _, m := range rt.headers {
			h := header{name: f.str(m.name), value: f.str(m.value), kind: m.kind, invert: m.invert}
			if m.re != nil {
				h.re = int32(len(c.regexps))
				c.regexps = append(c.regexps, m.re)
			}
			c.headers = append(c.headers, h)
		}
	}
}

const (
	// maxRun is the longest run of used slots hashChildren accepts at once. A
	// lookup, hit or miss, walks at most one run: here, four cache lines. (In a
	// table up to half full, the longest run of a few thousand keys is typically
	// around 20.)
	maxRun = 32
	// seedDraws is how many seeds hashChildren tries before it settles for the
	// best it found.
	seedDraws = 8
)

// hashChildren puts the literal children of the nodes that have more than
// maxListChildren of them in c.slots, with room for twice as many, and draws
// seeds until no run of used slots is longer than maxRun.
func (f *freezer) hashChildren() {
	if f.hashed == 0 {
		return
	}
	c := &f.c
	size := 1
	for size < 2*f.hashed {
		size <<= 1
	}
	c.slotMask = uint64(size - 1)
	best := -1
	for draw := range seedDraws {
		seed := uint64(draw) * 0xd6e8feb86659fd93
		slots := make([]slot, size)
		for n := range c.nodes {
			nd := &c.nodes[n]
			if nd.nkids <= maxListChildren {
				continue
			}
			for k := nd.kids; k < nd.kids+nd.nkids; k++ {
				lit := &c.nodes[k].key
				h := hashKey(seed, nd.kids, c.str(lit.s), lit.pre)
				i := h & c.slotMask
				for slots[i].child != 0 {
					i = (i + 1) & c.slotMask
				}
				slots[i] = slot{tag: uint32(h >> 32), child: k}
			}
		}
		run := longestRun(slots)
		if best < 0 || run < best {
			best, c.slots, c.seed = run, slots, seed
		}
		if run <= maxRun {
			break
		}
	}
}

// longestRun returns the length of the longest run of used slots, wrapping around
// the end. At least one slot is free.
func longestRun(slots []slot) int {
	free := 0
	for slots[free].child != 0 {
		free++
	}
	longest, run := 0, 0
	for i := 1; i <= len(slots); i++ {
		if slots[(free+i)%len(slots)].child != 0 {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
