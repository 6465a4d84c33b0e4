package distribution

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/portico-gw/portico/control/rollout"
	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/control/versions"
	"github.com/portico-gw/portico/gateway/routestats"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
)

// RolloutOptions stage a new version through the fleet. The zero value
// turns staging off: every version goes to every node at once.
type RolloutOptions struct {
	// Bake is how long each stage runs before the control plane compares
	// the new version with the old; 0 turns staging off.
	Bake time.Duration
	// AckTimeout bounds the wait for a stage's nodes to run the version
	// (default 30 s); a stage that does not get there stops the rollout.
	AckTimeout time.Duration
	// MinRequests is how many calls of a changed route the new version's
	// nodes must have served in a stage for it to be judged on them
	// (default 20); with fewer, it is judged on the canaries' synthetic
	// probes, MinProbes of them at least (default 3). A stage with a
	// changed route that has neither bakes on until it has, or until
	// MaxBake: a quiet canary is not evidence.
	MinRequests, MinProbes uint64
	// ProbeInterval is how often each prober probes each changed route
	// (default a tenth of Bake, between 100 ms and 1 s).
	ProbeInterval time.Duration
	// MaxBake bounds how long a stage bakes while waiting for evidence
	// (default 5 × Bake); a stage still without it then pauses the
	// rollout, with the routes it could not judge, until an operator
	// resumes it (or aborts it).
	MaxBake time.Duration
	// MaxErrorRateIncrease is how much higher the new version's share of
	// failed calls may be than the old one's (default 0.05: five points).
	MaxErrorRateIncrease float64
	// MaxLatencyRatio and MinLatencyIncrease: the new version's p99 may not
	// exceed the old one's by both this factor and this much (defaults
	// 2 and 50 ms).
	MaxLatencyRatio    float64
	MinLatencyIncrease time.Duration
}

// The rollout defaults: what a zero field of RolloutOptions means, and
// DefaultBake, the stage length `portico control` stages with unless told.
const (
	DefaultBake                 = time.Minute
	DefaultAckTimeout           = 30 * time.Second
	DefaultMinRequests          = 20
	DefaultMinProbes            = 3
	DefaultMaxErrorRateIncrease = 0.05
)

func (o RolloutOptions) withDefaults() RolloutOptions {
	if o.AckTimeout <= 0 {
		o.AckTimeout = DefaultAckTimeout
	}
	if o.MinRequests == 0 {
		o.MinRequests = DefaultMinRequests
	}
	if o.MinProbes == 0 {
		o.MinProbes = DefaultMinProbes
	}
	if o.MaxBake < o.Bake {
		o.MaxBake = 5 * o.Bake
	}
	if o.MaxErrorRateIncrease <= 0 {
		o.MaxErrorRateIncrease = DefaultMaxErrorRateIncrease
	}
	if o.MaxLatencyRatio <= 0 {
		o.MaxLatencyRatio = 2
	}
	if o.MinLatencyIncrease <= 0 {
		o.MinLatencyIncrease = 50 * time.Millisecond
	}
	return o
}

// stageNames are the stages, in order (control/rollout).
var stageNames = rollout.Stages

// Rollout states.
const (
	RolloutRunning  = "running"
	RolloutPaused   = "paused"
	RolloutDone     = "done"
	RolloutReverted = "reverted" // a regression: the previous version is back everywhere
	RolloutHalted   = "halted"   // a NACK, or a stage's nodes did not take it
	RolloutAborted  = "aborted"  // by an operator: the previous version is back everywhere
	RolloutReplaced = "replaced" // a newer version was published
)

