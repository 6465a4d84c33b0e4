package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/control/compile"
	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/control/versions"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// current returns the newest version (Number 0 if there is none) and its
// config.
func (s *Service) current(ctx context.Context) (store.Version, *adminv1.Config, error) {
	v, err := s.store.Latest(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return store.Version{}, &adminv1.Config{}, nil
	}
	if err != nil {
		return store.Version{}, nil, err
	}
	cfg, err := s.config(ctx, v)
	return v, cfg, err
}

// config returns the config of version v.
func (s *Service) config(ctx context.Context, v store.Version) (*adminv1.Config, error) {
	b, err := s.store.Blob(ctx, v.ConfigSHA256)
	if err != nil {
		return nil, err
	}
	cfg := &adminv1.Config{}
	if err := proto.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("version %d: the stored config does not decode: %w", v.Number, err)
	}
	return cfg, nil
}

// change is one write.
type change struct {
	by      caller
	team    string // "" for the platform's objects
	action  string // "routes.put"
	object  string // "route orders.get"
	message string
	dryRun  bool
	// apply edits the config in place; an error (a connect error: not
	// found, failed precondition) refuses the change.
	apply func(cfg *adminv1.Config) error
}

// commit applies ch to the newest config, compiles the result, and stores
// it as a new version (control/versions: after losing a race it starts
// again from the new newest version). A change that changes nothing
// creates no version.
func (s *Service) commit(ctx context.Context, ch change) (*adminv1.Change, error) {
	var diff string
	var unchanged *adminv1.Change
	v, err := s.versions.Commit(ctx, func(ctx context.Context, prev store.Version) (store.Commit, error) {
		cfg := &adminv1.Config{}
		if prev.Number > 0 {
			var err error
			if cfg, err = s.config(ctx, prev); err != nil {
				return store.Commit{}, s.storeFailed(ctx, ch.action, err)
			}
		}
		next := proto.CloneOf(cfg)
		if err := ch.apply(next); err != nil {
			s.audit(ctx, &store.AuditEntry{Actor: ch.by.id, Team: ch.team, Action: ch.action, Object: ch.object,
				Outcome: connect.CodeOf(err).String(), Detail: err.Error()})
			return store.Commit{}, err
		}
		diff = Diff(cfg, next)
		unchanged = &adminv1.Change{Version: versionProto(prev), Changed: false, Diff: diff}
		if diff == "" && !ch.dryRun {
			return store.Commit{}, versions.ErrSkip
		}
		// A dry run compiles too, so that it is refused as the change
		// would be.
		res, err := compile.Compile(next, "v"+strconv.FormatInt(prev.Number+1, 10))
		if err != nil {
			return store.Commit{}, s.refuse(ctx, ch, err)
		}
		if err := s.checkFleet(ctx, cfg, next, res); err != nil {
			return store.Commit{}, s.refuse(ctx, ch, err)
		}
		if ch.dryRun {
			return store.Commit{}, versions.ErrSkip
		}
		cfgBytes, err := proto.MarshalOptions{Deterministic: true}.Marshal(next)
		if err != nil {
			return store.Commit{}, s.storeFailed(ctx, ch.action, err)
		}
		return store.Commit{
			Config: cfgBytes, Snapshot: res.Bytes, CreatedBy: ch.by.id, Message: ch.message, Diff: diff,
			Audit: store.AuditEntry{Actor: ch.by.id, Team: ch.team, Action: ch.action, Object: ch.object, Detail: ch.message},
		}, nil
	})
	switch {
	case errors.Is(err, versions.ErrSkip):
		return unchanged, nil
	case errors.Is(err, versions.ErrBusy):
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("%s: other changes kept landing first; try again", ch.action))
	case err != nil && connect.CodeOf(err) == connect.CodeUnknown:
		return nil, s.storeFailed(ctx, ch.action, err)
	case err != nil:
		return nil, err
	}
	return &adminv1.Change{Version: versionProto(v), Changed: true, Diff: diff}, nil
}

// refuse answers a config that does not compile, and audits the refusal.
func (s *Service) refuse(ctx context.Context, ch change, err error) error {
	var cerr *compile.Error
	if !errors.As(err, &cerr) {
		s.log.ErrorContext(ctx, "compiling a change failed", "action", ch.action, "err", err)
		return connect.NewError(connect.CodeInternal, errors.New(ch.action+": compiling the config failed"))
	}
	if !ch.dryRun {
		s.audit(ctx, &store.AuditEntry{Actor: ch.by.id, Team: ch.team, Action: ch.action, Object: ch.object,
			Outcome: "invalid_argument", Detail: cerr.Error()})
	}
	return refusedConfig(cerr)
}

