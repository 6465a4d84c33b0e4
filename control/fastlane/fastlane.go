// Package fastlane is the control plane's side of the fast lane: what
// must reach every node at once and is never staged (API key changes,
// token deny entries, issuers' signing keys, the quota service's usage
// marks; over-quota flags next). It
// serves the producers' FastLaneService (Publish, Source, Wait) and each
// node's DistributionService.FastLane stream, and keeps the lane's state
// in the control plane's store.
package fastlane

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

	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/gateway/denyentry"
	"github.com/portico-gw/portico/gateway/laneentry"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
)

// The fast lane carries what must reach every node at once and is never
// staged: API key changes, token deny entries and issuers' signing keys.
//
// Producers publish ordered batches (PublishRequest); the store keeps the
// newest state of every entry with the fast-lane version it last changed
// at, so what a node lacks is always "the entries changed after the
// version it holds", whatever that version is. The newest batches are also
// kept in memory, so that a node one batch behind (the usual case) is sent
// the batch without a query.
//
// A node's update is one message per version (several parts for a large
// state); the node applies it and acknowledges the version. Wait answers
// when every connected node has acknowledged a version, which is how the
// key service knows that a new key works everywhere before it shows it.

// recentBatches is how many of the newest batches are kept in memory.
const recentBatches = 4096

// partEntries bounds the entries of one message of an update.
const partEntries = 10000

// pruneEvery is how often deny entries are dropped from the store,
// pruneGrace how long after their denyentry.KeepUntil (a margin for the
// clocks of the control plane and the nodes).
const (
	pruneEvery = 10 * time.Minute
	pruneGrace = time.Hour
)

// Options configure a Server.
type Options struct {
	// Store keeps the lane's state; the caller opens and closes it.
	Store *store.Store
	// NodeTokenHash and PublisherTokenHash are the SHA-256 of the tokens
	// nodes and producers must send (svcauth); empty: none required.
	NodeTokenHash, PublisherTokenHash string
	// UsageTokenHash, if set, is the SHA-256 of the token the quota
	// service sends: it may publish usage marks, and only them, and the
	// publisher token may then publish none. Empty: the publisher token
	// publishes both (one token for the key and quota services).
	UsageTokenHash string
	// StreamNodes returns the ids of the nodes on the snapshot stream, and
	// a channel closed when they next change: Wait counts a node on the
	// snapshot stream whose fast-lane stream is down as behind, so that a
	// key is never shown because one node's lane happens to be down. Nil:
	// no such nodes.
	StreamNodes func() (ids []string, changed <-chan struct{})
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock for pruning; nil means time.Now.
	Now func() time.Time
}

// Server is the fast lane. It is safe for concurrent use.
type Server struct {
	opts  Options
	store *store.Store
	log   *slog.Logger
	now   func() time.Time
	lane  fastLane
}

// New returns a Server; it reads the lane's state from the store when
// first used.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Server{opts: opts, store: opts.Store, log: opts.Logger, now: opts.Now}
}

// fastLane is the Server's fast-lane state.
type fastLane struct {
	// publishMu serialises publishes, so that the in-memory batches are
	// in version order.
	publishMu sync.Mutex
	lastPrune time.Time

	mu      sync.Mutex
	epoch   string
	version uint64
	// recent holds the newest batches, oldest first, with consecutive
	// versions ending at version.
	recent []laneBatch
	nodes  map[string]*laneNode
	// changed is closed and replaced when a node acknowledges.
	changed chan struct{}
	loaded  bool
}

type laneBatch struct {
	version uint64
	entries []*configv1.FastLaneEntry
}

// laneNode is one node's fast-lane stream.
type laneNode struct {
	id string
	// acked is the newest version the node acknowledged; sent the newest
	// it was sent (or, before the first send, the version it said it
	// holds).
	acked, sent uint64
	// reset: the next update sends the whole state (the node holds
	// nothing, or a version of another epoch).
	reset   bool
	lastErr string
	// refused are the newest versions the node refused entries of: a
	// later clean ACK does not give it what it refused, so Wait for one
	// of them keeps counting it as behind.
	refused []refusal
	wake    chan struct{} // buffered 1
}