// staged is one version on its way through the stages.
type staged struct {
	next, previous *target
	// judge judges the stages of the routes the change touched.
	judge    rollout.Judge
	reached  map[string]bool // nodes assigned next
	stage    int
	state    string
	evidence string
	cancel   context.CancelFunc
	resume   chan struct{} // closed on resume while paused
	// holding: paused, the rollout waits at its stage for a resume.
	holding bool
	// resumed: taken up by a control plane that restarted (resume).
	resumed bool
	// oldRate and oldProbeRate seed the judge's baselines: a train that
	// goes on with a new version keeps what it measured on the old one.
	oldRate, oldProbeRate map[string]float64
	// probes selects the routes the probers probe (syncProbesLocked):
	// the changed ones, nil until they are known.
	probes *distributionv1.ProbeRoutes
	// probeEpoch counts resumes: each sends the probers their set again,
	// for a fresh duration.
	probeEpoch int
	// waived are the routes an operator let a stage pass without
	// evidence for (holdUnjudged), on version waivedOn: later stages do
	// not wait for them, nor do the train's later versions that leave
	// them as they were.
	waived   map[string]bool
	waivedOn *target
	// unjudged are the routes ro is paused for want of evidence on,
	// which a resume waives.
	unjudged []string
}

// ended reports whether ro is over: done, reverted, aborted or replaced.
// A halted rollout is not: its nodes stay where it stopped.
func (ro *staged) ended() bool {
	return ro.state != RolloutRunning && ro.state != RolloutPaused && ro.state != RolloutHalted
}

// RolloutStatus is the state of the newest staged rollout.
type RolloutStatus struct {
	Version  int64
	Previous int64
	Stage    string
	State    string
	// Evidence says why a rollout was reverted or halted.
	Evidence string
	// Reached is how many nodes were assigned the version.
	Reached int
	// Holding says the rollout is paused and has come to a point where it
	// waits for a resume (its stage's bake is over, or the next stage is
	// due): it goes no further until then.
	Holding bool
	// Routes are the changed routes' calls in the stage judged last.
	Routes []rollout.RouteEvidence
}

// startRolloutLocked stages next, replacing the fleet's version previous.
func (s *Server) startRolloutLocked(next, previous *target) {
	s.replaceRolloutLocked()
	ctx, cancel := context.WithCancel(context.Background())
	ro := &staged{next: next, previous: previous, reached: map[string]bool{}, state: RolloutRunning, cancel: cancel}
	s.rollout = ro
	// The canaries at once, with the publish: a pause that comes right
	// after it holds the version there, not before it.
	s.assignStageLocked(ro, 0)
	go s.runRollout(ctx, ro)
}

// replaceRolloutLocked ends the rollout in progress, if any, as replaced
// by a newer version.
func (s *Server) replaceRolloutLocked() {
	if ro := s.rollout; ro != nil && !ro.ended() {
		ro.state = RolloutReplaced
		ro.cancel()
		s.saveLocked(ro)
	}
}

// assignStageLocked assigns ro's version to the nodes of stage i and
// pushes it.
func (s *Server) assignStageLocked(ro *staged, i int) {
	ro.stage = i
	for _, id := range s.stageNodesLocked(i) {
		ro.reached[id] = true
	}
	s.saveLocked(ro)
	for _, n := range s.nodes {
		s.pushLocked(n)
	}
	s.notifyLocked()
}

