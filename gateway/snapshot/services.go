package snapshot

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/portico-gw/portico/gateway/router"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Service is a compiled gRPC service: its descriptor, resolved with every
// file it needs.
type Service struct {
	// ID, Name and Cluster are the config's.
	ID, Name, Cluster string
	// Desc is the service's descriptor; Files holds its file and the files
	// that file imports (the gateway's own well-known files aside).
	Desc  protoreflect.ServiceDescriptor
	Files *protoregistry.Files
	// AllowUnknownFields accepts REST/JSON requests with fields the request
	// message does not have.
	AllowUnknownFields bool
	// Validate runs protovalidate on request messages of at most
	// MaxValidatedBytes.
	Validate          bool
	MaxValidatedBytes int
	// Index is the service's position in the snapshot's Services.
	Index int
}

// DefaultMaxValidatedBytes is the largest request message validated when
// a service does not say.
const DefaultMaxValidatedBytes = 64 << 10

// RPC marks a route derived from a service method.
type RPC struct {
	Service *Service
	Method  protoreflect.MethodDescriptor
	// Path is the method's gRPC path, "/pkg.Service/Method".
	Path string
	// Binding is the index of the route's google.api.http binding (0 the
	// rule, then its additional_bindings), or -1 for the route at Path that
	// gRPC, gRPC-Web and Connect callers use.
	Binding int
	// Body is the binding's body: "" (none), "*" (the whole request
	// message) or the field the body fills.
	Body string
	// ResponseBody is the binding's response_body: the field of the
	// response that is the answer, "" for the whole message.
	ResponseBody string
	// PathFields are the field paths the binding's path variables fill.
	PathFields []string
}

// REST reports whether the route is a REST/JSON binding.
func (r *RPC) REST() bool { return r.Binding >= 0 }

// derivedRoute is a route a service adds, in the form of a hand-written one
// so that it compiles the same way, with a label naming its origin for
// problems.
type derivedRoute struct {
	rc    *configv1.Route
	label string
	rpc   *RPC
}

// compileServices resolves every service's descriptors and derives its
// routes; problems go to errs.
func compileServices(cfg *configv1.Snapshot, clusters map[string]configv1.Protocol, s *Snapshot, errs *Error) []derivedRoute {
	var out []derivedRoute
	names := map[string]int{}
	ids := map[string]int{}
	for j, sc := range cfg.GetServices() {
		path := fmt.Sprintf("services[%d]", j)
		if k, dup := ids[sc.GetId()]; dup {
			errs.add(path+".id", fmt.Sprintf("duplicate service id %q (also services[%d])", sc.GetId(), k))
		}
		ids[sc.GetId()] = j
		if k, dup := names[sc.GetName()]; dup {
			errs.add(path+".name", fmt.Sprintf("service %s is exposed twice (also services[%d])", sc.GetName(), k))
			continue
		}
		names[sc.GetName()] = j
		switch p, ok := clusters[sc.GetCluster()]; {
		case !ok:
			errs.add(path+".cluster", fmt.Sprintf("service %q names unknown cluster %q", sc.GetId(), sc.GetCluster()))
		case p == configv1.Protocol_PROTOCOL_HTTP1:
			errs.add(path+".cluster", fmt.Sprintf("service %q needs a gRPC cluster; %q speaks HTTP/1.1", sc.GetId(), sc.GetCluster()))
		}
		files, problems := loadFiles(sc.GetDescriptors())
		for _, p := range problems {
			errs.add(path+".descriptors", p)
		}
		if files == nil {
			continue
		}
		d, err := files.FindDescriptorByName(protoreflect.FullName(sc.GetName()))
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if err != nil || !ok {
			errs.add(path+".name", fmt.Sprintf("the descriptors define no service %s", sc.GetName()))
			continue
		}
		svc := &Service{
			ID: sc.GetId(), Name: sc.GetName(), Cluster: sc.GetCluster(),
			Desc: sd, Files: files, AllowUnknownFields: sc.GetAllowUnknownFields(),
			Validate: !sc.GetDisableValidation(), MaxValidatedBytes: DefaultMaxValidatedBytes,
			Index: len(s.Services),
		}
		if n := sc.GetMaxValidatedMessageBytes(); n > 0 {
			svc.MaxValidatedBytes = int(n)
		}
		s.Services = append(s.Services, svc)
		for k, m := range sc.GetMethods() {
			if sd.Methods().ByName(protoreflect.Name(m)) == nil {
				errs.add(fmt.Sprintf("%s.methods[%d]", path, k), fmt.Sprintf("service %s has no method %s", sc.GetName(), m))
			}
		}
		methods := sd.Methods()
		for k := range methods.Len() {
			md := methods.Get(k)
			if len(sc.GetMethods()) > 0 && !slices.Contains(sc.GetMethods(), string(md.Name())) {
				continue
			}
			out = append(out, deriveMethodRoutes(path, sc, svc, md, errs)...)
		}
	}
	return out
}

