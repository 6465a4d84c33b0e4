package router

import "strings"

// MaxParams is the number of variables a Params holds, and so the most variables a
// route's template may have.
const MaxParams = 16

// Params holds the variable bindings of a match in a fixed array, so that a Params
// kept on the stack or in a pooled request context costs no allocation. The zero
// Params is empty and ready to use. A Params is not safe for concurrent use.
type Params struct {
	n      int
	names  [MaxParams]string
	values [MaxParams]string
}

// Len returns the number of bindings.
func (p *Params) Len() int { return p.n }

// At returns the i-th binding in template order. It panics if i is not in [0, Len()).
func (p *Params) At(i int) (name, value string) {
	if i < 0 || i >= p.n {
		panic("router: Params.At index out of range")
	}
	return p.names[i], p.values[i]
}

// Get returns the value bound to name, a field path such as "book.name", and whether
// there is one.
func (p *Params) Get(name string) (string, bool) {
	for i := 0; i < p.n; i++ {
		if p.names[i] == name {
			return p.values[i], true
		}
	}
	return "", false
}

// Reset removes all bindings.
func (p *Params) Reset() {
	for i := 0; i < p.n; i++ {
		p.names[i], p.values[i] = "", ""
	}
	p.n = 0
}

// String returns the bindings as "{name=value, ...}", for tests and logs.
func (p *Params) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < p.n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.names[i])
		b.WriteByte('=')
		b.WriteString(p.values[i])
	}
	b.WriteByte('}')
	return b.String()
}

// bind fills p with the values of vars in path, which a route with those variables
// has just matched; their names are spans of strs. vars are in template order and
// do not overlap, so one forward pass finds every boundary; but a variable nearer
// the end of a path of known length, such as the {id} of /v1/orders/{id}, is found
// sooner walking back.
func (p *Params) bind(vars []param, strs, path string) {
	seg, i := 0, 1 // i is where segment seg starts; past len(path) once the path is used up
	for k := range vars {
		if p.n == MaxParams {
			return
		}
		v := &vars[k]
		vstart, vend, fromEnd := int(v.start), int(v.end), int(v.fromEnd)
		var start, end int
		if fromEnd >= 0 && fromEnd < vstart-seg {
			end = len(path)
			for s := 0; s < fromEnd; s++ {
				end = lastSlash(path, end)
			}
			start = end
			for s := vstart; s < vend; s++ {
				start = lastSlash(path, start)
			}
			start = min(start+1, end)
		} else {
			for ; seg < vstart && i <= len(path); seg++ {
				for i < len(path) && path[i] != '/' {
					i++
				}
				i++
			}
			start = min(i, len(path))
			end = len(path)
			if !v.multi {
				for ; seg < vend && i <= len(path); seg++ {
					for i < len(path) && path[i] != '/' {
						i++
					}
					i++
				}
				end = max(start, i-1)
			}
		}
		p.names[p.n], p.values[p.n] = strs[v.name.off:v.name.off+v.name.len], path[start:end]
		p.n++
	}
}

// lastSlash returns the index of the last '/' before path[j], or 0 if there is
// none: a matched path starts with one.
func lastSlash(path string, j int) int {
	j--
	for j > 0 && path[j] != '/' {
		j--
	}
	return max(j, 0)
}