// runRollout takes ro through the stages.
func (s *Server) runRollout(ctx context.Context, ro *staged) {
	opts := s.opts.Rollout
	defer ro.cancel()
	// Which routes the change touched: both snapshots decoded here, off
	// the lock the streams take. Only judging, after the first bake, reads
	// it.
	changed, err := rollout.ChangedRoutes(ro.previous.data, ro.next.data)
	if err != nil {
		s.log.Error("rollout: comparing versions failed; judging every route", "err", err)
	}
	s.mu.Lock()
	waivedOn := ro.waivedOn
	s.mu.Unlock()
	var rewaive rollout.Matcher // the waived routes changed since the waiver
	if waivedOn != nil && waivedOn != ro.next {
		rewaive, _ = rollout.ChangedRoutes(waivedOn.data, ro.next.data) // undecodable: every route
	}
	s.mu.Lock()
	ro.judge = rollout.Judge{
		Criteria: rollout.Criteria{MinRequests: opts.MinRequests, MinProbes: opts.MinProbes, MaxErrorRateIncrease: opts.MaxErrorRateIncrease,
			MaxLatencyRatio: opts.MaxLatencyRatio, MinLatencyIncrease: opts.MinLatencyIncrease},
		Changed: changed, Next: ro.next.version, Previous: ro.previous.version, OldRate: ro.oldRate, OldProbeRate: ro.oldProbeRate,
	}
	for r := range ro.waived {
		if rewaive.Match(r) {
			delete(ro.waived, r)
		}
	}
	ro.probes = probeSelection(changed)
	s.syncProbesLocked()
	s.mu.Unlock()
	first := ro.stage
	if ro.resumed {
		// A control plane that restarted mid-rollout: the stage's nodes
		// reconnect first (or AckTimeout passes), so that the stage is
		// judged on them and not on an empty fleet.
		wctx, cancel := context.WithTimeout(ctx, opts.AckTimeout)
		err := s.waitUntil(wctx, func() bool { return s.reachedConnected(ro) })
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Warn("rollout: resuming without every node of the stage back", "version", ro.next.version, "stage", stageNames[first])
		}
	}
	for i := first; i < len(stageNames); i++ {
		// The canaries were assigned when the version was published (a
		// resumed stage when it was reached); each later stage waits
		// while the rollout is paused.
		if i > first {
			if !s.waitWhilePaused(ctx, ro) {
				return
			}
			s.mu.Lock()
			if ro.state != RolloutRunning {
				s.mu.Unlock()
				return
			}
			s.assignStageLocked(ro, i)
			s.mu.Unlock()
		}

		// The stage's nodes run the version (or one refuses it).
		wctx, cancel := context.WithTimeout(ctx, opts.AckTimeout)
		err := s.waitUntil(wctx, func() bool { return s.stageSettled(ro) })
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		if ro.state != RolloutRunning && ro.state != RolloutPaused {
			s.mu.Unlock() // aborted or replaced meanwhile
			return
		}
		if ro.next.halted != nil || err != nil {
			ro.state, ro.evidence = RolloutHalted, fmt.Sprintf("stage %s: not every node ran it within %v", stageNames[i], opts.AckTimeout)
			h := ro.next.halted
			if h != nil {
				ro.evidence = fmt.Sprintf("node %s refused it: %s", h.Node, h.Error)
			}
			s.notifyLocked()
			s.mu.Unlock()
			if h != nil && len(h.Objects) > 0 {
				// The node named what it refused: the change that touched
				// it is undone, the rest of the train goes on.
				s.mu.Lock()
				ro.state = RolloutReverted
				s.saveLocked(ro)
				s.mu.Unlock()
				if s.revertChange(ro, "rollout.revert", pickObjects(h.Objects)) {
					return
				}
				s.mu.Lock()
				ro.state = RolloutHalted
				s.saveLocked(ro)
				s.mu.Unlock()
			}
			s.record("rollout.halt", ro)
			return
		}
		if stageNames[i] == "all" {
			// Every node runs it: going back to it later is not staged.
			s.ranEverywhere[ro.next.sha256] = true
		}
		s.mu.Unlock()
		// The bake's counters start from reports sent since the stage's
		// nodes switched: a report from before would count calls the
		// old version served as the new one's.
		if !s.waitReports(ctx, s.now()) {
			return
		}
		s.mu.Lock()
		before := s.countsLocked()
		s.mu.Unlock()

		// Bake, then judge the changed routes, new nodes against old;
		// bake on, up to MaxBake, while they were called too few times
		// to judge.
		bakeEnd := time.Now().Add(opts.MaxBake)
		wait := opts.Bake
		for {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if !s.waitWhilePaused(ctx, ro) {
				return
			}
			// The judge reads the nodes' counters as they last reported
			// them: wait until every node that reports has done so since
			// the bake ended, or a bake shorter than the nodes' report
			// interval is judged on counters from before it (a change
			// failing every call once passed every stage unjudged).
			if !s.waitReports(ctx, s.now()) {
				return
			}
			s.mu.Lock()
			if ro.state == RolloutPaused {
				// Paused while the reports came in: judged once resumed.
				s.mu.Unlock()
				wait = 0
				continue
			}
			if ro.state != RolloutRunning {
				// Aborted or replaced during the bake: a newer target may
				// stand, and must not be reverted from here.
				s.mu.Unlock()
				return
			}
			evidence, unjudged := s.judgeLocked(ro, before, s.countsLocked())
			unjudged = ro.unwaived(unjudged)
			if evidence != "" {
				ro.state, ro.evidence = RolloutReverted, fmt.Sprintf("stage %s: %s", stageNames[i], evidence)
				failed := ro.judge.Failed
				s.saveLocked(ro)
				s.mu.Unlock()
				// Undo the change of the train that touched the route;
				// failing that, the whole train.
				if failed != "" && s.revertChange(ro, "rollout.revert", pickRoute(failed)) {
					return
				}
				s.mu.Lock()
				s.log.Warn("rollout reverted", "version", ro.next.version, "to", ro.previous.version, "evidence", ro.evidence)
				s.revertLocked(ro)
				s.mu.Unlock()
				s.commitRevert(ro, "rollout.revert")
				return
			}
			s.mu.Unlock()
			if unjudged == "" {
				break
			}
			if !time.Now().Before(bakeEnd) {
				// A stage never passes on no evidence: it waits for an
				// operator.
				ok, again := s.holdUnjudged(ctx, ro, stageNames[i], unjudged)
				if !ok {
					return
				}
				if again {
					wait = 0
					continue
				}
				break
			}
			wait = min(max(opts.Bake/4, 10*time.Millisecond), time.Until(bakeEnd))
		}
	}
	if !s.waitWhilePaused(ctx, ro) {
		return
	}
	s.mu.Lock()
	if ro.state == RolloutRunning {
		ro.state = RolloutDone
		s.ranEverywhere[ro.next.sha256] = true
		// Nodes that connected during the last stage get it too.
		for _, n := range s.nodes {
			s.pushLocked(n)
		}
	}
	s.notifyLocked()
	s.mu.Unlock()
}

