package gateway

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/portico-gw/portico/gateway/openapi"
	"github.com/portico-gw/portico/gateway/problem"
)

// checkOpenAPI validates a request of a route with an OpenAPI document
// (kin-openapi's openapi3filter): the operation the request is, its path,
// query and header parameters, and its JSON body, every problem listed.
// r's normalised path is path and its query rawQuery. A
// body it validates is read whole (within the limit and, through w, the
// route's timeout) and r.Body replaced with the same bytes. A non-nil
// Problem means the request must not go upstream.
func checkOpenAPI(v *openapi.Validator, w http.ResponseWriter, r *http.Request, path, rawQuery string, timeout time.Duration) *problem.Problem {
	vr := r.Clone(r.Context())
	vr.URL = &url.URL{Path: path, RawQuery: rawQuery}
	vr.Host = ""
	route, params, err := v.Router.FindRoute(vr)
	if err != nil {
		msg := "the request is not an operation of the route's OpenAPI document"
		if errors.Is(err, routers.ErrMethodNotAllowed) {
			msg = "the route's OpenAPI document has no " + r.Method + " operation at this path"
		}
		return &problem.Problem{Code: problem.BadRequest, Detail: msg}
	}
	opts := &openapi3filter.Options{
		MultiError:          true,
		AuthenticationFunc:  openapi3filter.NoopAuthenticationFunc, // the route's auth decides
		SkipSettingDefaults: true,
		ExcludeRequestBody:  v.SkipBody,
	}
	var body []byte
	if !v.SkipBody && r.Body != nil && r.Body != http.NoBody {
		if r.ContentLength > v.MaxBody {
			return openAPITooLarge(v.MaxBody)
		}
		rc := boundReads(w, timeout)
		body, err = io.ReadAll(io.LimitReader(r.Body, v.MaxBody+1))
		if err != nil {
			if p := problem.ReadFailed(r.Context(), err); p != nil {
				return p
			}
			return &problem.Problem{Code: problem.BadRequest, Detail: "reading the request body: " + err.Error()}
		}
		if int64(len(body)) > v.MaxBody {
			return openAPITooLarge(v.MaxBody)
		}
		releaseReads(rc)
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		vr.Body = io.NopCloser(bytes.NewReader(body))
		vr.ContentLength = int64(len(body))
	}
	err = openapi3filter.ValidateRequest(r.Context(), &openapi3filter.RequestValidationInput{
		Request: vr, PathParams: params, Route: route, Options: opts,
	})
	if err == nil {
		return nil
	}
	p := &problem.Problem{Code: problem.BadRequest, Detail: "the request does not match the route's OpenAPI document"}
	p.Violations = openAPIViolations(err)
	return p
}

func openAPITooLarge(limit int64) *problem.Problem {
	return &problem.Problem{Code: problem.PayloadTooLarge,
		Detail: "the request body exceeds the " + strconv.FormatInt(limit, 10) + " bytes the route validates"}
}

// violations lists the problems in a validation error: each parameter or
// body field, the schema keyword it breaks, and why.
func openAPIViolations(err error) []problem.Violation {
	var out []problem.Violation
	var walk func(err error)
	walk = func(err error) {
		// A RequestError names the parameter (or the body) and wraps the
		// schema errors; a MultiError lists errors of either kind.
		if me, ok := err.(openapi3.MultiError); ok {
			for _, e := range me {
				walk(e)
			}
			return
		}
		var re *openapi3filter.RequestError
		if !errors.As(err, &re) {
			out = append(out, openAPIViolation("", "", err))
			return
		}
		where := "body"
		if re.Parameter != nil {
			where = re.Parameter.In + "." + re.Parameter.Name
		}
		inner := re.Err
		var ime openapi3.MultiError
		if errors.As(inner, &ime) {
			for _, e := range ime {
				out = append(out, openAPIViolation(where, re.Reason, e))
			}
			return
		}
		out = append(out, openAPIViolation(where, re.Reason, inner))
	}
	walk(err)
	return out
}

func openAPIViolation(where, reason string, err error) problem.Violation {
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		field := where
		if ptr := se.JSONPointer(); len(ptr) > 0 {
			field += "." + strings.Join(ptr, ".")
		}
		return problem.Violation{Field: field, Rule: se.SchemaField, Message: se.Reason}
	}
	msg := reason
	if err != nil {
		if msg != "" {
			msg += ": "
		}
		msg += err.Error()
	}
	return problem.Violation{Field: where, Message: msg}
}
