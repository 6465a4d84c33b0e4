// Package admin serves the control plane's admin API
// (portico.admin.v1.AdminService, over Connect, gRPC and gRPC-Web): teams
// change their own routes, clusters and services; the platform team its
// teams, plans, scopes, issuers and tokens. Every accepted change is
// compiled with everyone else's config (control/compile) and stored as a
// new immutable version (control/store), with its audit entry; a change
// that does not compile is refused with every problem listed and reaches
// no node.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"buf.build/go/protovalidate"
	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/portico-gw/portico/control/compile"
	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/control/versions"
	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
)

// Options configures a Service. The zero value works, with a Store.
type Options struct {
	// Logger receives failures of the store; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Versions writes the versions, and publishes them; nil means a
	// Writer on the store that publishes nothing.
	Versions *versions.Writer
	// Fleet, if set, is what GetRollout reports and the rollout calls
	// steer.
	Fleet Fleet
}

// Service implements adminv1connect.AdminServiceHandler over a store.
type Service struct {
	store *store.Store
	// listVersions is store.List; tests count its calls.
	listVersions func(ctx context.Context, before int64, limit int) ([]store.Version, error)
	log          *slog.Logger
	now          func() time.Time
	versions     *versions.Writer
	fleetOf      Fleet
}

var _ adminv1connect.AdminServiceHandler = (*Service)(nil)

// New returns the admin service over st.
func New(st *store.Store, opts Options) *Service {
	s := &Service{store: st, listVersions: st.List, log: opts.Logger, now: opts.Now, versions: opts.Versions, fleetOf: opts.Fleet}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.versions == nil {
		s.versions = versions.New(st, nil, s.log)
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Handler returns the service's path and HTTP handler, with every request
// message checked against its buf.validate rules first.
func (s *Service) Handler() (string, http.Handler) {
	return adminv1connect.NewAdminServiceHandler(s, connect.WithInterceptors(validateRequests{}), connect.WithReadMaxBytes(MaxRequestBytes))
}

// MaxRequestBytes bounds an admin request: a team's whole config with its
// descriptors fits; anything larger is refused before it is decoded.
const MaxRequestBytes = 64 << 20

// validateRequests refuses a request message that breaks its rules with
// InvalidArgument and the violations, before any method runs.
type validateRequests struct{}

func (validateRequests) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if m, ok := req.Any().(proto.Message); ok {
			defaultTeams(m.ProtoReflect(), "")
			if err := protovalidate.Validate(m); err != nil {
				return nil, invalidRequest(err)
			}
		}
		return next(ctx, req)
	}
}

func (validateRequests) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (validateRequests) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// defaultTeams fills the empty team field of every config object in m
// (a route, a service) with the team of the request or team config that
// holds it: teams write their objects without repeating their name, and
// the objects' own rules require it.
func defaultTeams(m protoreflect.Message, team string) {
	if fd := m.Descriptor().Fields().ByName("team"); fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() {
		if own := m.Get(fd).String(); own != "" {
			team = own
		} else if team != "" && m.Descriptor().ParentFile().Package() == "portico.config.v1" {
			m.Set(fd, protoreflect.ValueOfString(team))
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil || fd.IsMap():
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				defaultTeams(l.Get(i).Message(), team)
			}
		default:
			defaultTeams(v.Message(), team)
		}
		return true
	})
}

// invalidRequest is the InvalidArgument answer to a request that breaks
// its rules.
func invalidRequest(err error) error {
	var verr *protovalidate.ValidationError
	if !errors.As(err, &verr) {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the request does not validate"))
	}
	br := &errdetails.BadRequest{}
	for _, v := range verr.Violations {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: protovalidate.FieldPathString(v.Proto.GetField()), Description: v.Proto.GetMessage(), Reason: v.Proto.GetRuleId(),
		})
	}
	return withDetail(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the request breaks %d rules: %s", len(br.FieldViolations), verr.Error())), br)
}

// refusedConfig is the InvalidArgument answer to a change whose config
// does not compile: every problem, as field violations located in the
// config.
func refusedConfig(cerr *compile.Error) error {
	br := &errdetails.BadRequest{}
	for _, v := range cerr.Violations {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Path, Description: v.Message})
	}
	return withDetail(connect.NewError(connect.CodeInvalidArgument, cerr), br)
}

func withDetail(err *connect.Error, m proto.Message) error {
	if d, derr := connect.NewErrorDetail(m); derr == nil {
		err.AddDetail(d)
	}
	return err
}

// storeFailed logs a store failure and answers Internal without its text.
func (s *Service) storeFailed(ctx context.Context, what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeCanceled, errors.New(what+": canceled"))
	}
	s.log.ErrorContext(ctx, "config store failed", "op", what, "err", err)
	return connect.NewError(connect.CodeInternal, errors.New(what+": the config store failed"))
}