// record keeps what happened to a rollout in the audit log, with its
// evidence: the version's lasting record of why it did not go everywhere.
func (s *Server) record(action string, ro *staged) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Version is the version the fleet keeps: what a control plane that
	// restarts publishes instead of the halted one.
	err := s.store.AppendAudit(ctx, &store.AuditEntry{Actor: "system", Action: action,
		Object: fmt.Sprintf("version %d", ro.next.version), Outcome: "ok", Detail: ro.evidence, Version: ro.previous.version})
	if err != nil {
		s.log.Error("recording a rollout in the audit log failed", "action", action, "version", ro.next.version, "err", err)
	}
}

// commitRevert records a revert (or an abort) as a new version equal to
// the one before, so that the newest version is what the fleet runs: a
// control plane that restarts publishes that, not the version that was
// turned back. A newer version committed meanwhile supersedes both, and
// then only the audit entry is written.
func (s *Server) commitRevert(ro *staged, action string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	audit := store.AuditEntry{Actor: "system", Action: action, Object: fmt.Sprintf("version %d", ro.next.version), Detail: ro.evidence}
	_, err := s.opts.Versions.Commit(ctx, func(ctx context.Context, latest store.Version) (store.Commit, error) {
		if latest.Number != ro.next.version {
			return store.Commit{}, versions.ErrSkip // superseded
		}
		prev, err := s.store.Get(ctx, ro.previous.version)
		if err != nil {
			return store.Commit{}, err
		}
		cfg, err := s.store.Blob(ctx, prev.ConfigSHA256)
		if err != nil {
			return store.Commit{}, err
		}
		snap, err := s.store.Blob(ctx, prev.SnapshotSHA256)
		if err != nil {
			return store.Commit{}, err
		}
		return store.Commit{
			Config: cfg, Snapshot: snap, CreatedBy: "system", RollbackOf: prev.Number,
			Message: fmt.Sprintf("%s of version %d: %s", action, ro.next.version, ro.evidence),
			Diff:    fmt.Sprintf("the config of version %d again", prev.Number),
			Audit:   audit,
		}, nil
	})
	if err == nil {
		return
	}
	if !errors.Is(err, versions.ErrSkip) {
		s.log.Error("recording a revert as a version failed", "version", ro.next.version, "err", err)
	}
	if err := s.store.AppendAudit(ctx, &audit); err != nil {
		s.log.Error("recording a rollout in the audit log failed", "action", action, "version", ro.next.version, "err", err)
	}
}