// deriveMethodRoutes returns the routes of one method: its gRPC path and
// its HTTP bindings.
func deriveMethodRoutes(path string, sc *configv1.Service, svc *Service, md protoreflect.MethodDescriptor, errs *Error) []derivedRoute {
	file := md.ParentFile().Path()
	full := string(md.FullName())
	grpcPath := "/" + string(svc.Desc.FullName()) + "/" + string(md.Name())
	base := func(id string, methods []string, tpl string) *configv1.Route {
		return &configv1.Route{
			Id: id, Team: sc.GetTeam(), Hosts: sc.GetHosts(), Methods: methods, Path: tpl,
			Cluster: sc.GetCluster(), Timeout: sc.GetTimeout(), MaxRequestBytes: sc.GetMaxRequestBytes(),
			Priority: sc.GetPriority(), Pools: sc.GetPools(), Auth: methodAuth(sc.GetAuth(), grpcPath),
			RateLimits: sc.GetRateLimits(), RateLimitClass: sc.GetRateLimitClass(),
		}
	}
	id := sc.GetId() + "." + string(md.Name())
	// Connect callers may use GET for methods without side effects.
	methods := []string{"POST"}
	if opts, ok := md.Options().(*descriptorpb.MethodOptions); ok && opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS {
		methods = []string{"GET", "POST"}
	}
	out := []derivedRoute{{
		rc:    base(id, methods, grpcPath),
		label: fmt.Sprintf("%s (%s: %s)", path, file, full),
		rpc:   &RPC{Service: svc, Method: md, Path: grpcPath, Binding: -1},
	}}
	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	if rule == nil {
		return out
	}
	rules := append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...)
	for n, r := range rules {
		where := fmt.Sprintf("%s: %s option (google.api.http)", file, full)
		if n > 0 {
			where += fmt.Sprintf(".additional_bindings[%d]", n-1)
		}
		problem := func(format string, args ...any) {
			errs.add(path+".descriptors", where+": "+fmt.Sprintf(format, args...))
		}
		if n > 0 && len(r.GetAdditionalBindings()) > 0 {
			problem("additional_bindings may not nest")
			continue
		}
		if md.IsStreamingClient() {
			problem("REST bindings serve unary and server-streaming methods; %s streams its requests", md.Name())
			continue
		}
		verb, tpl := httpPattern(r)
		if verb == "" {
			problem("the binding has no pattern (get, put, post, delete, patch or custom)")
			continue
		}
		if !slices.Contains(httpMethods, verb) {
			problem("custom method %q is not one the gateway routes (%s)", verb, strings.Join(httpMethods, ", "))
			continue
		}
		vars, err := router.TemplateVariables(tpl)
		if err != nil {
			problem("%v", err)
			continue
		}
		ok := true
		for _, v := range vars {
			if msg := checkFieldPath(md.Input(), v, true); msg != "" {
				problem("path variable {%s}: %s", v, msg)
				ok = false
			}
		}
		if b := r.GetBody(); b != "" && b != "*" {
			if fd := md.Input().Fields().ByName(protoreflect.Name(b)); fd == nil {
				problem("body %q: %s has no field %s", b, md.Input().FullName(), b)
				ok = false
			}
		}
		if b := r.GetResponseBody(); b != "" {
			if fd := md.Output().Fields().ByName(protoreflect.Name(b)); fd == nil {
				problem("response_body %q: %s has no field %s", b, md.Output().FullName(), b)
				ok = false
			}
		}
		if !ok {
			continue
		}
		out = append(out, derivedRoute{
			rc:    base(id+".http"+strconv.Itoa(n), []string{verb}, tpl),
			label: fmt.Sprintf("%s (%s)", path, where),
			rpc:   &RPC{Service: svc, Method: md, Path: grpcPath, Binding: n, Body: r.GetBody(), ResponseBody: r.GetResponseBody(), PathFields: vars},
		})
	}
	return out
}

