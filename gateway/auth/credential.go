package auth

import (
	"net/http"
	"net/url"
	"strings"
)

// credential is what a request presented.
type credential struct {
	kind  Kind   // APIKey or Token; Anonymous when none
	value string // the key or token; never logged
	// query is set when the key came from the route's query parameter.
	query bool
}

// Why extraction can fail. The texts go into problem details: they describe
// the request's shape, never its content.
const (
	reasonMissing   = "no credential: send an API key (Authorization: Bearer ak_… or X-Api-Key) or an OAuth 2.0 access token (Authorization: Bearer …)"
	reasonAmbiguous = "more than one credential in the request"
	reasonScheme    = "the Authorization header must use the Bearer scheme"
)

// extract finds the request's one credential: an Authorization Bearer value
// (an API key when it starts with "ak_", otherwise an access token), an
// X-Api-Key header, or, where the route allows it, the query parameter
// queryKey. More than one is refused rather than guessed between.
func extract(r *http.Request, queryKey, rawQuery string) (credential, string) {
	var c credential
	n := 0
	if v := r.Header["Authorization"]; len(v) > 0 {
		n += len(v)
		scheme, value, ok := strings.Cut(v[0], " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return c, reasonScheme
		}
		value = strings.TrimLeft(value, " ")
		c.value = value
		c.kind = Token
		if strings.HasPrefix(value, "ak_") {
			c.kind = APIKey
		}
	}
	if v := r.Header["X-Api-Key"]; len(v) > 0 {
		n += len(v)
		c = credential{kind: APIKey, value: v[0]}
	}
	if queryKey != "" {
		if v, k := queryValue(rawQuery, queryKey); k > 0 {
			n += k
			c = credential{kind: APIKey, value: v, query: true}
		}
	}
	switch {
	case n == 0:
		return c, reasonMissing
	case n > 1:
		return credential{}, reasonAmbiguous
	case c.value == "":
		return credential{}, reasonMissing
	}
	return c, ""
}

// queryValue returns the first value of name in rawQuery, and how many
// times name occurs: a key given twice is two credentials, however alike.
func queryValue(rawQuery, name string) (first string, n int) {
	for q := rawQuery; q != ""; {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(pair, "=")
		if !keyIs(k, name) {
			continue
		}
		if n == 0 {
			// Keys are base62: an escaped value cannot be a valid key,
			// and is passed as is for the format check to refuse.
			first = v
		}
		n++
	}
	return first, n
}

// keyIs reports whether the raw query key k names name, also when escaped
// ("api%5Fkey"), so an escaped spelling can neither hide a key from the
// gateway nor carry one past it.
func keyIs(k, name string) bool {
	if k == name {
		return true
	}
	if !strings.ContainsAny(k, "%+") {
		return false
	}
	u, err := url.QueryUnescape(k)
	return err == nil && u == name
}

// WithoutQueryKey returns rawQuery without every name=… pair: the key never
// travels upstream. It returns rawQuery itself, without allocating, when
// name cannot be in it.
func WithoutQueryKey(rawQuery, name string) string {
	if name == "" {
		return rawQuery
	}
	if !strings.Contains(rawQuery, name) && !strings.ContainsAny(rawQuery, "%+") {
		return rawQuery
	}
	var b strings.Builder
	for q := rawQuery; q != ""; {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		if k, _, _ := strings.Cut(pair, "="); keyIs(k, name) {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(pair)
	}
	return b.String()
}
