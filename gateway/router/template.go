package router

import (
	"fmt"
	"strings"
)

// TemplateError reports a path template that does not parse, and where.
type TemplateError struct {
	// Template is the template as given.
	Template string
	// Offset is the byte offset in Template where parsing failed.
	Offset int
	// Reason says what was wrong there.
	Reason string
}

// Error returns the template, the offset and the reason.
func (e *TemplateError) Error() string {
	return fmt.Sprintf("invalid path template %q at offset %d: %s", e.Template, e.Offset, e.Reason)
}

// segKind is the kind of one template segment, in order of precedence.
type segKind uint8

const (
	segLiteral segKind = iota
	segSingle          // "*", or "{x}"
	segMulti           // "**"
)

// segment is one segment of a parsed template.
type segment struct {
	kind segKind
	lit  string // for segLiteral
}

// variable binds the segments [start, end) of a template to name. A variable that
// ends in "**" has multi set and binds the rest of the path.
type variable struct {
	name       string
	start, end int
	multi      bool
	// fromEnd is the number of segments that follow the variable in a template
	// without "**", where it is also their number in any path matched; else -1.
	fromEnd int
}

// template is a parsed path template.
type template struct {
	segs []segment
	vars []variable
	verb string
}

// shape renders the template with variable names dropped, such as "/v1/*/items/**:get".
// Two templates with the same shape match the same paths with the same precedence.
func (t *template) shape() string {
	var b strings.Builder
	for _, s := range t.segs {
		b.WriteByte('/')
		switch s.kind {
		case segLiteral:
			b.WriteString(s.lit)
		case segSingle:
			b.WriteByte('*')
		case segMulti:
			b.WriteString("**")
		}
	}
	if t.verb != "" {
		b.WriteByte(':')
		b.WriteString(t.verb)
	}
	return b.String()
}

// parser parses one template; it records the first error and stops.
type parser struct {
	s   string
	pos int
	t   template
	// multiAt is the offset of the first "**", or -1.
	multiAt  int
	multiSeg int
}

func parseTemplate(s string) (*template, error) {
	p := &parser{s: s, multiAt: -1}
	if err := p.parse(); err != nil {
		return nil, err
	}
	return &p.t, nil
}

func (p *parser) errorf(off int, format string, args ...any) error {
	return &TemplateError{Template: p.s, Offset: off, Reason: fmt.Sprintf(format, args...)}
}

func (p *parser) parse() error {
	if p.s == "" {
		return p.errorf(0, "empty template")
	}
	if p.s[0] != '/' {
		return p.errorf(0, "must start with '/'")
	}
	p.pos = 1
	if err := p.segments(false); err != nil {
		return err
	}
	if p.pos < len(p.s) && p.s[p.pos] == ':' {
		p.pos++
		start := p.pos
		p.literal()
		if p.pos == start {
			return p.want("verb")
		}
		p.t.verb = p.s[start:p.pos]
	}
	if p.pos < len(p.s) {
		return p.errorf(p.pos, "unexpected %q", p.s[p.pos])
	}
	if p.multiAt >= 0 && p.multiSeg != len(p.t.segs)-1 {
		return p.errorf(p.multiAt, "'**' must be the last segment")
	}
	for i := range p.t.vars {
		v := &p.t.vars[i]
		v.fromEnd = -1
		if p.multiAt < 0 {
			v.fromEnd = len(p.t.segs) - v.end
		}
	}
	return nil
}

// segments parses Segments up to a byte that cannot continue them.
func (p *parser) segments(inVar bool) error {
	for {
		if err := p.segment(inVar); err != nil {
			return err
		}
		if p.pos >= len(p.s) || p.s[p.pos] != '/' {
			return nil
		}
		p.pos++
	}
}

func (p *parser) segment(inVar bool) error {
	if p.pos >= len(p.s) {
		return p.want("segment")
	}
	start := p.pos
	switch p.s[p.pos] {
	case '*':
		p.pos++
		if p.pos < len(p.s) && p.s[p.pos] == '*' {
			p.pos++
			if p.multiAt < 0 {
				p.multiAt, p.multiSeg = start, len(p.t.segs)
			}
			p.t.segs = append(p.t.segs, segment{kind: segMulti})
		} else {
			p.t.segs = append(p.t.segs, segment{kind: segSingle})
		}
		if p.pos < len(p.s) && isLiteralByte(p.s[p.pos]) {
			return p.errorf(p.pos, "unexpected %q after '*'", p.s[p.pos])
		}
		return nil
	case '{':
		if inVar {
			return p.errorf(p.pos, "variables must not nest")
		}
		return p.variable()
	}
	p.literal()
	if p.pos == start {
		return p.want("segment")
	}
	lit := p.s[start:p.pos]
	if off, reason := unnormal(lit); reason != "" {
		return p.errorf(start+off, "%s", reason)
	}
	p.t.segs = append(p.t.segs, segment{kind: segLiteral, lit: lit})
	return nil
}

