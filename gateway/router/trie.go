package router

import "regexp"

// The compiled table is a three-level index: host group, then method, then verb, each
// leading to a segment trie whose nodes hold the routes that end there.
//
// compile builds that trie as a graph of maps and pointers, then freeze lays it out
// in the flat form below and drops the graph. Nodes, routes and candidate lists live
// in a few large slices and refer to each other by int32 index, and every string
// they need (literal segments, variable names, header names and values, methods,
// verbs, hosts) is a span of one string, strs. Those slices hold no pointers, so the
// garbage collector allocates them as noscan and never looks inside: a table of
// thousands of routes is a few dozen objects to it (more only for Regex header
// matches) instead of tens of thousands. A gateway pinned to one core pays for
// every pointer in its live heap on each collection, in its tail latency.
//
// All of it is written by freeze and never again, which is what makes Match safe
// for concurrent use without locks.

// core is the non-generic part of a Table. Index 0 of groups, trees and nodes is an
// empty entry that matches nothing, so that 0 can stand for "none".
type core struct {
	exact map[string]int32 // host → group
	// wild is keyed by the suffix of a wildcard host with its dot: "*.example.com"
	// is ".example.com". minWild and maxWild bound the key lengths, to skip lookups
	// that cannot hit.
	wild             map[string]int32
	minWild, maxWild int
	anyHost          int32 // the group of routes without hosts

	groups  []group
	methods []methodTree // ranges of them sorted by method, one per group
	trees   []tree
	verbs   []verbRoot // ranges of them sorted by verb, one per tree
	nodes   []node

	// slots is an open-addressing hash table, with linear probing, of the literal
	// children of the nodes that have more than maxListChildren of them, keyed by
	// the parent and the segment. Its length is a power of two, at most half of
	// it is used, and slotMask is that length minus one.
	slots    []slot
	slotMask uint64
	seed     uint64

	cands   []int32 // route indexes: the candidate lists of the nodes
	routes  []route // by index in the slice given to New
	params  []param
	headers []header
	regexps []*regexp.Regexp // for the Regex header matches, which are few

	strs string // every string of the table, each once
}

// span is the range [off, off+len) of core.strs or of one of core's slices. (An
// int32 bounds a table at 2 GiB of strings and 2³¹ nodes, far past any route set
// that fits in memory as routes.)
type span struct{ off, len int32 }

// str returns the string s spans in c.strs.
func (c *core) str(s span) string { return c.strs[s.off : s.off+s.len] }

// key is a literal segment of a node, in c.strs. pre holds its first eight bytes,
// or all of a shorter one, as prefix packs them: most keys are short, and compare
// as a word and a length without a look at c.strs.
type key struct {
	pre uint64
	s   span
}

// group holds the routes of one host key.
type group struct {
	// methods are the trees of the routes that list methods, by method, and std
	// those of the standard methods again, by index in stdMethods, to find them
	// without comparing names.
	methods span // of core.methods
	std     [len(stdMethods)]int32
	any     int32 // tree of the routes that list no method
	// listed holds every route of methods together, without regard to method, so
	// that one walk tells whether a request would match under some other method.
	listed int32
}

// stdMethods are the methods of RFC 9110, and PATCH.
var stdMethods = [...]string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}

// methodGET is the index of GET in stdMethods.
const methodGET = 0

// stdMethod returns the index of m in stdMethods, or -1. A switch on constants
// compares words, not calls memequal.
func stdMethod(m string) int {
	switch m {
	case "GET":
		return methodGET
	case "HEAD":
		return 1
	case "POST":
		return 2
	case "PUT":
		return 3
	case "DELETE":
		return 4
	case "CONNECT":
		return 5
	case "OPTIONS":
		return 6
	case "TRACE":
		return 7
	case "PATCH":
		return 8
	}
	return -1
}

type methodTree struct {
	method span
	tree   int32
}

// tree holds the routes of one host key and method.
type tree struct {
	plain int32 // root of the templates without a verb
	verbs span  // of core.verbs
}

type verbRoot struct {
	verb span
	root int32
}

// maxListChildren is the fan-out up to which a node's literal children are found by
// scanning them; above it, by the hash table core.slots.
const maxListChildren = 8

// node is a position in a segment trie: the segments of a path up to here have
// matched.
type node struct {
	key key // the literal segment that leads here from the parent, if any
	// The literal children are nodes[kids : kids+nkids], sorted by key.
	kids, nkids int32
	single      int32 // the child for a single-segment match
	// cands[leaf:multi] are the routes ending here and cands[multi:end] those whose
	// "**" starts here, each in order of preference.
	leaf, multi, end int32
}

// slot is an entry of core.slots: a literal child, 0 if the slot is free, and the
// high half of the hash that placed it there, to skip most comparisons of keys.
type slot struct {
	tag   uint32
	child int32
}

// route is a compiled route. Its index in core.routes is its index in Table.values.
type route struct {
	params  span // of core.params, in template order
	headers span // of core.headers
}

