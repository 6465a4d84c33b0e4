// Package distribution serves portico.distribution.v1: the streams over
// which gateway nodes receive the snapshot they should run and answer
// with an ACK or a NACK.
//
// The server knows every connected node (id, pool, region, labels, the
// snapshot it runs, its last NACK) and the version the fleet should run:
// the newest version published. A node that connects, or a version that is
// published, gets the snapshot at once; a node already running it gets
// just its name (content addressing: a snapshot is never sent to a node
// that has it). A NACK halts the version: no further node is sent it (a
// node that connects meanwhile gets the last version before it), and the
// nodes that refused it keep the snapshot they had, until a newer version
// is published.
package distribution

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"buf.build/go/protovalidate"
	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/control/fastlane"
	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/control/versions"
	"github.com/portico-gw/portico/gateway/routestats"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
)

// Options configures a Server. The zero value works, with a Store.
type Options struct {
	Logger *slog.Logger
	Now    func() time.Time
	// Rollout stages new versions through the fleet and reverts them on
	// a regression; the zero value sends every version everywhere at
	// once.
	Rollout RolloutOptions
	// NodeTokenHash, if set, is the hex SHA-256 of the token every node
	// must send (Authorization: Bearer): snapshots hold the fleet's key
	// hashes and topology, and a node's NACKs and counters steer
	// rollouts. Empty lets any caller in (tests, a loopback-only dev).
	NodeTokenHash string
	// PublisherTokenHash, if set, is the hex SHA-256 of the token
	// producers (the key service) must send to FastLaneService. Empty lets
	// any caller publish (tests, a loopback-only dev).
	PublisherTokenHash string
	// UsageTokenHash, if set, is the hex SHA-256 of the token the quota
	// service sends to publish usage marks and to call UsageRelayService;
	// the publisher token then does neither. Empty: the publisher token
	// does both.
	UsageTokenHash string
	// Versions writes the versions the rollouts commit (reverts, aborts);
	// nil means a Writer on the store that publishes through this server.
	Versions *versions.Writer
}

// Server is the control plane's side of the distribution streams. It is
// safe for concurrent use.
type Server struct {
	store *store.Store
	log   *slog.Logger
	now   func() time.Time
	opts  Options

	mu     sync.Mutex
	nodes  map[string]*node
	target *target // nil until a version is published
	// changed is closed and replaced whenever a node's state changes, for
	// waiters.
	changed chan struct{}
	// rollout is the newest staged rollout, nil before one.
	rollout *staged
	// ranEverywhere holds the snapshots every node was sent (rollouts
	// that finished, versions sent at once): going back to one of them is
	// not staged.
	ranEverywhere map[string]bool
	// continuations are the rollouts revert versions go on with, by the
	// number the revert is committed as (see revertChange).
	continuations map[int64]*continuation

	// rows are the rollouts' states to record in the store (by
	// version), saved the last queued of each; rowsWake wakes the
	// goroutine that writes them, which stopRows stops (rowsDone closed).
	rows, saved map[int64]store.Rollout
	rowsWake    chan struct{}
	stopRows    context.CancelFunc
	rowsDone    chan struct{}

	// lanes is the fast lane: its own package, which this server's
	// DistributionService serves the node streams of.
	lanes *fastlane.Server

	// probes are the probes waiting for nodes' answers, by id; guarded
	// by mu. probing holds one token while a fleet check runs.
	probes  map[string]*pendingProbe
	probing chan struct{}
}

// target is the version the fleet should run.
type target struct {
	version int64
	sha256  string
	data    []byte
	// halted is set by the first NACK: who refused it and why.
	halted *NACK
	// previous is the last version published before this one that was
	// not halted: what nodes get while this one is.
	previous *target
	// odd are the nodes that refused it without halting it (see
	// haltsLocked).
	odd map[string]bool
	// routes caches servesRoutes: 0 not known yet, 1 yes, -1 no.
	routes int8
}

// NACK is a node's refusal of a version.
type NACK struct {
	Node    string
	Version int64
	SHA256  string
	Error   string
	At      time.Time
	// Objects are the config objects the node refused, each with its
	// team, when it could tell.
	Objects []RefusedObject
}

// RefusedObject is one config object a node refused: Team is empty for
// the platform's objects.
type RefusedObject struct {
	Team, Kind, Name, Error string
}

