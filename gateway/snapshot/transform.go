package snapshot

import (
	"fmt"
	"net/textproto"
	"slices"
	"strings"

	"github.com/portico-gw/portico/gateway/router"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// HeaderOps is a compiled HeaderTransform: names canonical, applied in the
// order remove, rename, set, add.
type HeaderOps struct {
	Remove []string
	Rename [][2]string // from, to
	Set    [][2]string // name, value
	Add    [][2]string
}

// Apply edits h, a header map (http.Header).
func (o *HeaderOps) Apply(h map[string][]string) {
	for _, k := range o.Remove {
		delete(h, k)
	}
	for _, r := range o.Rename {
		if v, ok := h[r[0]]; ok {
			delete(h, r[0])
			h[r[1]] = append(h[r[1]], v...)
		}
	}
	for _, s := range o.Set {
		h[s[0]] = []string{s[1]}
	}
	for _, a := range o.Add {
		h[a[0]] = append(h[a[0]], a[1])
	}
}

// Rewrite is a compiled PathRewrite.
type Rewrite struct {
	// from and to replace a literal prefix; or parts build the path, each
	// a literal or (var set) a variable's value.
	from, to string
	parts    []rewritePart
}

type rewritePart struct {
	text  string // the literal, or the variable's name
	isVar bool
}

// Path returns the upstream path for path, matched with params.
func (rw *Rewrite) Path(path string, params *router.Params) string {
	if rw.parts == nil {
		rest := path[len(rw.from):]
		if strings.HasSuffix(rw.to, "/") && strings.HasPrefix(rest, "/") {
			rest = rest[1:]
		}
		return rw.to + rest
	}
	var b strings.Builder
	for _, p := range rw.parts {
		if !p.isVar {
			b.WriteString(p.text)
			continue
		}
		v, _ := params.Get(p.text)
		b.WriteString(v)
	}
	return b.String()
}

// protectedHeaders are the headers no transform may edit: those the
// gateway owns or that define the message's framing.
var protectedHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Te", "Trailer", "Upgrade",
	"Proxy-Authenticate", "Proxy-Authorization", "Host", "Content-Length",
	"Authorization", "X-Api-Key", "Forwarded", "X-Request-Id", "Traceparent", "Tracestate",
	"X-Real-Ip", "True-Client-Ip",
}

// protectedHeader reports whether name is one no transform may edit,
// compared as the proxy compares what clients send: without case and with
// '_' read as '-', since backends that fold one into the other would take
// an edited X_Auth_Tenant for the gateway's X-Auth-Tenant. It returns the
// name as the gateway owns it.
func protectedHeader(name string, response bool) (string, bool) {
	c := textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(name, "_", "-"))
	return c, slices.Contains(protectedHeaders, c) || strings.HasPrefix(c, "X-Forwarded-") ||
		strings.HasPrefix(c, "X-Auth-") || response && strings.HasPrefix(c, "Grpc-")
}

// compileHeaderOps compiles t; problems go to errs under path.
func compileHeaderOps(path string, t *configv1.HeaderTransform, response bool, errs *Error) *HeaderOps {
	if t == nil {
		return nil
	}
	o := &HeaderOps{}
	check := func(field, name string) string {
		c := textproto.CanonicalMIMEHeaderKey(name)
		if owned, ok := protectedHeader(name, response); ok {
			msg := fmt.Sprintf("header %s is the gateway's own and cannot be edited", c)
			if owned != c {
				msg = fmt.Sprintf("header %s is the gateway's own %s ('_' reads as '-') and cannot be edited", c, owned)
			}
			errs.add(path+"."+field, msg)
		}
		return c
	}
	for i, n := range t.GetRemove() {
		o.Remove = append(o.Remove, check(fmt.Sprintf("remove[%d]", i), n))
	}
	for i, r := range t.GetRename() {
		o.Rename = append(o.Rename, [2]string{
			check(fmt.Sprintf("rename[%d].from", i), r.GetFrom()),
			check(fmt.Sprintf("rename[%d].to", i), r.GetTo()),
		})
	}
	for i, s := range t.GetSet() {
		o.Set = append(o.Set, [2]string{check(fmt.Sprintf("set[%d].name", i), s.GetName()), s.GetValue()})
	}
	for i, a := range t.GetAdd() {
		o.Add = append(o.Add, [2]string{check(fmt.Sprintf("add[%d].name", i), a.GetName()), a.GetValue()})
	}
	return o
}

// compileRewrite compiles a route's rewrite against its path template.
func compileRewrite(path string, rc *configv1.Route, errs *Error) *Rewrite {
	rw := rc.GetRewrite()
	if rw == nil {
		return nil
	}
	tpl := rc.GetPath()
	switch r := rw.GetRewrite().(type) {
	case *configv1.PathRewrite_Prefix:
		from := r.Prefix.GetFrom()
		if !literalPrefix(tpl, from) {
			errs.add(path+".rewrite.prefix.from", fmt.Sprintf("%q is not a literal prefix of the route's path %q ending at a segment", from, tpl))
			return nil
		}
		return &Rewrite{from: strings.TrimSuffix(from, "/"), to: r.Prefix.GetTo()}
	case *configv1.PathRewrite_Template:
		vars, err := router.TemplateVariables(tpl)
		if err != nil {
			return nil // reported with the route's path
		}
		out := &Rewrite{}
		s := r.Template
		for s != "" {
			i := strings.IndexByte(s, '{')
			if i < 0 {
				out.parts = append(out.parts, rewritePart{text: s})
				break
			}
			if i > 0 {
				out.parts = append(out.parts, rewritePart{text: s[:i]})
			}
			j := strings.IndexByte(s[i:], '}')
			if j < 0 {
				errs.add(path+".rewrite.template", fmt.Sprintf("unclosed {...} in %q", r.Template))
				return nil
			}
			name := s[i+1 : i+j]
			if !slices.Contains(vars, name) {
				errs.add(path+".rewrite.template", fmt.Sprintf("{%s} is not a variable of the route's path %q (it has %s)", name, tpl, strings.Join(vars, ", ")))
				return nil
			}
			out.parts = append(out.parts, rewritePart{text: name, isVar: true})
			s = s[i+j+1:]
		}
		return out
	}
	return nil
}

// literalPrefix reports whether prefix is made of the leading literal
// segments of the path template tpl.
func literalPrefix(tpl, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		return true
	}
	if !strings.HasPrefix(tpl, prefix) {
		return false
	}
	lit := tpl[:len(prefix)]
	if strings.ContainsAny(lit, "{}*:") {
		return false
	}
	rest := tpl[len(prefix):]
	return rest == "" || rest[0] == '/'
}