// waitWhilePaused returns once ro is not paused; false if ctx ended.
func (s *Server) waitWhilePaused(ctx context.Context, ro *staged) bool {
	for {
		s.mu.Lock()
		paused, resume := ro.state == RolloutPaused, ro.resume
		if ro.holding != paused {
			ro.holding = paused
			s.notifyLocked()
		}
		s.mu.Unlock()
		if !paused {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-resume:
		}
	}
}

// revertLocked puts every node back on ro's previous version at once.
func (s *Server) revertLocked(ro *staged) {
	delete(s.ranEverywhere, ro.next.sha256) // it did not pass: going back to it is staged
	back := &target{version: ro.previous.version, sha256: ro.previous.sha256, data: ro.previous.data}
	s.target = back
	ro.cancel()
	for _, n := range s.nodes {
		s.pushLocked(n)
	}
	s.notifyLocked()
}

// stageSettled reports whether every node ro reached runs its version,
// or the version is halted.
func (s *Server) stageSettled(ro *staged) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ro.next.halted != nil {
		return true
	}
	for id := range ro.reached {
		if n := s.nodes[id]; n != nil && n.SHA256 != ro.next.sha256 && !ro.next.odd[id] {
			return false
		}
	}
	return true
}

// stageNodesLocked lists the nodes stage i assigns, cumulative
// (rollout.StageNodes).
func (s *Server) stageNodesLocked(i int) []string {
	nodes := make([]rollout.Node, 0, len(s.nodes))
	for _, n := range s.nodes {
		nodes = append(nodes, rollout.Node{ID: n.ID, Region: n.Region, Canary: n.Labels["canary"] == "true"})
	}
	return rollout.StageNodes(i, nodes)
}

// counts are a node's counters as it last reported them: its real calls
// and its synthetic probes, by route id.
type counts struct {
	routes, probed map[string]routestats.Counts
}

// countsLocked copies every node's latest counters.
func (s *Server) countsLocked() map[string]counts {
	out := make(map[string]counts, len(s.nodes))
	for id, n := range s.nodes {
		out[id] = counts{routes: n.routes, probed: n.probed}
	}
	return out
}

// judgeLocked judges the stage ro reached (rollout.Judge) on the nodes
// still connected: those assigned the version that run it, against those
// not assigned it.
func (s *Server) judgeLocked(ro *staged, before, after map[string]counts) (evidence, unjudged string) {
	var obs []rollout.Observation
	for id, now := range after {
		onNew := ro.reached[id]
		if n := s.nodes[id]; n == nil || (onNew && n.SHA256 != ro.next.sha256) {
			continue
		}
		b := before[id]
		obs = append(obs, rollout.Observation{Before: b.routes, After: now.routes, ProbesBefore: b.probed, ProbesAfter: now.probed, OnNew: onNew})
	}
	return ro.judge.Stage(ro.stage, obs)
}

// holdUnjudged pauses ro at stage, whose bake ran to MaxBake with routes
// it has no evidence for (too few calls, too few probes), until an
// operator resumes it, and records why in its evidence and the audit log.
// It returns ok false if ctx ended, and again true if an operator had
// paused ro meanwhile: the stage is to be judged again once resumed.
func (s *Server) holdUnjudged(ctx context.Context, ro *staged, stage, routes string) (ok, again bool) {
	opts := s.opts.Rollout
	s.mu.Lock()
	switch ro.state {
	case RolloutPaused:
		s.mu.Unlock()
		return true, true
	case RolloutRunning:
	default:
		s.mu.Unlock()
		return true, false // aborted or replaced meanwhile: the caller sees which
	}
	ro.state, ro.resume = RolloutPaused, make(chan struct{})
	ro.evidence = fmt.Sprintf("stage %s: no evidence for route %s after %v (fewer than %d calls and %d synthetic probes on version %d): paused; resume to go on without it, abort to undo the newest change",
		stage, strings.ReplaceAll(routes, ",", ", "), opts.MaxBake, opts.MinRequests, opts.MinProbes, ro.next.version)
	ro.unjudged = strings.Split(routes, ",")
	evidence := ro.evidence
	s.notifyLocked()
	s.mu.Unlock()
	s.log.Warn("rollout paused: a stage has no evidence for changed routes", "version", ro.next.version, "stage", stage, "routes", routes)
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := s.store.AppendAudit(actx, &store.AuditEntry{Actor: "system", Action: "rollout.pause",
		Object: fmt.Sprintf("version %d", ro.next.version), Outcome: "ok", Detail: evidence})
	cancel()
	if err != nil {
		s.log.Error("recording a rollout in the audit log failed", "action", "rollout.pause", "version", ro.next.version, "err", err)
	}
	// A resume waives the routes (Resume): the stage passes on the
	// operator's word.
	return s.waitWhilePaused(ctx, ro), false
}