// node is one connected node.
type node struct {
	NodeStatus
	// routes are the node's last reported counters, by route id
	// (cumulative since the node started); probed are those of the
	// synthetic probes it sent.
	routes, probed map[string]routestats.Counts
	// probing names the ProbeRoutes last sent to the node ("" for none,
	// or one that stopped it); probeRoutes holds one not yet sent, which
	// a newer one replaces.
	probing     string
	probeRoutes chan *distributionv1.StreamResponse
	// sent and sentVersion are the snapshot last pushed to the node and
	// the version it was pushed as (a revert is the same snapshot again
	// under a new number).
	sent        string
	sentVersion int64
	send        chan *distributionv1.StreamResponse // buffered 1; the newest push replaces an unsent one
	probes      chan *distributionv1.StreamResponse // probes to send; a full channel refuses a probe
	done        chan struct{}                       // closed when the stream ends

	// clock is the answer to the node's last report (buffered 1: a newer
	// one replaces one not sent), resends the usage re-sends the relay
	// passes on (a full channel refuses one).
	clock   chan *distributionv1.StreamResponse
	resends chan *distributionv1.StreamResponse
	// clockSent is when the last Clock was queued (the control plane's
	// clock).
	clockSent time.Time
}

// NodeStatus is what the control plane knows of a connected node.
type NodeStatus struct {
	ID, Pool, Region string
	Labels           map[string]string
	ConnectedAt      time.Time
	// SHA256 is the snapshot the node runs, as it last said (its Hello or
	// its last ACK); Version its number, 0 if unknown.
	SHA256  string
	Version int64
	// LastNACK is the node's last refusal, if any.
	LastNACK *NACK
	// ReportedAt is when the node last reported its route counters.
	ReportedAt time.Time
	// LaneVersion is the last fast-lane version the node acknowledged, and
	// LaneError its last refusal of fast-lane entries (see LaneNodes).
	LaneVersion uint64
	LaneError   string
	// Identities are the upstream identities (client certificates) the
	// node said it holds, by name.
	Identities []string
	// Clusters are its endpoints' health as it last reported it.
	Clusters []*distributionv1.ClusterHealth
	// Usage is where its usage spool stands, as its hello or last report
	// said; nil for a node that counts no usage.
	Usage *distributionv1.UsageSpool
	// ClockOffset is the node's clock offset as the control plane
	// estimates it (see UsageRelay), measured at ClockAt (zero: not yet).
	ClockOffset time.Duration
	ClockAt     time.Time
}

// New returns a distribution server over st.
func New(st *store.Store, opts Options) *Server {
	if opts.Rollout.Bake > 0 {
		opts.Rollout = opts.Rollout.withDefaults()
	}
	s := &Server{store: st, log: opts.Logger, now: opts.Now, opts: opts, nodes: map[string]*node{}, changed: make(chan struct{}),
		ranEverywhere: map[string]bool{}, probes: map[string]*pendingProbe{}, probing: make(chan struct{}, 1)}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.opts.Versions == nil {
		s.opts.Versions = versions.New(st, s.Publish, s.log)
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.rows, s.saved, s.rowsWake, s.stopRows, s.rowsDone = map[int64]store.Rollout{}, map[int64]store.Rollout{}, make(chan struct{}, 1), cancel, make(chan struct{})
	go s.writeRows(rctx)
	s.lanes = fastlane.New(fastlane.Options{Store: st, NodeTokenHash: opts.NodeTokenHash, PublisherTokenHash: opts.PublisherTokenHash, UsageTokenHash: opts.UsageTokenHash,
		StreamNodes: s.streamNodes, Logger: s.log, Now: s.now})
	return s
}

// streamNodes is the ids of the nodes on the snapshot stream, and a
// channel closed at their next change.
func (s *Server) streamNodes() ([]string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.nodes))
	for id := range s.nodes {
		ids = append(ids, id)
	}
	return ids, s.changed
}

// FastLane serves one node's fast-lane stream (control/fastlane).
func (s *Server) FastLane(ctx context.Context, stream *connect.BidiStream[distributionv1.FastLaneRequest, distributionv1.FastLaneResponse]) error {
	return s.lanes.FastLane(ctx, stream)
}

// Lanes is the fast lane: its producers' API (Publisher) and its nodes'
// positions (LaneNodes, WaitLane).
func (s *Server) Lanes() *fastlane.Server { return s.lanes }

