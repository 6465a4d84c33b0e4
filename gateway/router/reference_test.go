package router_test

import (
	"net/textproto"
	"regexp"
	"slices"
	"strings"

	"github.com/portico-gw/portico/gateway/router"
)

// This file holds a slow matcher written straight from the declarative statement of
// the rules in the package comment, sharing no code with the package: its own
// template reader, path splitting and header matching. Tests compare the Table
// against it.

// Segment kinds in order of precedence; refEnd ("the path ended here") is lowest.
const (
	refEnd = iota - 1
	refLiteral
	refSingle
	refMulti
)

type refSeg struct {
	kind int
	lit  string
}

type refVar struct {
	name       string
	start, end int // segments [start, end)
}

type refTemplate struct {
	segs []refSeg
	vars []refVar
	verb string
}

// refParse reads a template that New accepted.
func refParse(tmpl string) refTemplate {
	var t refTemplate
	body := tmpl[1:]
	if i := strings.LastIndexByte(body, ':'); i >= 0 {
		body, t.verb = body[:i], body[i+1:]
	}
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '{':
			depth++
		case '}':
			depth--
		case '/':
			if depth == 0 {
				parts = append(parts, body[start:i])
				start = i + 1
			}
		}
	}
	parts = append(parts, body[start:])
	for _, part := range parts {
		if !strings.HasPrefix(part, "{") {
			t.segs = append(t.segs, refSegment(part))
			continue
		}
		name, pattern, ok := strings.Cut(part[1:len(part)-1], "=")
		if !ok {
			pattern = "*"
		}
		v := refVar{name: name, start: len(t.segs)}
		for _, s := range strings.Split(pattern, "/") {
			t.segs = append(t.segs, refSegment(s))
		}
		v.end = len(t.segs)
		t.vars = append(t.vars, v)
	}
	return t
}

func refSegment(s string) refSeg {
	switch s {
	case "*":
		return refSeg{kind: refSingle}
	case "**":
		return refSeg{kind: refMulti}
	}
	return refSeg{kind: refLiteral, lit: s}
}

// match returns the kind sequence by which t matches the path segments, ending in
// refEnd, and the variable bindings.
func (t *refTemplate) match(segs []string) (kinds []int, params [][2]string, ok bool) {
	for k, s := range t.segs {
		kinds = append(kinds, s.kind)
		if s.kind == refMulti {
			break // always last; matches whatever is left, even nothing
		}
		if k >= len(segs) {
			return nil, nil, false
		}
		if s.kind == refLiteral && segs[k] != s.lit || s.kind == refSingle && segs[k] == "" {
			return nil, nil, false
		}
	}
	last := t.segs[len(t.segs)-1]
	if last.kind != refMulti && len(t.segs) != len(segs) {
		return nil, nil, false
	}
	kinds = append(kinds, refEnd)
	for _, v := range t.vars {
		end := v.end
		if t.segs[v.end-1].kind == refMulti {
			end = len(segs)
		}
		val := ""
		if v.start < end {
			val = strings.Join(segs[v.start:end], "/")
		}
		params = append(params, [2]string{v.name, val})
	}
	return kinds, params, true
}

type refHeader struct {
	name, value string
	kind        router.MatchKind
	invert      bool
}

type refRoute struct {
	id      string
	hosts   []string
	methods []string
	tmpl    refTemplate
	headers []refHeader // distinct
}

func newRefRoutes(routes []router.Route[string]) []refRoute {
	var out []refRoute
	for _, r := range routes {
		rr := refRoute{id: r.ID, hosts: r.Hosts, methods: r.Methods, tmpl: refParse(r.Path)}
		for _, h := range r.Headers {
			rh := refHeader{name: textproto.CanonicalMIMEHeaderKey(h.Name), value: h.Value, kind: h.Kind, invert: h.Invert}
			if rh.kind == router.Present {
				rh.value = ""
			}
			if !slices.Contains(rr.headers, rh) {
				rr.headers = append(rr.headers, rh)
			}
		}
		out = append(out, rr)
	}
	return out
}

func (h refHeader) holds(hdr map[string][]string) bool {
	found := false
	for _, v := range hdr[h.name] {
		switch h.kind {
		case router.Exact:
			found = found || v == h.value
		case router.Prefix:
			found = found || strings.HasPrefix(v, h.value)
		case router.Regex:
			found = found || regexp.MustCompile(`^(?:`+h.value+`)$`).MatchString(v)
		case router.Present:
			found = true
		}
	}
	return found != h.invert
}

func (r *refRoute) headersHold(hdr map[string][]string) bool {
	for _, h := range r.headers {
		if !h.holds(hdr) {
			return false
		}
	}
	return true
}

// refResult is what the reference decides for one request.
type refResult struct {
	id      string
	status  router.Status
	params  [][2]string
	allowed []string
}