// unnormal says why the literal segment lit can never match a request
// path, and at which offset in it, or returns "" if it can. The gateway
// matches paths after normalising them (gateway/internal/cleanpath): dot
// segments are removed, escapes of unreserved characters decoded, other
// escapes' hex digits uppercased, and paths with an encoded slash,
// backslash or NUL, or with a byte that must be escaped, refused. A
// template written any other way would be accepted and then never match,
// or worse, look as if it guarded a path it does not.
func unnormal(lit string) (int, string) {
	if d := strings.ReplaceAll(strings.ReplaceAll(lit, "%2e", "."), "%2E", "."); d == "." || d == ".." {
		return 0, fmt.Sprintf("the segment %q is a dot segment, which never matches: request paths are normalised, dot segments removed", lit)
	}
	for i := 0; i < len(lit); i++ {
		c := lit[i]
		switch {
		case c >= 0x80:
			return i, fmt.Sprintf("the non-ASCII byte 0x%02X must be percent-encoded (%%%02X): requests carry it encoded", c, c)
		case strings.IndexByte("\\\"<>`|^", c) >= 0:
			return i, fmt.Sprintf("byte %q must be percent-encoded (%%%02X): requests carry it encoded", c, c)
		case c != '%':
			continue
		}
		if i+2 >= len(lit) || !isHex(lit[i+1]) || !isHex(lit[i+2]) {
			return i, "'%' must start a two-digit hex escape"
		}
		v := unhex(lit[i+1])<<4 | unhex(lit[i+2])
		esc := lit[i : i+3]
		switch {
		case isUnreserved(v):
			return i, fmt.Sprintf("write %q as %q: requests are normalised so", esc, string(v))
		case v == '/' || v == '\\' || v == 0:
			return i, fmt.Sprintf("%q never matches: requests with an encoded slash, backslash or NUL are refused", esc)
		case esc != strings.ToUpper(esc):
			return i, fmt.Sprintf("write %q as %q: requests are normalised to uppercase escapes", esc, strings.ToUpper(esc))
		}
		i += 2
	}
	return 0, ""
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// variable parses "{" FieldPath [ "=" Segments ] "}" at p.pos.
func (p *parser) variable() error {
	open := p.pos
	p.pos++ // '{'
	nameAt := p.pos
	for {
		start := p.pos
		for p.pos < len(p.s) && isIdentByte(p.s[p.pos], p.pos == start) {
			p.pos++
		}
		if p.pos == start {
			return p.want("identifier")
		}
		if p.pos >= len(p.s) || p.s[p.pos] != '.' {
			break
		}
		p.pos++
	}
	name := p.s[nameAt:p.pos]
	for _, v := range p.t.vars {
		if v.name == name {
			return p.errorf(nameAt, "duplicate variable %q", name)
		}
	}
	first := len(p.t.segs)
	if p.pos < len(p.s) && p.s[p.pos] == '=' {
		p.pos++
		if err := p.segments(true); err != nil {
			return err
		}
	} else {
		p.t.segs = append(p.t.segs, segment{kind: segSingle})
	}
	if p.pos >= len(p.s) || p.s[p.pos] != '}' {
		if p.pos >= len(p.s) {
			return p.errorf(p.pos, "unclosed variable %q opened at offset %d", name, open)
		}
		return p.errorf(p.pos, "unexpected %q in variable %q", p.s[p.pos], name)
	}
	p.pos++
	v := variable{name: name, start: first, end: len(p.t.segs)}
	v.multi = p.t.segs[v.end-1].kind == segMulti
	p.t.vars = append(p.t.vars, v)
	return nil
}

// literal advances over literal bytes.
func (p *parser) literal() {
	for p.pos < len(p.s) && isLiteralByte(p.s[p.pos]) {
		p.pos++
	}
}

// want reports what was expected at p.pos instead of what is there.
func (p *parser) want(what string) error {
	if p.pos >= len(p.s) {
		return p.errorf(p.pos, "unexpected end, want %s", what)
	}
	return p.errorf(p.pos, "unexpected %q, want %s", p.s[p.pos], what)
}

func isLiteralByte(c byte) bool {
	switch c {
	case '/', '{', '}', '*', ':', '?', '#', 0x7f:
		return false
	}
	return c > ' '
}

func isIdentByte(c byte, first bool) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || !first && '0' <= c && c <= '9'
}

// TemplateVariables parses the path template tpl and returns the names of
// its variables, in order; the error is a *TemplateError.
func TemplateVariables(tpl string) ([]string, error) {
	t, err := parseTemplate(tpl)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(t.vars))
	for i, v := range t.vars {
		names[i] = v.name
	}
	return names, nil
}

// ExamplePath returns a path that the template tpl matches: its literal
// segments as written, every other segment (a variable's wildcards, "*",
// a "**", which then stands for one segment) given seg, and its verb. It
// is what a synthetic probe of a route sends by default. seg must be a
// literal segment; the error is a *TemplateError.
func ExamplePath(tpl, seg string) (string, error) {
	t, err := parseTemplate(tpl)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range t.segs {
		b.WriteByte('/')
		if s.kind == segLiteral {
			b.WriteString(s.lit)
		} else {
			b.WriteString(seg)
		}
	}
	if t.verb != "" {
		b.WriteByte(':')
		b.WriteString(t.verb)
	}
	return b.String(), nil
}
