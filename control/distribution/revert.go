package distribution

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/control/compile"
	"github.com/portico-gw/portico/control/revert"
	"github.com/portico-gw/portico/control/rollout"
	"github.com/portico-gw/portico/control/store"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
)

// A rollout stages a train: every version committed since the one the
// fleet ran (ro.previous) up to the newest (ro.next), each one change. A
// regression, a NACK or an abort is the fault of one change of the train;
// it is undone alone (control/revert), as a new version: the newest
// config minus that change's objects, compiled like any change. The
// nodes the rollout had reached get the revert at once, and the rollout
// goes on with it from the stage it had reached, from the same version,
// on the same nodes: the other changes of the train stay.

// continuation is the rollout a revert version goes on with.
type continuation struct {
	previous *target
	reached  map[string]bool
	stage    int
	// same: the revert's config is the previous version's, so there is
	// nothing left to stage: every node gets it at once.
	same bool
	// paused: the rollout was paused, and stays so.
	paused bool
	// oldRate and oldProbeRate are the judge's baselines so far
	// (rollout.Judge): at a stage with few or no nodes left on the old
	// version, they are all the judge has to compare with.
	oldRate, oldProbeRate map[string]float64
	// waived are the routes an operator let a stage pass without
	// evidence for, on version waivedOn: the train's later versions do
	// not wait for them again, unless they change them.
	waived   map[string]bool
	waivedOn *target
}

// change is one version of a train, as committed.
type change struct {
	number   int64
	config   *adminv1.Config
	snapshot []byte
}

// pickFunc chooses the bad change of a train: before and after are the
// versions either side of it.
type pickFunc func(before, after change) bool

// pickRoute picks the change that touched route (a regression of it).
func pickRoute(route string) pickFunc {
	return func(before, after change) bool {
		m, err := rollout.ChangedRoutes(before.snapshot, after.snapshot)
		return err == nil && m.Match(route)
	}
}

// pickObjects picks the change that touched one of objs (a NACK's refused
// objects).
func pickObjects(objs []RefusedObject) pickFunc {
	return func(before, after change) bool {
		touched := revert.Changed(before.config, after.config)
		for _, o := range objs {
			if revert.Touches(touched, o.Team, o.Kind, o.Name) {
				return true
			}
		}
		return false
	}
}

// pickNewest picks the newest change of the train (an abort).
func pickNewest(change, change) bool { return true }

// revertChange undoes the change of ro's train that pick selects, newest
// first, committed as a new version that Publish continues ro with. It
// reports false, having done nothing, when there is no such change or it
// cannot be read: the caller then turns the whole train back. A revert
// that cannot be made (the change's objects were changed again since, or
// the rest does not compile without it) halts the rollout where it is,
// with why in its evidence.
func (s *Server) revertChange(ro *staged, action string, pick pickFunc) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad, before, err := s.findChange(ctx, ro.previous.version, ro.next.version, pick)
	if err != nil {
		s.log.Error("rollout: finding the change to revert failed; turning the whole train back", "version", ro.next.version, "err", err)
		return false
	}
	if bad.number == 0 {
		return false
	}
	prevCfg, err := s.loadConfig(ctx, ro.previous.version)
	if err != nil {
		s.log.Error("rollout: reading the version the fleet ran failed; turning the whole train back", "version", ro.previous.version, "err", err)
		return false
	}
	s.mu.Lock()
	evidence := ro.evidence
	s.mu.Unlock()
	var undone []revert.Object
	_, err = s.opts.Versions.Commit(ctx, func(ctx context.Context, latest store.Version) (store.Commit, error) {
		cfg, err := s.loadConfig(ctx, latest.Number)
		if err != nil {
			return store.Commit{}, err
		}
		next, objs, err := revert.Undo(before.config, bad.config, cfg)
		if err != nil {
			return store.Commit{}, err
		}
		number := latest.Number + 1
		same := proto.Equal(next, prevCfg)
		var cfgBytes, snapBytes []byte
		var rollbackOf int64
		if same {
			// Nothing of the train is left: the version the fleet ran,
			// again, byte for byte (its snapshot ran everywhere).
			prev, err := s.store.Get(ctx, ro.previous.version)
			if err != nil {
				return store.Commit{}, err
			}
			if cfgBytes, err = s.store.Blob(ctx, prev.ConfigSHA256); err != nil {
				return store.Commit{}, err
			}
			if snapBytes, err = s.store.Blob(ctx, prev.SnapshotSHA256); err != nil {
				return store.Commit{}, err
			}
			rollbackOf = prev.Number
		} else {
			res, err := compile.Compile(next, "v"+strconv.FormatInt(number, 10))
			if err != nil {
				return store.Commit{}, fmt.Errorf("the config without version %d does not compile: %w", bad.number, err)
			}
			if cfgBytes, err = (proto.MarshalOptions{Deterministic: true}).Marshal(next); err != nil {
				return store.Commit{}, err
			}
			snapBytes = res.Bytes
		}
		undone = objs
		diff := make([]string, len(objs))
		for i, o := range objs {
			diff[i] = "~ " + o.String()
		}
		s.mu.Lock()
		if s.continuations == nil {
			s.continuations = map[int64]*continuation{}
		}
		c := ro.continuationLocked()
		c.paused, c.same = false, same
		s.continuations[number] = c
		s.mu.Unlock()
		return store.Commit{
			Config: cfgBytes, Snapshot: snapBytes, CreatedBy: "system", RollbackOf: rollbackOf,
			Message: fmt.Sprintf("%s of version %d: %s", action, bad.number, evidence),
			Diff:    strings.Join(diff, "\n"),
			Audit: store.AuditEntry{Actor: "system", Team: teamOf(objs), Action: action, Object: fmt.Sprintf("version %d", bad.number),
				Outcome: "ok", Detail: fmt.Sprintf("%s; undone: %s", evidence, objectList(objs)), Version: number},
		}, nil
	})
	if err == nil {
		s.log.Warn("rollout: one change reverted", "version", bad.number, "objects", objectList(undone), "evidence", evidence)
		return true
	}
	s.mu.Lock()
	ro.state = RolloutHalted
	ro.evidence = fmt.Sprintf("%s; the revert of version %d was refused: %v", evidence, bad.number, err)
	s.saveLocked(ro)
	s.notifyLocked()
	s.mu.Unlock()
	s.log.Error("rollout: the revert of one change was refused; the rollout halts where it is", "version", bad.number, "err", err)
	s.record("rollout.halt", ro)
	return true
}

