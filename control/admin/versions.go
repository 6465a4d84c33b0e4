package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/control/versions"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
)

// ListVersions lists versions, newest first: every version for a
// platform admin; for a team admin, the versions that changed its team's
// objects, each with its team's part of the diff only (teamView).
//
// A page ends with its last version: the next page is the versions
// before that one, for both kinds of caller, so a client that pages with
// before = the last number it got neither skips nor repeats a version.
func (s *Service) ListVersions(ctx context.Context, req *connect.Request[adminv1.ListVersionsRequest]) (*connect.Response[adminv1.ListVersionsResponse], error) {
	c, err := s.authenticate(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	limit := int(req.Msg.GetLimit())
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	out := &adminv1.ListVersionsResponse{}
	before := req.Msg.GetBefore()
	if c.platform() {
		vs, err := s.listVersions(ctx, before, limit)
		if err != nil {
			return nil, s.storeFailed(ctx, "versions.list", err)
		}
		for _, v := range vs {
			out.Versions = append(out.Versions, versionProto(v))
		}
		return connect.NewResponse(out), nil
	}
	// A team's versions are found among everyone's, which may be many
	// more: read the history in large pages, whatever the caller's
	// limit, until the caller's page is full or the history ends.
	for {
		vs, err := s.listVersions(ctx, before, teamScanPage)
		if err != nil {
			return nil, s.storeFailed(ctx, "versions.list", err)
		}
		for _, v := range vs {
			if vp, ok := view(c, versionProto(v)); ok {
				out.Versions = append(out.Versions, vp)
				if len(out.Versions) == limit {
					return connect.NewResponse(out), nil
				}
			}
		}
		if len(vs) < teamScanPage {
			return connect.NewResponse(out), nil
		}
		before = vs[len(vs)-1].Number
	}
}

// teamScanPage is how many versions a team's ListVersions reads from the
// store at a time.
const teamScanPage = 1000

// GetVersion returns one version; a team admin gets only a version that
// changed its team's objects, with its team's part of the diff.
func (s *Service) GetVersion(ctx context.Context, req *connect.Request[adminv1.GetVersionRequest]) (*connect.Response[adminv1.GetVersionResponse], error) {
	c, err := s.authenticate(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	v, err := s.version(ctx, req.Msg.GetNumber())
	if err != nil {
		return nil, err
	}
	vp, ok := view(c, versionProto(v))
	if !ok {
		return nil, s.denyRead(ctx, c, "versions.get", fmt.Sprintf("version %d", v.Number))
	}
	return connect.NewResponse(&adminv1.GetVersionResponse{Version: vp}), nil
}

// view is what caller c may see of version v: all of it for a platform
// admin. A team admin sees only versions whose diff touches its team's
// objects, with only those lines; the message and the author only when
// every line of the diff is its team's (a platform change, or another
// team's, says nothing to it).
func view(c caller, v *adminv1.Version) (*adminv1.Version, bool) {
	if c.platform() {
		return v, true
	}
	own, all := teamLines(v.GetDiff(), c.team)
	if len(own) == 0 {
		return nil, false
	}
	out := proto.CloneOf(v)
	out.Diff = strings.Join(own, "\n")
	if !all {
		out.Message, out.CreatedBy = "", ""
	}
	return out, true
}

// teamLines picks team's lines out of a Diff, and says whether they are
// all of them.
func teamLines(diff, team string) (own []string, all bool) {
	all = true
	for _, l := range strings.Split(diff, "\n") {
		if l == "" {
			continue
		}
		if ownLine(l, team) {
			own = append(own, l)
		} else {
			all = false
		}
	}
	return own, all
}

// ownLine reports whether a Diff line ("~ orders route get", "+ team
// orders") is about team's objects.
func ownLine(l, team string) bool {
	if len(l) < 2 {
		return false
	}
	rest := l[2:]
	if rest == "team "+team {
		return true
	}
	for _, kind := range []string{" route ", " cluster ", " service "} {
		if strings.HasPrefix(rest, team+kind) {
			return true
		}
	}
	return false
}

// denyRead refuses a team admin a read of what is not its team's, and
// audits it.
func (s *Service) denyRead(ctx context.Context, c caller, action, object string) error {
	detail := "a team-admin token of team " + c.team + " reads that team's versions only"
	s.audit(ctx, &store.AuditEntry{Actor: c.id, Team: c.team, Action: action, Object: object, Outcome: "permission_denied", Detail: detail})
	return connect.NewError(connect.CodePermissionDenied, errors.New(detail))
}

func (s *Service) version(ctx context.Context, n int64) (store.Version, error) {
	v, err := s.store.Get(ctx, n)
	if errors.Is(err, store.ErrNotFound) {
		return v, connect.NewError(connect.CodeNotFound, fmt.Errorf("no version %d", n))
	}
	if err != nil {
		return v, s.storeFailed(ctx, "versions.get", err)
	}
	return v, nil
}

// DiffVersions describes the change from version from (0: nothing) to
// version to.
func (s *Service) DiffVersions(ctx context.Context, req *connect.Request[adminv1.DiffVersionsRequest]) (*connect.Response[adminv1.DiffVersionsResponse], error) {
	c, err := s.authenticate(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	configs := [2]*adminv1.Config{{}, {}}
	for i, n := range []int64{req.Msg.GetFrom(), req.Msg.GetTo()} {
		if n == 0 {
			continue
		}
		v, err := s.version(ctx, n)
		if err != nil {
			return nil, err
		}
		if configs[i], err = s.config(ctx, v); err != nil {
			return nil, s.storeFailed(ctx, "versions.diff", err)
		}
	}
	diff := Diff(configs[0], configs[1])
	if !c.platform() {
		// A team admin sees what changed of its own team's objects only.
		own, _ := teamLines(diff, c.team)
		diff = strings.Join(own, "\n")
	}
	return connect.NewResponse(&adminv1.DiffVersionsResponse{Diff: diff}), nil
}

// Rollback creates a new version equal to version to: its config and its
// snapshot, byte for byte, so nodes that ran it know it by its sha256.
func (s *Service) Rollback(ctx context.Context, req *connect.Request[adminv1.RollbackRequest]) (*connect.Response[adminv1.RollbackResponse], error) {
	to := req.Msg.GetTo()
	object := fmt.Sprintf("version %d", to)
	c, err := s.authorize(ctx, req.Header(), "", "rollback", object)
	if err != nil {
		return nil, err
	}
	target, err := s.version(ctx, to)
	if err != nil {
		return nil, err
	}
	targetCfg, err := s.config(ctx, target)
	if err != nil {
		return nil, s.storeFailed(ctx, "rollback", err)
	}
	cfgBytes, err := s.store.Blob(ctx, target.ConfigSHA256)
	if err != nil {
		return nil, s.storeFailed(ctx, "rollback", err)
	}
	snapBytes, err := s.store.Blob(ctx, target.SnapshotSHA256)
	if err != nil {
		return nil, s.storeFailed(ctx, "rollback", err)
	}
	msg := req.Msg.GetMessage()
	if msg == "" {
		msg = object
	}
	var diff string
	var current store.Version
	v, err := s.versions.Commit(ctx, func(ctx context.Context, prev store.Version) (store.Commit, error) {
		current = prev
		if prev.SnapshotSHA256 == target.SnapshotSHA256 {
			return store.Commit{}, versions.ErrSkip
		}
		cfg := &adminv1.Config{}
		if prev.Number > 0 {
			var err error
			if cfg, err = s.config(ctx, prev); err != nil {
				return store.Commit{}, s.storeFailed(ctx, "rollback", err)
			}
		}
		diff = Diff(cfg, targetCfg)
		return store.Commit{
			Config: cfgBytes, Snapshot: snapBytes, CreatedBy: c.id, Message: "rollback to " + object + ": " + msg, Diff: diff, RollbackOf: to,
			Audit: store.AuditEntry{Actor: c.id, Action: "rollback", Object: object, Detail: msg},
		}, nil
	})
	switch {
	case errors.Is(err, versions.ErrSkip):
		return connect.NewResponse(&adminv1.RollbackResponse{Change: &adminv1.Change{Version: versionProto(current)}}), nil
	case errors.Is(err, versions.ErrBusy):
		return nil, connect.NewError(connect.CodeAborted, errors.New("rollback: other changes kept landing first; try again"))
	case err != nil && connect.CodeOf(err) == connect.CodeUnknown:
		return nil, s.storeFailed(ctx, "rollback", err)
	case err != nil:
		return nil, err
	}
	return connect.NewResponse(&adminv1.RollbackResponse{Change: &adminv1.Change{Version: versionProto(v), Changed: true, Diff: diff}}), nil
}
