// Package openapi compiles the OpenAPI 3 document a non-gRPC route
// validates its requests against (github.com/getkin/kin-openapi), so that
// a snapshot with a document that does not load is refused wherever it is
// compiled. The gateway checks requests against it (gateway/openapi.go).
package openapi

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// DefaultMaxBodyBytes is the largest body validated when the route does not
// say.
const DefaultMaxBodyBytes = 64 << 10

// Validator is a compiled document: its operations and the route's
// limits. It is safe for concurrent use.
type Validator struct {
	// Router finds a request's operation.
	Router routers.Router
	// MaxBody is the largest body validated; SkipBody validates no body.
	MaxBody  int64
	SkipBody bool
}

// Compile loads and checks cfg's document. External references are not
// followed: a document is self-contained, and compiling never does I/O.
func Compile(cfg *configv1.OpenAPIValidation) (*Validator, error) {
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromData([]byte(cfg.GetDocument()))
	if err != nil {
		return nil, fmt.Errorf("the document does not load: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the document is not valid OpenAPI 3: %w", err)
	}
	// Match paths only: a server's scheme and host are the gateway's
	// business, its base path is the document's.
	servers := openapi3.Servers{}
	for _, s := range doc.Servers {
		p := s.URL
		if u, err := url.Parse(s.URL); err == nil && (u.Scheme != "" || u.Host != "") {
			p = u.Path
		}
		servers = append(servers, &openapi3.Server{URL: "/" + strings.Trim(p, "/"), Variables: s.Variables})
	}
	if len(servers) == 0 {
		servers = openapi3.Servers{{URL: "/"}}
	}
	doc.Servers = servers
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("the document's paths do not compile: %w", err)
	}
	v := &Validator{Router: r, MaxBody: DefaultMaxBodyBytes, SkipBody: cfg.GetSkipBody()}
	if n := cfg.GetMaxBodyBytes(); n > 0 {
		v.MaxBody = int64(n)
	}
	return v, nil
}