// refusal is an ACK with an error: the versions after from up to to, which
// the node holds minus what it refused.
type refusal struct {
	from, to uint64
	err      string
}

// maxRefusals bounds the refusals a node's stream remembers.
const maxRefusals = 32

// refusedAt returns the node's refusal that covers version, if any.
func (n *laneNode) refusedAt(version uint64) (refusal, bool) {
	for _, r := range n.refused {
		if r.from < version && version <= r.to {
			return r, true
		}
	}
	return refusal{}, false
}

// load reads the epoch and version from the store, once.
func (s *Server) laneLoad(ctx context.Context) error {
	f := &s.lane
	f.mu.Lock()
	loaded := f.loaded
	f.mu.Unlock()
	if loaded {
		return nil
	}
	// Read without the lock: a slow database must not stall Status.
	epoch, version, err := s.store.FastLaneInfo(ctx)
	if err != nil {
		return fmt.Errorf("fastlane: reading the lane: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loaded {
		return nil // another caller was first; a publish may have moved on since
	}
	f.epoch, f.version, f.loaded = epoch, version, true
	if f.nodes == nil {
		f.nodes = map[string]*laneNode{}
	}
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return nil
}

// entryIdentity is the kind and id an entry is stored under
// (laneentry.Of), and when it may be dropped (zero: never). A deny entry
// is kept until denyentry.KeepUntil, not until the expires it asks for: a
// node that joins later gets the whole state from the store, and must
// still get every entry that covers a token some issuer could accept.
func entryIdentity(e *configv1.FastLaneEntry) (kind, id string, expires time.Time, err error) {
	ident, err := laneentry.Of(e)
	if err != nil {
		return "", "", time.Time{}, err
	}
	if d := e.GetDeny(); d != nil {
		expires = denyentry.KeepUntil(d)
	}
	return string(ident.Kind), ident.Key, expires, nil
}

// checkSource refuses an entry of kind from a source that does not
// produce it: usage marks come from laneentry.UsageSource alone, which
// produces nothing else. An entry replaces the stored one of its identity
// by revision, and revisions compare only within one producer's sequence.
func checkSource(source string, kind laneentry.Kind) error {
	switch {
	case kind == laneentry.UsageMark && source != laneentry.UsageSource:
		return fmt.Errorf("usage marks come from source %q, not %q", laneentry.UsageSource, source)
	case kind != laneentry.UsageMark && source == laneentry.UsageSource:
		return fmt.Errorf("source %q publishes usage marks only, not %s entries", source, kind)
	}
	return nil
}

// publish stores a producer's batch and sends it to the connected nodes.
func (s *Server) publish(ctx context.Context, req *distributionv1.PublishRequest) (*distributionv1.PublishResponse, error) {
	if err := s.laneLoad(ctx); err != nil {
		return nil, err
	}
	f := &s.lane
	rows := make([]store.FastLaneEntry, len(req.GetEntries()))
	for i, e := range req.GetEntries() {
		kind, id, expires, err := entryIdentity(e)
		if err == nil {
			err = checkSource(req.GetSource(), laneentry.Kind(kind))
		}
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("entries[%d]: %w", i, err))
		}
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("fastlane: entry %d: %w", i, err)
		}
		rows[i] = store.FastLaneEntry{Kind: kind, ID: id, Rev: e.GetRev(), Data: data, Expires: expires}
	}
	f.publishMu.Lock()
	defer f.publishMu.Unlock()
	before := f.current()
	version, seq, err := s.store.PublishFastLane(ctx, req.GetSource(), req.GetFromSeq(), req.GetToSeq(), rows)
	if err != nil {
		return nil, err
	}
	if version > before {
		// The batch kept is what the store changed at the version, not the
		// request: an entry older than the stored one was skipped, and a
		// retry may be answered with a version another control plane wrote.
		changed, known := storedChanges(req.GetEntries(), rows, version)
		f.mu.Lock()
		f.version = version
		if !known || len(f.recent) > 0 && f.recent[len(f.recent)-1].version != version-1 {
			f.recent = nil // not consecutive (another control plane wrote): start again
		}
		if known {
			f.recent = append(f.recent, laneBatch{version: version, entries: changed})
		}
		if len(f.recent) > recentBatches {
			f.recent = append(f.recent[:0:0], f.recent[len(f.recent)-recentBatches:]...)
		}
		for _, n := range f.nodes {
			n.poke()
		}
		f.mu.Unlock()
	}
	if now := s.now(); now.Sub(f.lastPrune) > pruneEvery {
		f.lastPrune = now
		// Nodes keep a deny entry until its KeepUntil, as the store
		// does: prune a while after that.
		if n, err := s.store.PruneFastLane(ctx, now.Add(-pruneGrace)); err != nil {
			s.log.Warn("pruning expired fast-lane entries failed", "err", err)
		} else if n > 0 {
			s.log.Info("pruned expired fast-lane entries", "entries", n)
		}
	}
	return &distributionv1.PublishResponse{Version: version, Seq: seq}, nil
}

