package distribution

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/gateway/routestats"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
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
	// nodes must have served in a stage for it to be judged (default 20).
	// A stage whose changed routes were called, but fewer times, bakes on
	// until they have, or until MaxBake: a quiet canary is not evidence.
	MinRequests uint64
	// MaxBake bounds how long a stage bakes while waiting for enough calls
	// (default 5 × Bake); after it the stage is judged on what it has.
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

func (o RolloutOptions) withDefaults() RolloutOptions {
	if o.AckTimeout <= 0 {
		o.AckTimeout = 30 * time.Second
	}
	if o.MinRequests == 0 {
		o.MinRequests = 20
	}
	if o.MaxBake < o.Bake {
		o.MaxBake = 5 * o.Bake
	}
	if o.MaxErrorRateIncrease <= 0 {
		o.MaxErrorRateIncrease = 0.05
	}
	if o.MaxLatencyRatio <= 0 {
		o.MaxLatencyRatio = 2
	}
	if o.MinLatencyIncrease <= 0 {
		o.MinLatencyIncrease = 50 * time.Millisecond
	}
	return o
}

// The stages, in order; each adds nodes to the ones before.
var stageNames = []string{"canary", "10%", "region", "all"}

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

// rollout is one version on its way through the stages.
type rollout struct {
	next, previous *target
	changed        routeMatcher
	reached        map[string]bool // nodes assigned next
	stage          int
	state          string
	evidence       string
	cancel         context.CancelFunc
	resume         chan struct{} // closed on resume while paused
	// holding: paused, the rollout waits at its stage for a resume.
	holding bool
	// oldRate is each changed route's failure share on the old version,
	// from the last stage that had enough calls there: the baseline once
	// few or no nodes are left on it.
	oldRate map[string]float64
}

// ended reports whether ro is over: done, reverted, aborted or replaced.
// A halted rollout is not: its nodes stay where it stopped.
func (ro *rollout) ended() bool {
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
}