// refMatch decides req against routes by the declarative rules.
func refMatch(routes []refRoute, req router.Request) refResult {
	if !strings.HasPrefix(req.Path, "/") {
		return refResult{status: router.NotFound}
	}
	full := strings.Split(req.Path[1:], "/")
	var verb string
	var stripped []string
	lastSeg := full[len(full)-1]
	if i := strings.LastIndexByte(lastSeg, ':'); i >= 0 && i+1 < len(lastSeg) {
		verb = lastSeg[i+1:]
		stripped = append(slices.Clone(full[:len(full)-1]), lastSeg[:i])
	}

	// Host keys in order of precedence: exact, wildcards longest first, none ("").
	hostKeys := []string{req.Host}
	for i := 1; i < len(req.Host); i++ {
		if req.Host[i] == '.' {
			hostKeys = append(hostKeys, "*"+req.Host[i:])
		}
	}
	hostKeys = append(hostKeys, "")
	methodKeys := []string{req.Method}
	if req.Method == "HEAD" {
		methodKeys = append(methodKeys, "GET")
	}
	methodKeys = append(methodKeys, "")
	type phase struct {
		verb string
		segs []string
	}
	phases := []phase{{"", full}}
	if verb != "" {
		phases = []phase{{verb, stripped}, {"", full}}
	}

	for _, hk := range hostKeys {
		for _, mk := range methodKeys {
			for _, ph := range phases {
				var best *refRoute
				var bestKinds []int
				var bestParams [][2]string
				for i := range routes {
					r := &routes[i]
					if !listsOrEmpty(r.hosts, hk) || !listsOrEmpty(r.methods, mk) || r.tmpl.verb != ph.verb {
						continue
					}
					kinds, params, ok := r.tmpl.match(ph.segs)
					if !ok || !r.headersHold(req.Header) {
						continue
					}
					if best == nil || refBetter(kinds, r, bestKinds, best) {
						best, bestKinds, bestParams = r, kinds, params
					}
				}
				if best != nil {
					return refResult{id: best.id, status: router.Matched, params: bestParams}
				}
			}
		}
	}

	// No match: which methods would have matched?
	res := refResult{status: router.NotFound}
	for i := range routes {
		r := &routes[i]
		if len(r.methods) == 0 || !refHostMatches(r.hosts, req.Host) || !r.headersHold(req.Header) {
			continue
		}
		segs := full
		if r.tmpl.verb != "" {
			if r.tmpl.verb != verb {
				continue
			}
			segs = stripped
		}
		if _, _, ok := r.tmpl.match(segs); !ok {
			continue
		}
		for _, m := range r.methods {
			res.allowed = append(res.allowed, m)
			if m == "GET" {
				res.allowed = append(res.allowed, "HEAD")
			}
		}
	}
	if len(res.allowed) > 0 {
		res.status = router.MethodNotAllowed
		slices.Sort(res.allowed)
		res.allowed = slices.Compact(res.allowed)
	}
	return res
}

// listsOrEmpty reports whether list contains key, or, for key "", is empty.
func listsOrEmpty(list []string, key string) bool {
	if key == "" {
		return len(list) == 0
	}
	return slices.Contains(list, key)
}

func refHostMatches(hosts []string, host string) bool {
	if len(hosts) == 0 {
		return true
	}
	for _, h := range hosts {
		if h == host {
			return true
		}
		if suffix, ok := strings.CutPrefix(h, "*"); ok && len(host) > len(suffix) && strings.HasSuffix(host, suffix) {
			return true
		}
	}
	return false
}

// refBetter reports whether route a, matching with kinds ka, beats route b.
func refBetter(ka []int, a *refRoute, kb []int, b *refRoute) bool {
	if c := slices.Compare(ka, kb); c != 0 {
		return c < 0
	}
	if len(a.headers) != len(b.headers) {
		return len(a.headers) > len(b.headers)
	}
	return a.id < b.id
}

// refAmbiguous returns the pairs of route indexes that New must reject as ambiguous.
func refAmbiguous(routes []refRoute) [][2]int {
	var pairs [][2]int
	for j := range routes {
		for i := 0; i < j; i++ {
			a, b := &routes[i], &routes[j]
			if overlap(a.hosts, b.hosts) && overlap(a.methods, b.methods) &&
				refShape(&a.tmpl) == refShape(&b.tmpl) && sameSet(a.headers, b.headers) {
				pairs = append(pairs, [2]int{i, j})
			}
		}
	}
	return pairs
}

func overlap(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == 0 && len(b) == 0
	}
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func refShape(t *refTemplate) string {
	var b strings.Builder
	for _, s := range t.segs {
		b.WriteString("/")
		switch s.kind {
		case refLiteral:
			b.WriteString(s.lit)
		case refSingle:
			b.WriteString("*")
		case refMulti:
			b.WriteString("**")
		}
	}
	return b.String() + ":" + t.verb
}

func sameSet(a, b []refHeader) bool {
	if len(a) != len(b) {
		return false
	}
	for _, h := range a {
		if !slices.Contains(b, h) {
			return false
		}
	}
	return true
}
