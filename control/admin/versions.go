package admin

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control/store"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
)

// ListVersions lists versions, newest first; any admin may.
func (s *Service) ListVersions(ctx context.Context, req *connect.Request[adminv1.ListVersionsRequest]) (*connect.Response[adminv1.ListVersionsResponse], error) {
	if _, err := s.authenticate(ctx, req.Header()); err != nil {
		return nil, err
	}
	vs, err := s.store.List(ctx, req.Msg.GetBefore(), int(req.Msg.GetLimit()))
	if err != nil {
		return nil, s.storeFailed(ctx, "versions.list", err)
	}
	out := &adminv1.ListVersionsResponse{}
	for _, v := range vs {
		out.Versions = append(out.Versions, versionProto(v))
	}
	return connect.NewResponse(out), nil
}

// GetVersion returns one version.
func (s *Service) GetVersion(ctx context.Context, req *connect.Request[adminv1.GetVersionRequest]) (*connect.Response[adminv1.GetVersionResponse], error) {
	if _, err := s.authenticate(ctx, req.Header()); err != nil {
		return nil, err
	}
	v, err := s.version(ctx, req.Msg.GetNumber())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&adminv1.GetVersionResponse{Version: versionProto(v)}), nil
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
	if _, err := s.authenticate(ctx, req.Header()); err != nil {
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
	return connect.NewResponse(&adminv1.DiffVersionsResponse{Diff: Diff(configs[0], configs[1])}), nil
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
	for range commitAttempts {
		prev, cfg, err := s.current(ctx)
		if err != nil {
			return nil, s.storeFailed(ctx, "rollback", err)
		}
		if prev.SnapshotSHA256 == target.SnapshotSHA256 {
			return connect.NewResponse(&adminv1.RollbackResponse{Change: &adminv1.Change{Version: versionProto(prev)}}), nil
		}
		diff := Diff(cfg, targetCfg)
		v, err := s.store.Commit(ctx, prev.Number, store.Commit{
			Config: cfgBytes, Snapshot: snapBytes, CreatedBy: c.id, Message: "rollback to " + object + ": " + msg, Diff: diff, RollbackOf: to,
			Audit: store.AuditEntry{Actor: c.id, Action: "rollback", Object: object, Detail: msg},
		})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, s.storeFailed(ctx, "rollback", err)
		}
		if s.onCommit != nil {
			s.onCommit(v.Number)
		}
		return connect.NewResponse(&adminv1.RollbackResponse{Change: &adminv1.Change{Version: versionProto(v), Changed: true, Diff: diff}}), nil
	}
	return nil, connect.NewError(connect.CodeAborted, errors.New("rollback: other changes kept landing first; try again"))
}