// storedChanges returns the entries of a batch the store stored at
// version (rows[i].Version says so), the last of each identity; known is
// false when the store stored none at version (a retry answered with the
// current version, which another control plane may have written).
func storedChanges(entries []*configv1.FastLaneEntry, rows []store.FastLaneEntry, version uint64) (changed []*configv1.FastLaneEntry, known bool) {
	last := map[[2]string]int{}
	for i, r := range rows {
		if r.Version == version {
			last[[2]string{r.Kind, r.ID}] = i
		}
	}
	if len(last) == 0 && len(rows) > 0 {
		return nil, false
	}
	for i, r := range rows {
		if r.Version == version && last[[2]string{r.Kind, r.ID}] == i {
			changed = append(changed, entries[i])
		}
	}
	return changed, true
}

func (f *fastLane) current() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.version
}

func (n *laneNode) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// laneWait waits until every connected node has acknowledged version, or
// ctx ends; it answers the nodes that have not.
func (s *Server) laneWait(ctx context.Context, version uint64) (*distributionv1.WaitResponse, error) {
	if err := s.laneLoad(ctx); err != nil {
		return nil, err
	}
	f := &s.lane
	for {
		// A node on the snapshot stream but not (yet) on the fast lane
		// counts too, as behind: a key must not be shown because a node's
		// lane stream happens to be down.
		var onStream []string
		var streamCh <-chan struct{}
		if s.opts.StreamNodes != nil {
			onStream, streamCh = s.opts.StreamNodes()
		}
		f.mu.Lock()
		ch := f.changed
		resp := &distributionv1.WaitResponse{Nodes: int32(len(f.nodes))}
		for _, n := range f.nodes {
			if r, ok := n.refusedAt(version); ok {
				resp.Behind = append(resp.Behind, &distributionv1.NodeFastLane{NodeId: n.id, Version: n.acked, Error: r.err})
			} else if n.acked < version {
				resp.Behind = append(resp.Behind, &distributionv1.NodeFastLane{NodeId: n.id, Version: n.acked, Error: n.lastErr})
			}
		}
		for _, id := range onStream {
			if f.nodes[id] == nil {
				resp.Nodes++
				resp.Behind = append(resp.Behind, &distributionv1.NodeFastLane{NodeId: id, Error: "not on the fast lane"})
			}
		}
		f.mu.Unlock()
		sort.Slice(resp.Behind, func(i, j int) bool { return resp.Behind[i].NodeId < resp.Behind[j].NodeId })
		resp.Complete = len(resp.Behind) == 0
		if resp.Complete {
			return resp, nil
		}
		select {
		case <-ctx.Done():
			return resp, nil
		case <-ch:
		case <-streamCh:
		}
	}
}