// findChange walks the train (from, to] from the newest version down and
// returns the first change pick selects, with the version before it; a
// zero change when none is.
func (s *Server) findChange(ctx context.Context, from, to int64, pick pickFunc) (bad, before change, err error) {
	after, err := s.loadChange(ctx, to)
	if err != nil {
		return change{}, change{}, err
	}
	for n := to; n > from; n-- {
		prev, err := s.loadChange(ctx, n-1)
		if err != nil {
			return change{}, change{}, err
		}
		if pick(prev, after) {
			return after, prev, nil
		}
		after = prev
	}
	return change{}, change{}, nil
}

func (s *Server) loadChange(ctx context.Context, number int64) (change, error) {
	v, err := s.store.Get(ctx, number)
	if err != nil {
		return change{}, err
	}
	snap, err := s.store.Blob(ctx, v.SnapshotSHA256)
	if err != nil {
		return change{}, err
	}
	cfg, err := s.loadConfig(ctx, number)
	if err != nil {
		return change{}, err
	}
	return change{number: number, config: cfg, snapshot: snap}, nil
}

func (s *Server) loadConfig(ctx context.Context, number int64) (*adminv1.Config, error) {
	cfg := &adminv1.Config{}
	if number == 0 {
		return cfg, nil
	}
	v, err := s.store.Get(ctx, number)
	if err != nil {
		return nil, err
	}
	b, err := s.store.Blob(ctx, v.ConfigSHA256)
	if err != nil {
		return nil, err
	}
	if err := proto.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("version %d: the stored config does not decode: %w", number, err)
	}
	return cfg, nil
}

// continueLocked goes on with a revert version: the rollout c describes,
// now of next (or, when nothing is left to stage, next everywhere).
func (s *Server) continueLocked(next *target, c *continuation) {
	next.previous = c.previous
	s.replaceRolloutLocked()
	if c.same {
		s.ranEverywhere[next.sha256] = true
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	ro := &staged{next: next, previous: c.previous, reached: c.reached, stage: c.stage, state: RolloutRunning, cancel: cancel, oldRate: c.oldRate, oldProbeRate: c.oldProbeRate,
		waived: c.waived, waivedOn: c.waivedOn}
	if c.paused {
		ro.state, ro.resume = RolloutPaused, make(chan struct{})
	}
	s.rollout = ro
	s.saveLocked(ro)
	go s.runRollout(ctx, ro)
}

// continuationLocked is the rollout ro is, to go on with another
// version: from the same version, at the same stage, on the same nodes,
// paused if it is, with the judge's baseline so far.
func (ro *staged) continuationLocked() *continuation {
	return &continuation{previous: ro.previous, reached: maps.Clone(ro.reached), stage: ro.stage,
		paused: ro.state == RolloutPaused, oldRate: maps.Clone(ro.judge.OldRate), oldProbeRate: maps.Clone(ro.judge.OldProbeRate), waived: maps.Clone(ro.waived), waivedOn: ro.waivedOn}
}

func teamOf(objs []revert.Object) string {
	team := ""
	for i, o := range objs {
		if i > 0 && o.Team != team {
			return ""
		}
		team = o.Team
	}
	return team
}

func objectList(objs []revert.Object) string {
	names := make([]string, len(objs))
	for i, o := range objs {
		names[i] = o.String()
	}
	return strings.Join(names, ", ")
}