// Publisher returns the fast lane's producer API.
func (s *Server) Publisher() *fastlane.Publisher { return s.lanes.Publisher() }

// LaneNodes returns every connected node's fast-lane position.
func (s *Server) LaneNodes() []*distributionv1.NodeFastLane { return s.lanes.LaneNodes() }

// WaitLane waits until cond holds of the connected nodes' fast-lane
// positions (LaneNodes), or ctx ends.
func (s *Server) WaitLane(ctx context.Context, cond func([]*distributionv1.NodeFastLane) bool) error {
	return s.lanes.WaitLane(ctx, cond)
}

// Handler returns the service's path and HTTP handler.
func (s *Server) Handler() (string, http.Handler) {
	// A node's message is a hello, an ACK or its route counters.
	return distributionv1connect.NewDistributionServiceHandler(s, connect.WithReadMaxBytes(16<<20))
}

// PublishLatest publishes the store's newest version, if any: what a
// control plane does when it starts. A newest version whose rollout was
// halted (the audit log says so) is not sent: the version the fleet kept
// is, until a newer one is committed.
func (s *Server) PublishLatest(ctx context.Context) error {
	v, err := s.store.Latest(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	r, err := s.store.GetRollout(ctx, v.Number)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return s.Publish(ctx, v.Number)
	case err != nil:
		return err
	case r.State == RolloutHalted && r.Previous > 0:
		s.log.Warn("the newest version was halted; publishing the version the fleet kept", "halted", v.Number, "kept", r.Previous)
		if err := s.Publish(ctx, r.Previous); err != nil {
			return err
		}
		s.mu.Lock()
		s.ranEverywhere[s.target.sha256] = true
		s.mu.Unlock()
		return nil
	case (r.State == RolloutRunning || r.State == RolloutPaused) && r.Previous > 0 && s.opts.Rollout.Bake > 0:
		return s.resume(ctx, v, r)
	}
	return s.Publish(ctx, v.Number)
}