// safeMethod reports whether calling md cannot change data, so that a
// synthetic probe may call it by default: its options say
// idempotency_level NO_SIDE_EFFECTS, or it has a google.api.http GET
// binding (the rule or an additional one).
func safeMethod(md protoreflect.MethodDescriptor) bool {
	opts, _ := md.Options().(*descriptorpb.MethodOptions)
	if opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS {
		return true
	}
	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	if rule == nil {
		return false
	}
	for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
		if verb, _ := httpPattern(r); verb == "GET" {
			return true
		}
	}
	return false
}

// httpMethods are the methods a binding may use: those a route may.
var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"}

// httpPattern returns the HTTP method and path template of a binding.
func httpPattern(r *annotations.HttpRule) (verb, tpl string) {
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		return "GET", p.Get
	case *annotations.HttpRule_Put:
		return "PUT", p.Put
	case *annotations.HttpRule_Post:
		return "POST", p.Post
	case *annotations.HttpRule_Delete:
		return "DELETE", p.Delete
	case *annotations.HttpRule_Patch:
		return "PATCH", p.Patch
	case *annotations.HttpRule_Custom:
		return strings.ToUpper(p.Custom.GetKind()), p.Custom.GetPath()
	}
	return "", ""
}

// checkFieldPath checks that the dotted path names a field of msg through
// singular message fields; for a path variable (leaf) the last field must
// be a singular non-message field. It returns what is wrong, or "".
func checkFieldPath(msg protoreflect.MessageDescriptor, path string, leaf bool) string {
	parts := strings.Split(path, ".")
	for i, name := range parts {
		fd := msg.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			return fmt.Sprintf("%s has no field %s", msg.FullName(), name)
		}
		if fd.IsList() || fd.IsMap() {
			return fmt.Sprintf("field %s is repeated", fd.FullName())
		}
		if i == len(parts)-1 {
			if leaf && fd.Message() != nil && !wrapperOrScalarWKT(fd.Message()) {
				return fmt.Sprintf("field %s is a message, not a value", fd.FullName())
			}
			return ""
		}
		if fd.Message() == nil {
			return fmt.Sprintf("field %s is not a message", fd.FullName())
		}
		msg = fd.Message()
	}
	return ""
}

// wrapperOrScalarWKT reports whether md is a well-known type that has a
// string form usable in a path (wrappers, Timestamp, Duration, FieldMask).
func wrapperOrScalarWKT(md protoreflect.MessageDescriptor) bool {
	switch md.FullName() {
	case "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask",
		"google.protobuf.StringValue", "google.protobuf.BytesValue", "google.protobuf.BoolValue",
		"google.protobuf.Int32Value", "google.protobuf.Int64Value", "google.protobuf.UInt32Value",
		"google.protobuf.UInt64Value", "google.protobuf.FloatValue", "google.protobuf.DoubleValue":
		return true
	}
	return false
}

// methodAuth is the auth of one method's routes: the service's, with the
// method's method_scopes entry, if any, as its scopes.
func methodAuth(a *configv1.RouteAuth, grpcPath string) *configv1.RouteAuth {
	if a == nil || len(a.GetMethodScopes()) == 0 {
		return a
	}
	out := proto.CloneOf(a)
	out.MethodScopes = nil
	for _, ms := range a.GetMethodScopes() {
		if ms.GetMethod() == grpcPath {
			out.Scopes = ms.GetScopes()
		}
	}
	return out
}

// checkServiceMethodScopes checks that each method_scopes entry of a
// service's auth names one of its methods by gRPC path.
func checkServiceMethodScopes(at string, sc *configv1.Service, errs *Error) {
	prefix := "/" + sc.GetName() + "/"
	for k, ms := range sc.GetAuth().GetMethodScopes() {
		m, ok := strings.CutPrefix(ms.GetMethod(), prefix)
		if !ok || m == "" || strings.Contains(m, "/") || len(sc.GetMethods()) > 0 && !slices.Contains(sc.GetMethods(), m) {
			errs.add(fmt.Sprintf("%s.auth.method_scopes[%d].method", at, k),
				fmt.Sprintf("%q is not an exposed method of %s (write %s<Method>)", ms.GetMethod(), sc.GetName(), prefix))
		}
	}
}