// startRolloutLocked stages next, replacing the fleet's version previous.
func (s *Server) startRolloutLocked(next, previous *target) {
	if ro := s.rollout; ro != nil && !ro.ended() {
		ro.state = RolloutReplaced
		ro.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	ro := &rollout{next: next, previous: previous, reached: map[string]bool{}, state: RolloutRunning, cancel: cancel,
		oldRate: map[string]float64{}}
	s.rollout = ro
	// The canaries at once, with the publish: a pause that comes right
	// after it holds the version there, not before it.
	s.assignStageLocked(ro, 0)
	go s.runRollout(ctx, ro)
}

// assignStageLocked assigns ro's version to the nodes of stage i and
// pushes it.
func (s *Server) assignStageLocked(ro *rollout, i int) {
	ro.stage = i
	for _, id := range s.stageNodesLocked(i) {
		ro.reached[id] = true
	}
	for _, n := range s.nodes {
		s.pushLocked(n)
	}
	s.notifyLocked()
}

// runRollout takes ro through the stages.
func (s *Server) runRollout(ctx context.Context, ro *rollout) {
	opts := s.opts.Rollout
	defer ro.cancel()
	// Which routes the change touched: both snapshots decoded here, off
	// the lock the streams take. Only judging, after the first bake, reads
	// it.
	changed, err := changedRoutes(ro.previous.data, ro.next.data)
	if err != nil {
		s.log.Error("rollout: comparing versions failed; judging every route", "err", err)
	}
	s.mu.Lock()
	ro.changed = changed
	s.mu.Unlock()
	for i := range stageNames {
		// The canaries were assigned when the version was published; each
		// later stage waits while the rollout is paused.
		if i > 0 {
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
			if h := ro.next.halted; h != nil {
				ro.evidence = fmt.Sprintf("node %s refused it: %s", h.Node, h.Error)
			}
			s.notifyLocked()
			s.mu.Unlock()
			s.record("rollout.halt", ro)
			return
		}
		if stageNames[i] == "all" {
			// Every node runs it: going back to it later is not staged.
			s.ranEverywhere[ro.next.sha256] = true
		}
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
			s.mu.Lock()
			if ro.state != RolloutRunning {
				// Aborted or replaced during the bake: a newer target may
				// stand, and must not be reverted from here.
				s.mu.Unlock()
				return
			}
			evidence, short := s.judgeLocked(ro, before, s.countsLocked())
			if evidence != "" {
				ro.state, ro.evidence = RolloutReverted, fmt.Sprintf("stage %s: %s", stageNames[i], evidence)
				s.log.Warn("rollout reverted", "version", ro.next.version, "to", ro.previous.version, "evidence", ro.evidence)
				s.revertLocked(ro)
				s.mu.Unlock()
				s.commitRevert(ro, "rollout.revert")
				return
			}
			s.mu.Unlock()
			if short == "" || !time.Now().Before(bakeEnd) {
				if short != "" {
					s.log.Warn("rollout: a stage ends without enough calls to judge", "version", ro.next.version, "stage", stageNames[i], "routes", short)
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
func (s *Server) record(action string, ro *rollout) {
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
func (s *Server) commitRevert(ro *rollout, action string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	audit := store.AuditEntry{Actor: "system", Action: action, Object: fmt.Sprintf("version %d", ro.next.version), Detail: ro.evidence}
	err := func() error {
		latest, err := s.store.Latest(ctx)
		if err != nil {
			return err
		}
		if latest.Number != ro.next.version {
			return errSuperseded
		}
		prev, err := s.store.Get(ctx, ro.previous.version)
		if err != nil {
			return err
		}
		cfg, err := s.store.Blob(ctx, prev.ConfigSHA256)
		if err != nil {
			return err
		}
		snap, err := s.store.Blob(ctx, prev.SnapshotSHA256)
		if err != nil {
			return err
		}
		v, err := s.store.Commit(ctx, latest.Number, store.Commit{
			Config: cfg, Snapshot: snap, CreatedBy: "system", RollbackOf: prev.Number,
			Message: fmt.Sprintf("%s of version %d: %s", action, ro.next.version, ro.evidence),
			Diff:    fmt.Sprintf("the config of version %d again", prev.Number),
			Audit:   audit,
		})
		if err != nil {
			return err
		}
		return s.Publish(ctx, v.Number)
	}()
	if err == nil {
		return
	}
	if !errors.Is(err, errSuperseded) {
		s.log.Error("recording a revert as a version failed", "version", ro.next.version, "err", err)
	}
	if err := s.store.AppendAudit(ctx, &audit); err != nil {
		s.log.Error("recording a rollout in the audit log failed", "action", action, "version", ro.next.version, "err", err)
	}
}

var errSuperseded = errors.New("a newer version was committed")

// waitWhilePaused returns once ro is not paused; false if ctx ended.
func (s *Server) waitWhilePaused(ctx context.Context, ro *rollout) bool {
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
func (s *Server) revertLocked(ro *rollout) {
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
func (s *Server) stageSettled(ro *rollout) bool {
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

// stageNodesLocked lists the nodes stage i assigns (cumulative): the
// canaries (nodes labelled canary=true, else the first by id, two per
// region), 10 % of the fleet, the canaries' first region, everyone.
func (s *Server) stageNodesLocked(i int) []string {
	var all []*node
	for _, n := range s.nodes {
		all = append(all, n)
	}
	sort.Slice(all, func(a, b int) bool { return all[a].ID < all[b].ID })
	// Regions with labelled canaries take only those.
	labelledRegion := map[string]bool{}
	for _, n := range all {
		if n.Labels["canary"] == "true" {
			labelledRegion[n.Region] = true
		}
	}
	var canaries []string
	perRegion := map[string]int{}
	for _, labelled := range []bool{true, false} {
		for _, n := range all {
			if (n.Labels["canary"] == "true") != labelled || perRegion[n.Region] >= 2 || (!labelled && labelledRegion[n.Region]) {
				continue
			}
			canaries = append(canaries, n.ID)
			perRegion[n.Region]++
		}
	}
	out := slices.Clone(canaries)
	in := make(map[string]bool, len(all))
	for _, id := range canaries {
		in[id] = true
	}
	add := func(id string) {
		if !in[id] {
			in[id] = true
			out = append(out, id)
		}
	}
	switch stageNames[i] {
	case "canary":
	case "10%":
		want := int(math.Ceil(0.1 * float64(len(all))))
		for _, n := range all {
			if len(out) >= want {
				break
			}
			add(n.ID)
		}
	case "region":
		region := ""
		if len(canaries) > 0 {
			region = s.nodes[canaries[0]].Region
		}
		for _, n := range all {
			if n.Region == region {
				add(n.ID)
			}
		}
	default:
		for _, n := range all {
			add(n.ID)
		}
	}
	return out
}

// countsLocked copies every node's latest route counters.
func (s *Server) countsLocked() map[string]map[string]routestats.Counts {
	out := make(map[string]map[string]routestats.Counts, len(s.nodes))
	for id, n := range s.nodes {
		out[id] = n.routes
	}
	return out
}

// judgeLocked compares, for each changed route, the calls nodes on the new
// version served during the bake with those nodes still on the old one
// served; it returns the evidence of a regression, or "", and the changed
// routes the new version served too few calls of to judge (some, but
// fewer than MinRequests), or "".
func (s *Server) judgeLocked(ro *rollout, before, after map[string]map[string]routestats.Counts) (evidence, short string) {
	opts := s.opts.Rollout
	sums := map[string]*[2]routestats.Counts{} // route → [old, new]
	for id, now := range after {
		onNew := ro.reached[id]
		if n := s.nodes[id]; n == nil || (onNew && n.SHA256 != ro.next.sha256) {
			continue
		}
		for route, c := range now {
			if !ro.changed.match(route) {
				continue
			}
			d := c
			if prev, ok := before[id][route]; ok && !reset(prev, c) {
				d = c.Sub(prev)
			}
			if sums[route] == nil {
				sums[route] = &[2]routestats.Counts{}
			}
			if onNew {
				sums[route][1] = sums[route][1].Add(d)
			} else {
				sums[route][0] = sums[route][0].Add(d)
			}
		}
	}
	routes := make([]string, 0, len(sums))
	for r := range sums {
		routes = append(routes, r)
	}
	slices.Sort(routes)
	var few []string
	for _, r := range routes {
		old, nw := sums[r][0], sums[r][1]
		if nw.Requests < opts.MinRequests {
			if nw.Requests > 0 {
				few = append(few, r)
			}
			continue
		}
		rateNew := float64(nw.Errors) / float64(nw.Requests)
		rateOld, known := ro.oldRate[r]
		switch {
		case old.Requests >= opts.MinRequests:
			rateOld = float64(old.Errors) / float64(old.Requests)
			ro.oldRate[r] = rateOld
		case !known && ro.stage == 0:
			// Too few calls on the old version at the canaries: a route
			// the change adds. Judged against none failing.
			rateOld = 0
			ro.oldRate[r] = 0
		case !known:
			continue // nothing to compare with
		}
		if rateNew-rateOld > opts.MaxErrorRateIncrease {
			return fmt.Sprintf("route %s failed %d of %d calls (%.1f%%) on version %d, %d of %d (%.1f%%) on version %d",
				r, nw.Errors, nw.Requests, 100*rateNew, ro.next.version, old.Errors, old.Requests, 100*rateOld, ro.previous.version), ""
		}
		if old.Requests >= opts.MinRequests {
			pNew, pOld := nw.Quantile(0.99), old.Quantile(0.99)
			if float64(pNew) > opts.MaxLatencyRatio*float64(pOld) && pNew-pOld >= opts.MinLatencyIncrease {
				return fmt.Sprintf("route %s p99 %v on version %d, %v on version %d", r, pNew, ro.next.version, pOld, ro.previous.version), ""
			}
		}
	}
	return "", strings.Join(few, ",")
}

// reset reports whether counters went down between two reports: the node
// restarted, or dropped the route and counts it afresh.
func reset(prev, now routestats.Counts) bool {
	if now.Requests < prev.Requests || now.Errors < prev.Errors {
		return true
	}
	for b := range now.Buckets {
		if now.Buckets[b] < prev.Buckets[b] {
			return true
		}
	}
	return false
}

// routeMatcher selects the routes a change touched: by id, or by the
// prefix of the routes a service derives ("<service id>.").
type routeMatcher struct {
	all      bool
	ids      map[string]bool
	prefixes []string
}

func (m routeMatcher) match(route string) bool {
	if m.all || m.ids[route] {
		return true
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(route, p) {
			return true
		}
	}
	return false
}

// changedRoutes compares two snapshots: the routes that are new or
// differ, those whose cluster differs, and the routes of services that
// are new, differ or whose cluster differs.
func changedRoutes(prevData, nextData []byte) (routeMatcher, error) {
	var prev, next configv1.Snapshot
	if err := proto.Unmarshal(prevData, &prev); err != nil {
		return routeMatcher{all: true}, err
	}
	if err := proto.Unmarshal(nextData, &next); err != nil {
		return routeMatcher{all: true}, err
	}
	clusters := map[string]*configv1.Cluster{}
	for _, c := range prev.GetClusters() {
		clusters[c.GetName()] = c
	}
	changedCluster := map[string]bool{}
	for _, c := range next.GetClusters() {
		if !proto.Equal(clusters[c.GetName()], c) {
			changedCluster[c.GetName()] = true
		}
	}
	m := routeMatcher{ids: map[string]bool{}}
	routes := map[string]*configv1.Route{}
	for _, r := range prev.GetRoutes() {
		routes[r.GetId()] = r
	}
	for _, r := range next.GetRoutes() {
		if !proto.Equal(routes[r.GetId()], r) || changedCluster[r.GetCluster()] {
			m.ids[r.GetId()] = true
		}
	}
	services := map[string]*configv1.Service{}
	for _, svc := range prev.GetServices() {
		services[svc.GetId()] = svc
	}
	for _, svc := range next.GetServices() {
		if !proto.Equal(services[svc.GetId()], svc) || changedCluster[svc.GetCluster()] {
			m.prefixes = append(m.prefixes, svc.GetId()+".")
		}
	}
	return m, nil
}

// Close stops the rollout in progress, if any, where it is: nodes keep
// what they run.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ro := s.rollout; ro != nil {
		ro.cancel()
	}
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
		State: ro.state, Evidence: ro.evidence, Reached: len(ro.reached), Holding: ro.holding}
}