// Publish makes version the one every node should run and sends it to
// the connected nodes. Publishing a version older than the current target
// is a rollback and works the same way.
func (s *Server) Publish(ctx context.Context, version int64) error {
	v, err := s.store.Get(ctx, version)
	if err != nil {
		return fmt.Errorf("distribution: publishing version %d: %w", version, err)
	}
	data, err := s.store.Blob(ctx, v.SnapshotSHA256)
	if err != nil {
		return fmt.Errorf("distribution: publishing version %d: %w", version, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.target != nil && v.Number <= s.target.version {
		// Commits publish from their own goroutines: an older one that
		// arrives late must not send the fleet back. (A rollback is a new
		// version, with a higher number.)
		return nil
	}
	next := &target{version: v.Number, sha256: v.SnapshotSHA256, data: data, odd: map[string]bool{}}
	old := s.target
	if old != nil {
		next.previous = old
		if old.halted != nil {
			next.previous = old.previous
		}
		if ro := s.rollout; ro != nil && ro.next == old && !ro.ended() {
			// The version being rolled out has not been judged: what the
			// rest of the fleet runs is the one before it.
			next.previous = ro.previous
		}
		if next.previous != nil {
			// One version back is all a halt or a revert needs: the chain
			// (and the snapshots it holds) stays two long.
			next.previous.previous = nil
		}
	}
	s.target = next
	if c := s.continuations[v.Number]; c != nil {
		// A revert of one change of a train: the rollout goes on with it.
		delete(s.continuations, v.Number)
		s.continueLocked(next, c)
	} else if ro := s.rollout; s.opts.Rollout.Bake > 0 && ro != nil && ro.next == old && (ro.state == RolloutRunning || ro.state == RolloutPaused) &&
		!s.ranEverywhere[next.sha256] {
		// A change committed during a rollout joins its train: the
		// rollout goes on with it from the stage it reached, on the same
		// nodes, paused if it was. (Starting again at the canaries would
		// keep a busy fleet's train from ever getting past them.)
		s.continueLocked(next, ro.continuationLocked())
	} else if s.opts.Rollout.Bake > 0 && next.previous != nil && !s.ranEverywhere[next.sha256] && servesRoutes(next.previous) {
		// A new version: staged, judged, reverted on a regression.
		s.startRolloutLocked(next, next.previous)
	} else {
		// The first version, one after a version that served no routes
		// (a fleet's first config: nothing to break, no traffic to judge
		// it by), or one that ran everywhere before (a rollback): every
		// node at once.
		s.replaceRolloutLocked()
		s.ranEverywhere[next.sha256] = true
	}
	for _, n := range s.nodes {
		s.pushLocked(n)
	}
	s.notifyLocked()
	return nil
}

// pushLocked sends n the target; while the target is halted, the last
// version before it that was not (a node that runs the halted one already
// keeps it).
func (s *Server) pushLocked(n *node) {
	t := s.target
	if ro := s.rollout; ro != nil && t == ro.next && !ro.reached[n.ID] && !ro.ended() {
		// A node the rollout has not reached yet stays on the version
		// before.
		t = ro.previous
	}
	if t != nil && t.halted != nil && n.SHA256 != t.sha256 {
		t = t.previous
	}
	if t == nil {
		return
	}
	if n.sent == t.sha256 && n.sentVersion == t.version {
		return // sent already; its answer is on the way
	}
	msg := &distributionv1.Snapshot{Version: t.version, Sha256: t.sha256}
	// A node that runs the snapshot is sent just its name, so that it
	// knows its number; unless a push to it is unanswered, when what it
	// runs is not known for sure.
	if n.SHA256 != t.sha256 || (n.sent != "" && n.sent != n.SHA256) {
		msg.Data = t.data
	}
	n.sent, n.sentVersion = t.sha256, t.version
	resp := &distributionv1.StreamResponse{Message: &distributionv1.StreamResponse_Snapshot{Snapshot: msg}}
	// The channel holds one message: a push not yet sent is replaced by
	// the newer one, which then carries the data: what the node runs is
	// whatever the push before the dropped one left it with.
	select {
	case <-n.send:
		msg.Data = t.data
	default:
	}
	n.send <- resp
}

// versionLocked is the number of the published version whose snapshot is
// sha256, or 0.
func (s *Server) versionLocked(sha256 string) int64 {
	for t := s.target; t != nil && sha256 != ""; t = t.previous {
		if t.sha256 == sha256 {
			return t.version
		}
	}
	return 0
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
	if ro := s.rollout; ro != nil {
		s.saveLocked(ro)
	}
	s.syncProbesLocked()
}

// receiveHello receives a node stream's first message, which must be a
// hello (get returns it, nil if it is not) and follow its rules.
func receiveHello[M proto.Message, H comparable](receive func() (M, error), get func(M) H) (H, error) {
	var none H
	first, err := receive()
	if err != nil {
		return none, err
	}
	hello := get(first)
	if hello == none {
		return none, connect.NewError(connect.CodeInvalidArgument, errors.New("the stream starts with a hello"))
	}
	if err := protovalidate.Validate(first); err != nil {
		return none, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("hello: %w", err))
	}
	return hello, nil
}

// Stream serves one node's stream.
func (s *Server) Stream(ctx context.Context, stream *connect.BidiStream[distributionv1.StreamRequest, distributionv1.StreamResponse]) error {
	if err := s.authorizeNode(stream.RequestHeader()); err != nil {
		return err
	}
	hello, err := receiveHello(stream.Receive, (*distributionv1.StreamRequest).GetHello)
	if err != nil {
		return err
	}
	n := &node{
		NodeStatus: NodeStatus{ID: hello.GetNodeId(), Pool: hello.GetPool(), Region: hello.GetRegion(), Labels: hello.GetLabels(),
			ConnectedAt: s.now(), SHA256: hello.GetSha256(), Clusters: hello.GetClusters(), Usage: hello.GetUsage()},
		send:        make(chan *distributionv1.StreamResponse, 1),
		clock:       make(chan *distributionv1.StreamResponse, 1),
		resends:     make(chan *distributionv1.StreamResponse, maxResends),
		probes:      make(chan *distributionv1.StreamResponse, 4),
		probeRoutes: make(chan *distributionv1.StreamResponse, 1),
		probing:     probingUnknown,
		done:        make(chan struct{}),
	}
	for _, id := range hello.GetResources().GetUpstreamIdentities() {
		n.Identities = append(n.Identities, id.GetName())
	}
	s.register(n)
	defer s.unregister(n)

	// Sending runs beside receiving: a node's ACKs never wait for a push.
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				sendErr <- ctx.Err()
				return
			case <-n.done:
				sendErr <- nil
				return
			case msg := <-n.send:
				if err := stream.Send(msg); err != nil {
					sendErr <- err
					return
				}
			case msg := <-n.probes:
				if err := stream.Send(msg); err != nil {
					sendErr <- err
					return
				}
			case msg := <-n.probeRoutes:
				if err := stream.Send(msg); err != nil {
					sendErr <- err
					return
				}
			case msg := <-n.clock:
				if err := stream.Send(msg); err != nil {
					sendErr <- err
					return
				}
			case msg := <-n.resends:
				if err := stream.Send(msg); err != nil {
					sendErr <- err
					return
				}
			}
		}
	}()
	for {
		req, err := stream.Receive()
		// When the control plane read the message: a report's Clock
		// answer says so.
		at := s.now()
		if err != nil {
			close(n.done)
			<-sendErr
			if errors.Is(err, context.Canceled) || connect.CodeOf(err) == connect.CodeCanceled {
				return nil
			}
			return err
		}
		if err := protovalidate.Validate(req); err != nil {
			close(n.done)
			<-sendErr
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		if ack := req.GetAck(); ack != nil {
			s.ack(n, ack)
		}
		if rep := req.GetReport(); rep != nil {
			s.report(n, rep, at)
		}
		if res := req.GetProbeResult(); res != nil {
			s.probeAnswered(n.ID, res)
		}
	}
}