// param is a variable of a compiled route, as Params.bind reads it.
type param struct {
	name span // of core.strs
	// The variable binds the segments [start, end) of the path matched. If multi is
	// set, it ends in "**" and binds the rest of the path.
	start, end int32
	// fromEnd is the number of segments that follow the variable in a template
	// without "**", where it is also their number in any path matched; else -1.
	fromEnd int32
	multi   bool
}

// query is what the walk of a request needs at every level: its path with and
// without the verb, its method and its headers.
type query struct {
	full, stripped, verb, method string
	std                          int // stdMethod(method)
	h                            map[string][]string
}

// init sets q up for req, and reports false if req.Path cannot match.
func (q *query) init(req *Request) bool {
	p := req.Path
	if len(p) == 0 || p[0] != '/' {
		return false
	}
	q.full, q.method, q.h = p, req.Method, req.Header
	q.std = stdMethod(q.method)
	q.verb, q.stripped = splitVerb(p)
	return true
}

// match returns the index of the route for req, or -1, and the path its variables
// bind in: req.Path, or req.Path without its verb.
func (c *core) match(req *Request) (int32, string) {
	var q query
	if !q.init(req) {
		return -1, ""
	}
	for g, k := c.nextGroup(req.Host, 0); g != 0; g, k = c.nextGroup(req.Host, k) {
		if r, path := c.matchGroup(g, &q); r >= 0 {
			return r, path
		}
	}
	return -1, ""
}

// methodNotAllowed reports whether a route listing methods would match req's host,
// path and headers. It is called once match has found nothing, so such a route
// cannot list req.Method (nor GET for HEAD): it would have matched.
func (c *core) methodNotAllowed(req *Request) bool {
	var q query
	if !q.init(req) {
		return false
	}
	for g, k := c.nextGroup(req.Host, 0); g != 0; g, k = c.nextGroup(req.Host, k) {
		if r, _ := c.matchTree(c.groups[g].listed, &q); r >= 0 {
			return true
		}
	}
	return false
}

// allowed returns, unsorted and possibly repeated, the methods under which some
// route listing methods matches req.
func (c *core) allowed(req *Request) []string {
	var q query
	if !q.init(req) {
		return nil
	}
	var ms []string
	for g, k := c.nextGroup(req.Host, 0); g != 0; g, k = c.nextGroup(req.Host, k) {
		gm := c.groups[g].methods
		for _, m := range c.methods[gm.off : gm.off+gm.len] {
			if r, _ := c.matchTree(m.tree, &q); r >= 0 {
				method := c.str(m.method)
				ms = append(ms, method)
				if method == "GET" {
					ms = append(ms, "HEAD")
				}
			}
		}
	}
	return ms
}

// nextGroup returns the first host group for host at or after state k, in order of
// precedence, and the state to resume from; 0 when there are no more. State 0 is
// the exact host; state 1+i looks for a wildcard suffix starting at byte i or later;
// state len(host)+2 is the group of routes without hosts.
func (c *core) nextGroup(host string, k int) (int32, int) {
	if k == 0 {
		k = 1
		if g := c.exact[host]; g != 0 {
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
				if g := c.wild[host[i:]]; g != 0 {
					return g, i + 2
				}
			}
		}
		k = end
	}
	if k == end && c.anyHost != 0 {
		return c.anyHost, k + 1
	}
	return 0, k + 1
}

// matchGroup tries the method tables of group g in order of precedence.
func (c *core) matchGroup(g int32, q *query) (int32, string) {
	gr := &c.groups[g]
	t := int32(0)
	if q.std >= 0 {
		t = gr.std[q.std]
	} else {
		t = c.method(gr, q.method)
	}
	if t != 0 {
		if r, p := c.matchTree(t, q); r >= 0 {
			return r, p
		}
	}
	if q.method == "HEAD" {
		if t := gr.std[methodGET]; t != 0 {
			if r, p := c.matchTree(t, q); r >= 0 {
				return r, p
			}
		}
	}
	return c.matchTree(gr.any, q)
}

// method returns the tree of group gr for method m, or 0.
func (c *core) method(gr *group, m string) int32 {
	for i := gr.methods.off; i < gr.methods.off+gr.methods.len; i++ {
		if mt := &c.methods[i]; int(mt.method.len) == len(m) && c.str(mt.method) == m {
			return mt.tree
		}
	}
	return 0
}

// matchTree tries the routes of tree t with the request's verb on the stripped
// path, then the routes without a verb on the full path.
func (c *core) matchTree(t int32, q *query) (int32, string) {
	tr := &c.trees[t]
	if q.verb != "" {
		for i := tr.verbs.off; i < tr.verbs.off+tr.verbs.len; i++ {
			if v := &c.verbs[i]; int(v.verb.len) == len(q.verb) && c.str(v.verb) == q.verb {
				if r := c.matchNode(&c.nodes[v.root], q.stripped, 1, q.h); r >= 0 {
					return r, q.stripped
				}
				break
			}
		}
	}
	if tr.plain != 0 {
		if r := c.matchNode(&c.nodes[tr.plain], q.full, 1, q.h); r >= 0 {
			return r, q.full
		}
	}
	return -1, ""
}