func versionProto(v store.Version) *adminv1.Version {
	if v.Number == 0 {
		return nil
	}
	return &adminv1.Version{
		Number: v.Number, Sha256: v.SnapshotSHA256, CreatedBy: v.CreatedBy, CreatedAt: timestamppb.New(v.CreatedAt),
		Message: v.Message, Diff: v.Diff, RollbackOf: v.RollbackOf,
	}
}

// teamConfig returns team's config in cfg, added if create and missing;
// nil if missing.
func teamConfig(cfg *adminv1.Config, team string, create bool) *adminv1.TeamConfig {
	for _, tc := range cfg.GetTeamConfigs() {
		if tc.GetTeam() == team {
			return tc
		}
	}
	if !create {
		return nil
	}
	tc := &adminv1.TeamConfig{Team: team}
	cfg.TeamConfigs = append(cfg.TeamConfigs, tc)
	return tc
}

// dropEmptyTeamConfig removes team's config from cfg when it holds
// nothing, so that deleting a team's last object leaves no trace.
func dropEmptyTeamConfig(cfg *adminv1.Config, team string) {
	for i, tc := range cfg.GetTeamConfigs() {
		if tc.GetTeam() == team && len(tc.GetRoutes())+len(tc.GetClusters())+len(tc.GetServices()) == 0 {
			cfg.TeamConfigs = append(cfg.TeamConfigs[:i], cfg.TeamConfigs[i+1:]...)
			return
		}
	}
}

// put replaces the element of list whose key is key(x), or appends x.
func put[T any](list []T, x T, key func(T) string) []T {
	for i, y := range list {
		if key(y) == key(x) {
			list[i] = x
			return list
		}
	}
	return append(list, x)
}

// remove deletes the element with key k from list; ok is false if there
// was none.
func remove[T any](list []T, k string, key func(T) string) ([]T, bool) {
	for i, y := range list {
		if key(y) == k {
			return append(list[:i], list[i+1:]...), true
		}
	}
	return list, false
}

// find returns the element with key k.
func find[T any](list []T, k string, key func(T) string) (T, bool) {
	for _, y := range list {
		if key(y) == k {
			return y, true
		}
	}
	var zero T
	return zero, false
}

// checkFleet refuses a change whose new or changed clusters the connected
// nodes cannot run: an identity a node lacks, or no endpoint any probed
// node finds healthy. It runs before anything is stored or pushed; the
// clusters the change leaves alone are not checked, so one team's
// unhealthy backend never holds up another team's change.
func (s *Service) checkFleet(ctx context.Context, prev, next *adminv1.Config, res *compile.Result) error {
	checker, ok := s.fleetOf.(ClusterChecker)
	if !ok {
		return nil
	}
	before := map[string]*configv1.Cluster{}
	for _, tc := range prev.GetTeamConfigs() {
		for _, c := range tc.GetClusters() {
			before[tc.GetTeam()+"/"+c.GetName()] = c
		}
	}
	changed := map[string]bool{}
	for _, tc := range next.GetTeamConfigs() {
		for _, c := range tc.GetClusters() {
			if old := before[tc.GetTeam()+"/"+c.GetName()]; old == nil || !proto.Equal(old, c) {
				changed[c.GetName()] = true
			}
		}
	}
	var check []*configv1.Cluster
	for _, c := range res.Snapshot.GetClusters() {
		if changed[c.GetName()] {
			check = append(check, c)
		}
	}
	problems := checker.CheckClusters(ctx, check)
	if len(problems) == 0 {
		return nil
	}
	teamOf := map[string]string{}
	for _, c := range check {
		teamOf[c.GetName()] = c.GetTeam()
	}
	cerr := &compile.Error{}
	for _, p := range problems {
		path := "team " + teamOf[p.Cluster] + ": clusters[" + p.Cluster + "]"
		if p.Cluster == "" {
			// The change as a whole: its clusters.
			path = "team " + check[0].GetTeam() + ": clusters"
		}
		if p.Field != "" {
			path += "." + p.Field
		}
		cerr.Violations = append(cerr.Violations, compile.Violation{Path: path, Message: p.Message})
	}
	return cerr
}