func (s *Server) register(n *node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.nodes[n.ID]; old != nil {
		// The same node again (a reconnect the old stream has not noticed
		// yet): the new stream replaces it.
		s.log.Info("node reconnected", "node", n.ID)
	}
	s.nodes[n.ID] = n
	n.Version = s.versionLocked(n.SHA256)
	if ro := s.rollout; ro != nil && (ro.state == RolloutRunning || ro.state == RolloutPaused) && !ro.reached[n.ID] &&
		(ro.stage == len(stageNames)-1 || n.Labels["canary"] == "true") {
		// A node that joins mid-rollout gets the newest version its
		// stage may run: the rollout's when the stage takes it (a
		// labelled canary, or anyone once the rollout is at every node),
		// else the version the rest of the fleet runs. (Which unlabelled
		// nodes a stage takes depends on who is connected: a fleet that
		// reconnects after a restart would be reassigned.)
		ro.reached[n.ID] = true
		s.saveLocked(ro)
	}
	s.pushLocked(n)
	s.notifyLocked()
}

func (s *Server) unregister(n *node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes[n.ID] == n {
		delete(s.nodes, n.ID)
	}
	s.notifyLocked()
}

func (s *Server) ack(n *node, a *distributionv1.Ack) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.target
	if a.GetError() == "" {
		n.SHA256 = a.GetSha256()
		n.Version = s.versionLocked(n.SHA256)
	} else {
		nack := &NACK{Node: n.ID, SHA256: a.GetSha256(), Error: a.GetError(), At: s.now()}
		for _, o := range a.GetObjects() {
			nack.Objects = append(nack.Objects, RefusedObject{Team: o.GetTeam(), Kind: o.GetKind(), Name: o.GetName(), Error: o.GetError()})
		}
		if t != nil && t.sha256 == a.GetSha256() {
			nack.Version = t.version
			switch {
			case t.halted != nil:
			case haltsLocked(t, n), s.inTrainLocked(t, n):
				t.halted = nack
				s.log.Warn("version halted: a node refused it", "version", t.version, "node", n.ID, "objects", objectNames(nack.Objects), "error", a.GetError())
			default:
				t.odd[n.ID] = true
				s.log.Warn("a node that did not run the version before refused this one, which other nodes run: the node keeps what it ran, the version goes on",
					"version", t.version, "node", n.ID, "objects", objectNames(nack.Objects), "error", a.GetError())
			}
		}
		n.LastNACK = nack
	}
	s.notifyLocked()
}

// haltsLocked says whether n's refusal of t halts it. A refusal is
// evidence against a version when the node ran the version before it: the
// change is what it refuses (the first version has none before it, and
// halts as ever). A node that did not run the version before (it joined without an identity
// the fleet uses, or refused that one too) and refuses one other nodes
// run is the odd one out: halting for it would freeze every team's later
// versions, and stage the next one from the version before this, sending
// that older version to the nodes that ran this one. It keeps what it
// ran, its NACK is in the fleet's status, and a rollout does not wait for
// it.
func haltsLocked(t *target, n *node) bool {
	return t.previous == nil || n.SHA256 == t.previous.sha256
}