// LaneNodes returns every connected node's fast-lane position.
func (s *Server) LaneNodes() []*distributionv1.NodeFastLane {
	f := &s.lane
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*distributionv1.NodeFastLane, 0, len(f.nodes))
	for _, n := range f.nodes {
		out = append(out, &distributionv1.NodeFastLane{NodeId: n.id, Version: n.acked, Error: n.lastErr})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeId < out[j].NodeId })
	return out
}

// WaitLane waits until cond holds of the connected nodes' fast-lane
// positions (LaneNodes), or ctx ends.
func (s *Server) WaitLane(ctx context.Context, cond func([]*distributionv1.NodeFastLane) bool) error {
	if err := s.laneLoad(ctx); err != nil {
		return err
	}
	for {
		s.lane.mu.Lock()
		ch := s.lane.changed
		s.lane.mu.Unlock()
		if cond(s.LaneNodes()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (f *fastLane) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// FastLane serves one node's fast-lane stream.
func (s *Server) FastLane(ctx context.Context, stream *connect.BidiStream[distributionv1.FastLaneRequest, distributionv1.FastLaneResponse]) error {
	if err := s.authorizeNode(stream.RequestHeader()); err != nil {
		return err
	}
	if err := s.laneLoad(ctx); err != nil {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the stream starts with a hello"))
	}
	if err := protovalidate.Validate(first); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("hello: %w", err))
	}
	f := &s.lane
	n := &laneNode{id: hello.GetNodeId(), wake: make(chan struct{}, 1)}
	f.mu.Lock()
	if hello.GetEpoch() == f.epoch && hello.GetVersion() <= f.version {
		n.acked, n.sent = hello.GetVersion(), hello.GetVersion()
	} else {
		n.reset = true
	}
	f.nodes[n.id] = n // a reconnect replaces the stream the node left
	f.notifyLocked()
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		if f.nodes[n.id] == n {
			delete(f.nodes, n.id)
		}
		f.notifyLocked()
		f.mu.Unlock()
	}()
	n.poke()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sendErr := make(chan error, 1)
	go func() { sendErr <- s.laneSend(ctx, stream, n) }()
	// Receiving has its own goroutine too, so that a send that fails (the
	// store cannot be read) ends the stream at once and the node
	// reconnects, instead of waiting on a stream that sends nothing until
	// it sends an ACK it has no reason to. Returning closes the request,
	// which ends a Receive in progress.
	recvErr := make(chan error, 1)
	go func() { recvErr <- s.laneReceive(stream, n) }()
	select {
	case err := <-recvErr:
		cancel()
		<-sendErr
		return err
	case err := <-sendErr:
		return err
	}
}

// laneReceive records n's ACKs until the stream ends; it returns the
// error the stream ends with, nil if the node left.
func (s *Server) laneReceive(stream *connect.BidiStream[distributionv1.FastLaneRequest, distributionv1.FastLaneResponse], n *laneNode) error {
	f := &s.lane
	for {
		req, err := stream.Receive()
		if err != nil {
			if errors.Is(err, context.Canceled) || connect.CodeOf(err) == connect.CodeCanceled {
				return nil
			}
			return err
		}
		if err := protovalidate.Validate(req); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		if ack := req.GetAck(); ack != nil {
			f.mu.Lock()
			if ack.GetError() == "" {
				n.acked = max(n.acked, ack.GetVersion())
				n.lastErr = ""
			} else {
				// The node applied the rest and refused the entries it
				// names; sending them again would not mend them. The
				// version does not count as the node's, for Wait.
				n.lastErr = ack.GetError()
				n.refused = append(n.refused, refusal{from: n.acked, to: ack.GetVersion(), err: ack.GetError()})
				if len(n.refused) > maxRefusals {
					n.refused = n.refused[1:]
				}
				s.log.Warn("a node refused fast-lane entries", "node", n.id, "version", ack.GetVersion(), "error", ack.GetError())
			}
			f.notifyLocked()
			f.mu.Unlock()
		}
	}
}

