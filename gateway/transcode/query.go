package transcode

import (
	"net/url"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/portico-gw/portico/gateway/problem"
	"github.com/portico-gw/portico/gateway/snapshot"
)

// CheckQuery checks the query parameters of a REST call of route against
// its request message, as google.api.http maps them: each names a field
// (by its JSON or proto name, dotted through singular message fields) that
// the path and the body do not fill, holding a value or a list of values.
// An unknown parameter is the caller's error unless the service allows
// unknown fields; the transcoder would call it an internal one. A
// parameter naming a field the path fills is dropped, as grpc-gateway
// does: the path decides. It returns the query to pass on.
func CheckQuery(route *snapshot.Route, rawQuery string) (string, *problem.Problem) {
	rpc := route.RPC
	if rawQuery == "" || rpc == nil || !rpc.REST() {
		return rawQuery, nil
	}
	out := rawQuery
	dropped := false
	var kept []string
	for q := rawQuery; q != ""; {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, _, _ := strings.Cut(kv, "=")
		if k == "" {
			continue
		}
		key, err := url.QueryUnescape(k)
		if err != nil {
			return "", &problem.Problem{Code: problem.BadRequest, Detail: "query parameter " + k + " is not validly escaped"}
		}
		if pathBound(rpc, key) {
			dropped = true
			continue
		}
		kept = append(kept, kv)
		if rpc.Service.AllowUnknownFields {
			continue
		}
		if msg := queryField(rpc, key); msg != "" {
			return "", &problem.Problem{Code: problem.BadRequest, Detail: "query parameter " + key + ": " + msg}
		}
	}
	if dropped {
		out = strings.Join(kept, "&")
	}
	return out, nil
}

// pathBound reports whether the query parameter key names a field that a
// path variable fills (or a field within one).
func pathBound(rpc *snapshot.RPC, key string) bool {
	for _, f := range rpc.PathFields {
		if sameFieldPath(rpc.Method.Input(), key, f) {
			return true
		}
	}
	return false
}

// sameFieldPath reports whether the dotted query key (JSON or proto names)
// names the field path f (proto names), or a field inside it.
func sameFieldPath(msg protoreflect.MessageDescriptor, key, f string) bool {
	keys, fs := strings.Split(key, "."), strings.Split(f, ".")
	if len(keys) < len(fs) {
		return false
	}
	for i, name := range fs {
		if msg == nil {
			return false
		}
		fd := msg.Fields().ByName(protoreflect.Name(name))
		if fd == nil || (keys[i] != name && keys[i] != fd.JSONName()) {
			return false
		}
		msg = fd.Message()
	}
	return true
}

// queryField returns what is wrong with a query parameter named key, or "".
func queryField(rpc *snapshot.RPC, key string) string {
	msg := rpc.Method.Input()
	if rpc.Body == "*" {
		return "the request body is the whole " + string(msg.FullName()) + "; no query parameters are accepted"
	}
	parts := strings.Split(key, ".")
	for i, name := range parts {
		fd := msg.Fields().ByJSONName(name)
		if fd == nil {
			fd = msg.Fields().ByName(protoreflect.Name(name))
		}
		if fd == nil {
			return string(msg.FullName()) + " has no field " + name
		}
		if i == 0 && string(fd.Name()) == rpc.Body {
			return "field " + name + " is the request body"
		}
		last := i == len(parts)-1
		switch {
		case fd.IsMap():
			return "field " + string(fd.FullName()) + " is a map"
		case last && fd.Message() != nil && !valueMessage(fd.Message()):
			return "field " + string(fd.FullName()) + " is a message, not a value"
		case !last && (fd.Message() == nil || fd.IsList()):
			return "field " + string(fd.FullName()) + " has no fields to name"
		}
		msg = fd.Message()
	}
	return ""
}

// valueMessage reports whether md is a well-known type that a query
// parameter can hold.
func valueMessage(md protoreflect.MessageDescriptor) bool {
	return strings.HasPrefix(string(md.FullName()), "google.protobuf.") && md.FullName() != "google.protobuf.Any" &&
		md.FullName() != "google.protobuf.Struct" && md.FullName() != "google.protobuf.Empty"
}