// report records a node's report, read at at, and answers it with a
// Clock when it says when it was sent.
func (s *Server) report(n *node, rep *distributionv1.Report, at time.Time) {
	routes, probed := countsOf(rep.GetRoutes()), countsOf(rep.GetProbes())
	s.mu.Lock()
	defer s.mu.Unlock()
	n.routes, n.probed = routes, probed
	if rep.GetClusters() != nil {
		n.Clusters = rep.GetClusters()
	}
	n.Usage = rep.GetUsage()
	n.ReportedAt = at
	if rep.GetSentAt().IsValid() {
		s.clockLocked(n, rep.GetSentAt(), at, rep.GetUsage() != nil)
	}
	s.notifyLocked()
}

// countsOf decodes a report's counters, by route id; nil for none.
func countsOf(rs []*distributionv1.RouteCounts) map[string]routestats.Counts {
	if len(rs) == 0 {
		return nil
	}
	out := make(map[string]routestats.Counts, len(rs))
	for _, r := range rs {
		c := routestats.Counts{Requests: r.GetRequests(), Errors: r.GetErrors()}
		copy(c.Buckets[:], r.GetLatencyBuckets())
		out[r.GetRouteId()] = c
	}
	return out
}

// RouteCounts returns the route counters node last reported (cumulative
// since it started), and when; nil if it is not connected or has not
// reported. The map must not be modified.
func (s *Server) RouteCounts(node string) (map[string]routestats.Counts, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[node]
	if n == nil {
		return nil, time.Time{}
	}
	return n.routes, n.ReportedAt
}

// Status is the fleet's state.
type Status struct {
	// Version and SHA256 are what the fleet should run (0, "" before the
	// first version).
	Version int64
	SHA256  string
	// Halted is the NACK that stopped the version, if one did.
	Halted *NACK
	// Nodes are the connected nodes, by id.
	Nodes []NodeStatus
	// Rollout is the newest staged rollout, if any.
	Rollout *RolloutStatus
}

// Status returns the fleet's state.
func (s *Server) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st Status
	if t := s.target; t != nil {
		st.Version, st.SHA256 = t.version, t.sha256
		if t.halted != nil {
			h := *t.halted
			st.Halted = &h
		}
	}
	for _, n := range s.nodes {
		st.Nodes = append(st.Nodes, n.NodeStatus)
	}
	st.Rollout = s.rolloutStatusLocked()
	sort.Slice(st.Nodes, func(i, j int) bool { return st.Nodes[i].ID < st.Nodes[j].ID })
	for i := range st.Nodes {
		if v, e, ok := s.lanes.Position(st.Nodes[i].ID); ok {
			st.Nodes[i].LaneVersion, st.Nodes[i].LaneError = v, e
		}
	}
	return st
}

// Wait waits until cond holds of the fleet's status, or ctx ends.
func (s *Server) Wait(ctx context.Context, cond func(Status) bool) error {
	return s.waitUntil(ctx, func() bool { return cond(s.Status()) })
}

// waitUntil waits until cond holds, checking it after every change of
// the fleet's state, or ctx ends.
func (s *Server) waitUntil(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// authorizeNode checks a node's bearer token, when one is required.
func (s *Server) authorizeNode(h http.Header) error {
	return svcauth.Check(h, s.opts.NodeTokenHash, "a node token is required")
}

// servesRoutes reports whether t's snapshot routes anything: a version
// after one that does not has no old traffic to be judged against. The
// snapshot is decoded once per target; the caller holds the lock.
func servesRoutes(t *target) bool {
	if t.routes == 0 {
		t.routes = 1 // a snapshot that does not decode is judged as ever
		var snap configv1.Snapshot
		if err := proto.Unmarshal(t.data, &snap); err == nil && len(snap.GetRoutes()) == 0 && len(snap.GetServices()) == 0 {
			t.routes = -1
		}
	}
	return t.routes > 0
}

// inTrainLocked reports whether n is a node the rollout of t reached: it
// ran the train's versions before t, so its refusal of t is evidence
// against t's change even when what it ran is not t.previous.
func (s *Server) inTrainLocked(t *target, n *node) bool {
	ro := s.rollout
	return ro != nil && ro.next == t && !ro.ended() && ro.reached[n.ID]
}