// matchNode returns the preferred route that matches the segments of p from byte i
// on, starting at node nd, or -1. i is past len(p) once every segment has been
// consumed.
func (c *core) matchNode(nd *node, p string, i int, h map[string][]string) int32 {
	if i > len(p) {
		if r := c.pick(nd.leaf, nd.multi, h); r >= 0 {
			return r
		}
		return c.pick(nd.multi, nd.end, h)
	}
	// Segments are short: a plain loop beats strings.IndexByte's setup.
	j := i
	for j < len(p) && p[j] != '/' {
		j++
	}
	if nd.nkids > 0 {
		// The literal child for the segment: few are scanned, many looked up.
		seg, k := p[i:j], (*node)(nil)
		var pre uint64
		if i+8 <= len(p) {
			// As prefix(seg), cheaper: seg is followed by enough of p to read a
			// word, and drop the bytes past seg.
			pre = le64(p[i:])
			if len(seg) < 8 {
				pre &= 1<<(8*len(seg)) - 1
			}
		} else {
			pre = prefix(seg)
		}
		if nd.nkids <= maxListChildren {
			for x := nd.kids; x < nd.kids+nd.nkids; x++ {
				if kid := &c.nodes[x]; c.is(&kid.key, seg, pre) {
					k = kid
					break
				}
			}
		} else {
			k = c.lookup(nd, seg, pre)
		}
		if k != nil {
			if r := c.matchNode(k, p, j+1, h); r >= 0 {
				return r
			}
		}
	}
	if nd.single != 0 && j > i {
		if r := c.matchNode(&c.nodes[nd.single], p, j+1, h); r >= 0 {
			return r
		}
	}
	return c.pick(nd.multi, nd.end, h)
}

// is reports whether k is s, whose prefix is pre.
func (c *core) is(k *key, s string, pre uint64) bool {
	return k.pre == pre && int(k.s.len) == len(s) && (len(s) <= 8 || c.str(k.s)[8:] == s[8:])
}

// lookup finds the literal child for seg, whose prefix is pre, of node nd in
// c.slots, or returns nil. The hash takes nd.kids for nd, as no other node's
// children start there. A slot whose tag matches is checked to hold one of nd's
// children, then to have the key: the hash of another node's child can collide.
func (c *core) lookup(nd *node, seg string, pre uint64) *node {
	h := hashKey(c.seed, nd.kids, seg, pre)
	tag := uint32(h >> 32)
	slots, mask := c.slots, c.slotMask
	for i := h & mask; ; i = (i + 1) & mask {
		s := slots[i]
		if s.child == 0 {
			return nil
		}
		if s.tag == tag && uint32(s.child-nd.kids) < uint32(nd.nkids) {
			if kid := &c.nodes[s.child]; c.is(&kid.key, seg, pre) {
				return kid
			}
		}
	}
}

// pick returns the first route of cands[from:to] whose header matches hold, or -1.
func (c *core) pick(from, to int32, h map[string][]string) int32 {
	for ; from < to; from++ {
		r := c.cands[from]
		if hs := c.routes[r].headers; hs.len == 0 || c.headersHold(hs, h) {
			return r
		}
	}
	return -1
}

// headersHold reports whether all the header matches hs of c.headers hold for h.
func (c *core) headersHold(hs span, h map[string][]string) bool {
	for i := hs.off; i < hs.off+hs.len; i++ {
		if !c.headerHolds(&c.headers[i], h) {
			return false
		}
	}
	return true
}

// hashKey hashes the segment s, whose prefix is pre, of a literal child of the
// node whose children start at nodes[kids], for core.slots. It reads the bytes
// after the prefix eight at a time, the last word overlapping the one before: two
// multiplications per word mix them well enough for keys that freeze spreads over
// a table at most half full, and seed lets freeze draw again if a set of keys
// clusters anyway.
func hashKey(seed uint64, kids int32, s string, pre uint64) uint64 {
	const (
		m1 = 0x9e3779b97f4a7c15
		m2 = 0xbf58476d1ce4e5b9
		m3 = 0x94d049bb133111eb
	)
	h := seed ^ (uint64(uint32(kids))<<32|uint64(len(s)))*m1
	h = (h ^ pre) * m2
	h ^= h >> 31
	if len(s) > 8 {
		for t := s[8:]; len(t) > 8; t = t[8:] {
			h = (h ^ le64(t)) * m2
			h ^= h >> 31
		}
		h = (h ^ le64(s[len(s)-8:])) * m2
		h ^= h >> 31
	}
	h *= m3
	h ^= h >> 32
	return h
}

// prefix packs the first eight bytes of s into a word, or all the bytes of a
// shorter s, the first in the low byte and zeros above the last: two strings of
// the same length, at most eight, are equal if and only if their prefixes are.
func prefix(s string) uint64 {
	if len(s) >= 8 {
		return le64(s)
	}
	var w uint64
	for i := len(s) - 1; i >= 0; i-- {
		w = w<<8 | uint64(s[i])
	}
	return w
}

// le64 returns the first eight bytes of s as a little-endian word, which the
// compiler reads with one load.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
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
