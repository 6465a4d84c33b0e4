package router

import (
	"fmt"
	"net/textproto"
	"regexp"
	"sort"
	"strings"
)

// headerMatcher is a checked and canonicalised HeaderMatch, as compile handles it;
// freeze turns it into a header.
type headerMatcher struct {
	name   string // canonical
	kind   MatchKind
	value  string // "" for Present
	invert bool
	re     *regexp.Regexp // for Regex, anchored
}

// header is a compiled HeaderMatch as Match reads it, with its strings in
// core.strs and its expression in core.regexps.
type header struct {
	name   span  // canonical
	value  span  // empty for Present
	re     int32 // of core.regexps, for Regex
	kind   MatchKind
	invert bool
}

// headerHolds reports whether m holds for h. It does not allocate: the lookup uses
// the canonical key directly, as http.Header.Get would not guarantee.
func (c *core) headerHolds(m *header, h map[string][]string) bool {
	vals := h[c.str(m.name)]
	found := false
	switch m.kind {
	case Present:
		found = len(vals) > 0
	case Exact:
		value := c.str(m.value)
		for _, v := range vals {
			if v == value {
				found = true
				break
			}
		}
	case Prefix:
		value := c.str(m.value)
		for _, v := range vals {
			if strings.HasPrefix(v, value) {
				found = true
				break
			}
		}
	case Regex:
		re := c.regexps[m.re]
		for _, v := range vals {
			if re.MatchString(v) {
				found = true
				break
			}
		}
	}
	return found != m.invert
}

// String renders the matcher for error messages, such as `X-Version exact "2"`.
func (m *headerMatcher) String() string {
	s := m.name
	if m.invert {
		s += " not"
	}
	s += " " + m.kind.String()
	if m.kind != Present {
		s += fmt.Sprintf(" %q", m.value)
	}
	return s
}

// compileHeaders checks, canonicalises and de-duplicates hs, sorted so that equal
// sets compare equal. It returns one error per invalid match.
func compileHeaders(hs []HeaderMatch) ([]headerMatcher, []error) {
	var (
		out  []headerMatcher
		errs []error
	)
	for i, h := range hs {
		m := headerMatcher{name: textproto.CanonicalMIMEHeaderKey(h.Name), kind: h.Kind, value: h.Value, invert: h.Invert}
		switch {
		case h.Name == "":
			errs = append(errs, fmt.Errorf("header match %d: empty header name", i))
			continue
		case !isToken(h.Name):
			errs = append(errs, fmt.Errorf("header match %d: invalid header name %q", i, h.Name))
			continue
		}
		switch h.Kind {
		case Exact, Prefix:
		case Present:
			m.value = ""
		case Regex:
			re, err := regexp.Compile(`^(?:` + h.Value + `)$`)
			if err != nil {
				errs = append(errs, fmt.Errorf("header match %d (%s): invalid regex: %w", i, m.name, err))
				continue
			}
			m.re = re
		default:
			errs = append(errs, fmt.Errorf("header match %d (%s): unknown match kind %d", i, m.name, h.Kind))
			continue
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return headerLess(&out[i], &out[j]) })
	dedup := out[:0]
	for _, m := range out {
		if n := len(dedup); n > 0 && headerKey(&dedup[n-1]) == headerKey(&m) {
			continue
		}
		dedup = append(dedup, m)
	}
	return dedup, errs
}

func headerLess(a, b *headerMatcher) bool {
	if a.name != b.name {
		return a.name < b.name
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	if a.invert != b.invert {
		return !a.invert
	}
	return a.value < b.value
}

type headerIdent struct {
	name   string
	kind   MatchKind
	value  string
	invert bool
}

func headerKey(m *headerMatcher) headerIdent {
	return headerIdent{m.name, m.kind, m.value, m.invert}
}

// headerSetKey identifies a sorted, de-duplicated header set.
func headerSetKey(ms []headerMatcher) string {
	var b strings.Builder
	for i := range ms {
		m := &ms[i]
		fmt.Fprintf(&b, "%s\x00%d\x00%t\x00%s\x00", m.name, m.kind, m.invert, m.value)
	}
	return b.String()
}

// isToken reports whether s is an RFC 9110 token, as a header name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