// laneSend sends n what it lacks whenever the lane moves on.
func (s *Server) laneSend(ctx context.Context, stream *connect.BidiStream[distributionv1.FastLaneRequest, distributionv1.FastLaneResponse], n *laneNode) error {
	f := &s.lane
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.wake:
		}
		f.mu.Lock()
		epoch, version, reset, from := f.epoch, f.version, n.reset, n.sent
		var entries []*configv1.FastLaneEntry
		fromMemory := false
		if !reset && from < version && len(f.recent) > 0 && f.recent[0].version <= from+1 {
			fromMemory = true
			for _, b := range f.recent[from+1-f.recent[0].version:] {
				entries = append(entries, b.entries...)
			}
		}
		f.mu.Unlock()
		if !reset && from >= version {
			continue
		}
		if !fromMemory {
			after := from
			if reset {
				after = 0
			}
			rows, v, err := s.store.FastLaneSince(ctx, after)
			if err != nil {
				s.log.Error("reading the fast lane failed", "node", n.id, "err", err)
				return connect.NewError(connect.CodeUnavailable, errors.New("the control plane cannot read the fast lane"))
			}
			version = v
			entries = entries[:0]
			for _, r := range rows {
				e := &configv1.FastLaneEntry{}
				if err := proto.Unmarshal(r.Data, e); err != nil {
					s.log.Error("a stored fast-lane entry does not decode", "kind", r.Kind, "id", r.ID, "err", err)
					continue
				}
				entries = append(entries, e)
			}
		}
		for i := 0; ; i += partEntries {
			end := min(i+partEntries, len(entries))
			msg := &distributionv1.FastLaneUpdate{Epoch: epoch, Version: version, Full: reset, Entries: entries[i:end], More: end < len(entries)}
			if err := stream.Send(&distributionv1.FastLaneResponse{Message: &distributionv1.FastLaneResponse_Update{Update: msg}}); err != nil {
				return err
			}
			if !msg.More {
				break
			}
		}
		f.mu.Lock()
		n.sent, n.reset = version, false
		if n.sent < f.version {
			n.poke()
		}
		f.mu.Unlock()
	}
}

// authorizeNode checks a node's bearer token, when one is required.
func (s *Server) authorizeNode(h http.Header) error {
	return svcauth.Check(h, s.opts.NodeTokenHash, "a node token is required")
}

// role is who a producer's token says it is.
type role int

const (
	rolePublisher role = iota // the publisher token: the key service
	roleUsage                 // the usage token: the quota service
	roleBoth                  // no usage token is set: the publisher token is both
)

// caller authenticates a producer's call by its token: the usage token
// (when set) makes it the quota service, else the publisher token must
// match.
func (s *Server) caller(h http.Header) (role, error) {
	if s.opts.UsageTokenHash != "" {
		if t, ok := svcauth.Token(h); ok && svcauth.Matches(t, s.opts.UsageTokenHash) {
			return roleUsage, nil
		}
	}
	if err := svcauth.Check(h, s.opts.PublisherTokenHash, "a publisher token is required"); err != nil {
		return 0, err
	}
	if s.opts.UsageTokenHash == "" {
		return roleBoth, nil
	}
	return rolePublisher, nil
}

// may refuses a publish from source that the caller's token does not
// speak for: usage marks (laneentry.UsageSource) take the usage token
// when one is set, and the usage token publishes nothing else.
func (r role) may(source string) error {
	switch {
	case r == roleUsage && source != laneentry.UsageSource:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("the usage token publishes source %q only", laneentry.UsageSource))
	case r == rolePublisher && source == laneentry.UsageSource:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("source %q takes the usage token", laneentry.UsageSource))
	}
	return nil
}