// waiveLocked waives the routes ro is held for want of evidence on, as
// an operator's resume does: the stage passes, and later stages (and
// versions of the train that leave them as they are) do not wait for
// them again.
func (ro *staged) waiveLocked() {
	if len(ro.unjudged) == 0 {
		return
	}
	if ro.waived == nil {
		ro.waived = map[string]bool{}
	}
	for _, r := range ro.unjudged {
		ro.waived[r] = true
	}
	ro.waivedOn, ro.unjudged, ro.evidence = ro.next, nil, ""
}

// unwaived drops from routes (comma-separated) those an operator waived.
func (ro *staged) unwaived(routes string) string {
	if routes == "" || len(ro.waived) == 0 {
		return routes
	}
	list := strings.Split(routes, ",")
	list = slices.DeleteFunc(list, func(r string) bool { return ro.waived[r] })
	return strings.Join(list, ",")
}

// Close stops the rollout in progress, if any, where it is: nodes keep
// what they run. What the rollouts' states were is written to the store
// before it returns.
func (s *Server) Close() {
	s.mu.Lock()
	if ro := s.rollout; ro != nil {
		ro.cancel()
	}
	s.mu.Unlock()
	s.stopRows()
	<-s.rowsDone
}

// reachedConnected reports whether every node ro reached is
// connected.
func (s *Server) reachedConnected(ro *staged) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range ro.reached {
		if s.nodes[id] == nil {
			return false
		}
	}
	return true
}

// saveLocked queues ro's state for the store, if it changed since it was
// last queued.
func (s *Server) saveLocked(ro *staged) {
	r := store.Rollout{Version: ro.next.version, Previous: ro.previous.version, Stage: ro.stage, State: ro.state, Evidence: ro.evidence}
	for id := range ro.reached {
		r.Nodes = append(r.Nodes, id)
	}
	slices.Sort(r.Nodes)
	if old, ok := s.saved[r.Version]; ok && old.Previous == r.Previous && old.Stage == r.Stage && old.State == r.State &&
		old.Evidence == r.Evidence && slices.Equal(old.Nodes, r.Nodes) {
		return
	}
	s.saved[r.Version], s.rows[r.Version] = r, r
	select {
	case s.rowsWake <- struct{}{}:
	default:
	}
}

// writeRows writes the queued rollout states until ctx ends, then the
// last ones.
func (s *Server) writeRows(ctx context.Context) {
	defer close(s.rowsDone)
	for {
		done := false
		select {
		case <-ctx.Done():
			done = true
		case <-s.rowsWake:
		}
		s.mu.Lock()
		rows := s.rows
		s.rows = map[int64]store.Rollout{}
		s.mu.Unlock()
		for _, r := range rows {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if err := s.store.SaveRollout(wctx, r); err != nil {
				s.log.Error("recording a rollout's state failed", "version", r.Version, "state", r.State, "err", err)
			}
			cancel()
		}
		if done {
			return
		}
	}
}

