// Package transcode turns the calls of gRPC-Web, Connect and REST/JSON
// callers into gRPC calls, and the answers back, from the descriptors of a
// snapshot's services alone: no generated code, no rebuild. It wraps
// connectrpc.com/vanguard, one transcoder per service, built per snapshot.
//
// The gateway matches the route, authenticates and rate-limits first; the
// transcoder then decodes the call and hands a gRPC request (protocol gRPC,
// codec proto, no compression) to the upstream handler, which forwards it
// to the service's cluster. A gRPC caller's request already is one and goes
// to the upstream handler untouched.
package transcode

import (
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/portico-gw/portico/gateway/snapshot"
)

// Set is the transcoders of one snapshot's services.
type Set struct {
	byService  []*vanguard.Transcoder  // by Service.Index
	validators []*validator            // by Service.Index; nil: not validated
	resolvers  []vanguard.TypeResolver // by Service.Index
	codecs     []*vanguard.JSONCodec   // by Service.Index: REST streams' JSON
}

// MaxMessageBytes bounds one message a transcoder buffers: a request
// message, or a REST or Connect unary response. Bodies stream otherwise.
const MaxMessageBytes = 64 << 20

// New builds the transcoders of services, each handing its gRPC calls to
// upstream. It fails if a service's descriptors cannot be served, which
// snapshot.Compile has checked already.
func New(services []*snapshot.Service, upstream http.Handler) (*Set, error) {
	s := &Set{
		byService:  make([]*vanguard.Transcoder, len(services)),
		validators: make([]*validator, len(services)),
		resolvers:  make([]vanguard.TypeResolver, len(services)),
		codecs:     make([]*vanguard.JSONCodec, len(services)),
	}
	for _, svc := range services {
		if svc.Validate {
			v, err := newValidator(svc)
			if err != nil {
				return nil, fmt.Errorf("service %s: %w", svc.Name, err)
			}
			s.validators[svc.Index] = v
		}
		res := resolver(svc.Files)
		s.resolvers[svc.Index], s.codecs[svc.Index] = res, vanguard.NewJSONCodec(res)
		strict := !svc.AllowUnknownFields
		t, err := vanguard.NewTranscoder([]*vanguard.Service{
			vanguard.NewServiceWithSchema(svc.Desc, upstream,
				vanguard.WithTargetProtocols(vanguard.ProtocolGRPC),
				vanguard.WithTargetCodecs(vanguard.CodecProto),
				vanguard.WithNoTargetCompression(),
				vanguard.WithTypeResolver(res),
				vanguard.WithMaxMessageBufferBytes(MaxMessageBytes),
				vanguard.WithRESTUnmarshalOptions(vanguard.RESTUnmarshalOptions{DiscardUnknownQueryParams: !strict}),
			),
		}, vanguard.WithCodec(func(r vanguard.TypeResolver) vanguard.Codec {
			c := vanguard.NewJSONCodec(r)
			c.UnmarshalOptions.DiscardUnknown = !strict
			c.MarshalOptions.AllowPartial, c.UnmarshalOptions.AllowPartial = true, true
			return jsonCodec{c}
		}), vanguard.WithCodec(func(r vanguard.TypeResolver) vanguard.Codec {
			return protoCodec{unmarshal: proto.UnmarshalOptions{Resolver: r, AllowPartial: true}}
		}))
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", svc.Name, err)
		}
		s.byService[svc.Index] = t
	}
	return s, nil
}

// For returns the transcoder of svc.
func (s *Set) For(svc *snapshot.Service) http.Handler { return s.byService[svc.Index] }

// resolver finds a service's message types in its own files first, then
// among the gateway's (well-known types, error details).
func resolver(files *protoregistry.Files) vanguard.TypeResolver {
	return fallback{dynamicpb.NewTypes(files), protoregistry.GlobalTypes}
}

type fallback [2]vanguard.TypeResolver

func (f fallback) FindMessageByName(name protoreflect.FullName) (protoreflect.MessageType, error) {
	if t, err := f[0].FindMessageByName(name); err == nil {
		return t, nil
	}
	return f[1].FindMessageByName(name)
}

func (f fallback) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	if t, err := f[0].FindMessageByURL(url); err == nil {
		return t, nil
	}
	return f[1].FindMessageByURL(url)
}

func (f fallback) FindExtensionByName(name protoreflect.FullName) (protoreflect.ExtensionType, error) {
	if t, err := f[0].FindExtensionByName(name); err == nil {
		return t, nil
	}
	return f[1].FindExtensionByName(name)
}

func (f fallback) FindExtensionByNumber(msg protoreflect.FullName, n protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	if t, err := f[0].FindExtensionByNumber(msg, n); err == nil {
		return t, nil
	}
	return f[1].FindExtensionByNumber(msg, n)
}

// jsonCodec is vanguard's JSON codec whose decoding errors are the
// caller's fault (InvalidArgument, HTTP 400), not Unknown (HTTP 500). Like
// protoCodec, it leaves proto2 required fields to the backend.
type jsonCodec struct{ *vanguard.JSONCodec }

func (c jsonCodec) Unmarshal(data []byte, msg proto.Message) error {
	return invalid(c.JSONCodec.Unmarshal(data, msg))
}

func (c jsonCodec) UnmarshalField(data []byte, msg proto.Message, field protoreflect.FieldDescriptor) error {
	return invalid(c.JSONCodec.UnmarshalField(data, msg, field))
}

// protoCodec is vanguard's proto codec without the check that every
// proto2 required field is set, on the way in and on the way out: the
// check walks every field of every dynamic message (a fifth of decoding a
// small request), and the backend makes it anyway. Calls keep their
// bytes; only a transcoded message is decoded and encoded again.
type protoCodec struct{ unmarshal proto.UnmarshalOptions }

func (protoCodec) Name() string   { return vanguard.CodecProto }
func (protoCodec) IsBinary() bool { return true }

func (protoCodec) MarshalAppend(b []byte, m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{AllowPartial: true}.MarshalAppend(b, m)
}

func (protoCodec) MarshalAppendStable(b []byte, m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{AllowPartial: true, Deterministic: true}.MarshalAppend(b, m)
}

func (c protoCodec) Unmarshal(b []byte, m proto.Message) error { return c.unmarshal.Unmarshal(b, m) }

func invalid(err error) error {
	var ce *connect.Error
	if err == nil || errors.As(err, &ce) {
		return err
	}
	return connect.NewError(connect.CodeInvalidArgument, err)
}