// UsageCaller authenticates a call of the usage relay: the usage token
// when one is set, else the publisher token.
func (s *Server) UsageCaller(h http.Header) error {
	if s.opts.UsageTokenHash != "" {
		return svcauth.Check(h, s.opts.UsageTokenHash, "the usage token is required")
	}
	return svcauth.Check(h, s.opts.PublisherTokenHash, "a publisher token is required")
}

// Publisher serves portico.distribution.v1.FastLaneService for s.
type Publisher struct{ s *Server }

// Publisher returns the fast lane's producer API.
func (s *Server) Publisher() *Publisher { return &Publisher{s} }

// Handler returns the service's path and HTTP handler.
func (p *Publisher) Handler() (string, http.Handler) {
	return distributionv1connect.NewFastLaneServiceHandler(p, connect.WithReadMaxBytes(256<<20),
		connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				role, err := p.s.caller(req.Header())
				if err != nil {
					return nil, err
				}
				if msg, ok := req.Any().(proto.Message); ok {
					if err := protovalidate.Validate(msg); err != nil {
						return nil, connect.NewError(connect.CodeInvalidArgument, err)
					}
				}
				if sr, ok := req.Any().(interface{ GetSource() string }); ok {
					if err := role.may(sr.GetSource()); err != nil {
						return nil, err
					}
				}
				return next(ctx, req)
			}
		})))
}

// Publish stores a producer's batch and sends it to every node.
func (p *Publisher) Publish(ctx context.Context, req *connect.Request[distributionv1.PublishRequest]) (*connect.Response[distributionv1.PublishResponse], error) {
	resp, err := p.s.publish(ctx, req.Msg)
	var gap *store.SeqGapError
	var refused *connect.Error
	switch {
	case errors.As(err, &refused):
		return nil, refused // an entry publish refused, with its reason
	case errors.As(err, &gap):
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("the control plane has source %q up to seq %d; send from there", gap.Source, gap.Have))
	case err != nil:
		p.s.log.Error("publishing to the fast lane failed", "source", req.Msg.GetSource(), "err", err)
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the control plane could not store the batch"))
	}
	return connect.NewResponse(resp), nil
}

// Source answers how far the control plane has a producer's changes.
func (p *Publisher) Source(ctx context.Context, req *connect.Request[distributionv1.SourceRequest]) (*connect.Response[distributionv1.SourceResponse], error) {
	// Both from the store, with no publish of this control plane halfway:
	// a version older than the seq would let a producer's Wait pass before
	// the nodes have its changes.
	f := &p.s.lane
	f.publishMu.Lock()
	defer f.publishMu.Unlock()
	seq, err := p.s.store.FastLaneSource(ctx, req.Msg.GetSource())
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the control plane could not read the fast lane"))
	}
	_, version, err := p.s.store.FastLaneInfo(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the control plane could not read the fast lane"))
	}
	return connect.NewResponse(&distributionv1.SourceResponse{Seq: seq, Version: version}), nil
}

// Wait returns when every connected node has the version, or at the
// timeout with the nodes that do not.
func (p *Publisher) Wait(ctx context.Context, req *connect.Request[distributionv1.WaitRequest]) (*connect.Response[distributionv1.WaitResponse], error) {
	timeout := 10 * time.Second
	if d := req.Msg.GetTimeout(); d != nil {
		timeout = d.AsDuration()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := p.s.laneWait(ctx, req.Msg.GetVersion())
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the control plane could not read the fast lane"))
	}
	return connect.NewResponse(resp), nil
}

// Position returns the fast-lane version node id acknowledged last, and
// its last refusal; ok is false when the node is not on the lane.
func (s *Server) Position(id string) (version uint64, lastErr string, ok bool) {
	s.lane.mu.Lock()
	defer s.lane.mu.Unlock()
	n := s.lane.nodes[id]
	if n == nil {
		return 0, "", false
	}
	return n.acked, n.lastErr, true
}