// resume takes up, after a restart, the rollout r of version v where the
// control plane stood: the same version, from the same one, at the same
// stage with the same nodes, paused if it was.
func (s *Server) resume(ctx context.Context, v store.Version, r store.Rollout) error {
	load := func(n int64) (*target, error) {
		ver, err := s.store.Get(ctx, n)
		if err != nil {
			return nil, err
		}
		data, err := s.store.Blob(ctx, ver.SnapshotSHA256)
		if err != nil {
			return nil, err
		}
		return &target{version: ver.Number, sha256: ver.SnapshotSHA256, data: data, odd: map[string]bool{}}, nil
	}
	next, err := load(v.Number)
	if err != nil {
		return fmt.Errorf("distribution: resuming the rollout of version %d: %w", v.Number, err)
	}
	prev, err := load(r.Previous)
	if err != nil {
		return fmt.Errorf("distribution: resuming the rollout of version %d: %w", v.Number, err)
	}
	next.previous = prev
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.target != nil {
		return nil // something was published first
	}
	s.target = next
	s.ranEverywhere[prev.sha256] = true
	rctx, cancel := context.WithCancel(context.Background())
	ro := &staged{next: next, previous: prev, reached: map[string]bool{}, state: r.State, cancel: cancel, stage: min(r.Stage, len(stageNames)-1), resumed: true}
	for _, id := range r.Nodes {
		ro.reached[id] = true
	}
	if ro.state == RolloutPaused {
		ro.resume = make(chan struct{})
	}
	s.rollout = ro
	s.log.Info("resuming a rollout", "version", next.version, "from", prev.version, "stage", stageNames[ro.stage], "state", ro.state, "nodes", len(ro.reached))
	go s.runRollout(rctx, ro)
	s.notifyLocked()
	return nil
}

// Pause stops the rollout in progress from going past its current stage.
func (s *Server) Pause() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ro := s.rollout
	if ro == nil || ro.state != RolloutRunning {
		return false
	}
	ro.state, ro.resume = RolloutPaused, make(chan struct{})
	s.notifyLocked()
	return true
}

// Resume lets a paused rollout go on.
func (s *Server) Resume() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ro := s.rollout
	if ro == nil || ro.state != RolloutPaused {
		return false
	}
	ro.state = RolloutRunning
	close(ro.resume)
	ro.waiveLocked()
	ro.probeEpoch++
	s.notifyLocked()
	return true
}

// Abort stops the rollout in progress and puts every node back on the
// version before it.
func (s *Server) Abort() bool {
	s.mu.Lock()
	ro := s.rollout
	if ro == nil || ro.ended() {
		s.mu.Unlock()
		return false
	}
	ro.state, ro.evidence = RolloutAborted, "aborted by an operator"
	ro.cancel()
	s.saveLocked(ro)
	s.mu.Unlock()
	// The newest change of the train is undone; the rest goes on.
	if s.revertChange(ro, "rollout.abort", pickNewest) {
		return true
	}
	s.mu.Lock()
	s.revertLocked(ro)
	s.mu.Unlock()
	s.commitRevert(ro, "rollout.abort")
	return true
}

// rolloutStatusLocked describes the newest rollout; nil if none.
func (s *Server) rolloutStatusLocked() *RolloutStatus {
	ro := s.rollout
	if ro == nil {
		return nil
	}
	return &RolloutStatus{Version: ro.next.version, Previous: ro.previous.version, Stage: stageNames[ro.stage],
		State: ro.state, Evidence: ro.evidence, Reached: len(ro.reached), Holding: ro.holding, Routes: slices.Clone(ro.judge.Evidence)}
}

// waitReports waits until every connected node that reports its counters
// has reported after since, for at most AckTimeout (a node that stopped
// reporting is judged on what it sent). It returns false if ctx ended.
func (s *Server) waitReports(ctx context.Context, since time.Time) bool {
	wctx, cancel := context.WithTimeout(ctx, s.opts.Rollout.AckTimeout)
	defer cancel()
	err := s.waitUntil(wctx, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, n := range s.nodes {
			if !n.ReportedAt.IsZero() && n.ReportedAt.Before(since) {
				return false
			}
		}
		return true
	})
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		s.log.Warn("rollout: judging without every node's counters since the bake", "waited", s.opts.Rollout.AckTimeout)
	}
	return true
}
