package fastlane_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/store"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/testclock"
)

// These tests play the nodes and the producer of the fast lane with raw
// Connect clients, so that they control every message the control plane
// is sent. The fleet tests (testing/fleet/keys_test.go) run real nodes and
// the key service.

const (
	nodeToken      = "fastlane-test-node-token-0123456789abcdef"
	publisherToken = "fastlane-test-publisher-token-0123456789abcdef"
	// otherEpoch is an epoch the store did not choose (it chooses 32 hex
	// digits at random).
	otherEpoch = "0123456789abcdef0123456789abcdef"
	// wait bounds every wait on the control plane.
	wait = 20 * time.Second
)

// lane is a distribution server on an h2c test server over a SQLite store,
// with a producer's client.
type lane struct {
	srv   *distribution.Server
	store *store.Store
	url   string
	h2c   http.RoundTripper
	pub   distributionv1connect.FastLaneServiceClient
	// waits receives a value (if it has room) when a Wait call reaches
	// the server.
	waits chan struct{}
}

func startLane(t *testing.T, opts distribution.Options) *lane {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	srv := distribution.New(st, opts)
	mux := http.NewServeMux()
	mux.Handle(srv.Handler())
	mux.Handle(srv.Publisher().Handler())
	waits := make(chan struct{}, 1)
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == distributionv1connect.FastLaneServiceWaitProcedure {
			select {
			case waits <- struct{}{}:
			default:
			}
		}
		mux.ServeHTTP(w, r)
	}))
	gatewaytest.StartH2C(t, hs)
	// Made after the server: its idle connections close before the server
	// does, which waits for open connections.
	h2c := gatewaytest.H2CClient(t).Transport
	l := &lane{srv: srv, store: st, url: hs.URL, h2c: h2c, waits: waits}
	l.pub = l.publisher("")
	return l
}

// client is an HTTP client of the server sending token, if not empty, as
// its bearer token; its calls end after timeout (0: when their context
// does).
func (l *lane) client(token string, timeout time.Duration) *http.Client {
	return &http.Client{Transport: admintest.Bearer(token, l.h2c), Timeout: timeout}
}

// publisher is a producer's client; a call may take a Wait's longest
// timeout in the tests.
func (l *lane) publisher(token string) distributionv1connect.FastLaneServiceClient {
	return distributionv1connect.NewFastLaneServiceClient(l.client(token, 2*wait), l.url)
}

func (l *lane) epoch(t *testing.T) string {
	t.Helper()
	epoch, _, err := l.store.FastLaneInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return epoch
}

// publish publishes source "keys"'s batch (from, to] and returns the answer.
func (l *lane) publish(t *testing.T, from, to uint64, entries ...*configv1.FastLaneEntry) *distributionv1.PublishResponse {
	t.Helper()
	resp, err := l.pub.Publish(context.Background(), connect.NewRequest(&distributionv1.PublishRequest{
		Source: "keys", FromSeq: from, ToSeq: to, Entries: entries}))
	if err != nil {
		t.Fatalf("Publish(keys, %d, %d): %v", from, to, err)
	}
	return resp.Msg
}

func (l *lane) source(t *testing.T, source string) *distributionv1.SourceResponse {
	t.Helper()
	resp, err := l.pub.Source(context.Background(), connect.NewRequest(&distributionv1.SourceRequest{Source: source}))
	if err != nil {
		t.Fatalf("Source(%s): %v", source, err)
	}
	return resp.Msg
}

// laneWait calls Wait and returns its answer and how long it took.
func (l *lane) laneWait(t *testing.T, version uint64, timeout time.Duration) (*distributionv1.WaitResponse, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := l.pub.Wait(context.Background(), connect.NewRequest(&distributionv1.WaitRequest{
		Version: version, Timeout: durationpb.New(timeout)}))
	if err != nil {
		t.Fatalf("Wait(%d, %s): %v", version, timeout, err)
	}
	return resp.Msg, time.Since(start)
}

// waitNodes waits until cond holds of the server's nodes.
func (l *lane) waitNodes(t *testing.T, what string, cond func([]*distributionv1.NodeFastLane) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := l.srv.WaitLane(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v; nodes %v", what, err, l.srv.LaneNodes())
	}
}

// node is a node's fast-lane stream, driven by hand.
type node struct {
	id     string
	stream *connect.BidiStreamForClient[distributionv1.FastLaneRequest, distributionv1.FastLaneResponse]
	// updates are the messages received; end is the stream's end.
	updates chan *distributionv1.FastLaneUpdate
	end     chan error
	close   func()
}

// connect opens a stream as node id holding epoch and version, and
// says hello.
func (l *lane) connect(t *testing.T, id, epoch string, version uint64) *node {
	t.Helper()
	return l.connectAs(t, id, nodeToken, &distributionv1.FastLaneRequest{Message: &distributionv1.FastLaneRequest_Hello{
		Hello: &distributionv1.FastLaneHello{NodeId: id, Epoch: epoch, Version: version}}})
}

// connectAs opens a stream with token (none if empty) and sends first.
func (l *lane) connectAs(t *testing.T, id, token string, first *distributionv1.FastLaneRequest) *node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dc := distributionv1connect.NewDistributionServiceClient(l.client(token, 0), l.url)
	n := &node{id: id, stream: dc.FastLane(ctx), updates: make(chan *distributionv1.FastLaneUpdate, 16),
		end: make(chan error, 1)}
	received := make(chan struct{})
	go func() {
		defer close(received)
		for {
			resp, err := n.stream.Receive()
			if err != nil {
				n.end <- err
				return
			}
			select {
			case n.updates <- resp.GetUpdate():
			case <-ctx.Done():
				n.end <- ctx.Err()
				return
			}
		}
	}()
	n.close = sync.OnceFunc(func() {
		cancel()
		_ = n.stream.CloseRequest()
		<-received
		_ = n.stream.CloseResponse()
	})
	t.Cleanup(n.close)
	// A stream the server refuses at once may refuse the first message
	// too (io.EOF): its error is the stream's end.
	if err := n.stream.Send(first); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("node %s: sending %v: %v", id, first, err)
	}
	return n
}

// update receives one update, all its parts, and returns it whole with
// the number of parts. Every part must be of the same epoch, version and
// fullness, and every part but the last must say more follows.
func (n *node) update(t *testing.T) (*distributionv1.FastLaneUpdate, int) {
	t.Helper()
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	var whole *distributionv1.FastLaneUpdate
	for parts := 1; ; parts++ {
		var u *distributionv1.FastLaneUpdate
		select {
		case u = <-n.updates:
		case err := <-n.end:
			t.Fatalf("node %s: the stream ended: %v", n.id, err)
		case <-timeout.C:
			t.Fatalf("node %s: no update after %s", n.id, wait)
		}
		if whole == nil {
			whole = &distributionv1.FastLaneUpdate{Epoch: u.GetEpoch(), Version: u.GetVersion(), Full: u.GetFull(), Entries: u.GetEntries()}
		} else {
			if u.GetEpoch() != whole.GetEpoch() || u.GetVersion() != whole.GetVersion() || u.GetFull() != whole.GetFull() {
				t.Fatalf("node %s: part %d is epoch %s version %d full %t; the first part was %s %d %t", n.id, parts,
					u.GetEpoch(), u.GetVersion(), u.GetFull(), whole.GetEpoch(), whole.GetVersion(), whole.GetFull())
			}
			whole.Entries = append(whole.Entries, u.GetEntries()...)
		}
		if !u.GetMore() {
			return whole, parts
		}
	}
}

func (n *node) ack(t *testing.T, version uint64, refused string) {
	t.Helper()
	err := n.stream.Send(&distributionv1.FastLaneRequest{Message: &distributionv1.FastLaneRequest_Ack{
		Ack: &distributionv1.FastLaneAck{Version: version, Error: refused}}})
	if err != nil {
		t.Fatalf("node %s: acknowledging %d: %v", n.id, version, err)
	}
}

// ended waits for the stream to end and returns how.
func (n *node) ended(t *testing.T) error {
	t.Helper()
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		select {
		case u := <-n.updates:
			t.Errorf("node %s: update %v, want the stream to end", n.id, u)
		case err := <-n.end:
			return err
		case <-timeout.C:
			t.Fatalf("node %s: the stream still open after %s", n.id, wait)
		}
	}
}

// key is an active API key's entry at rev.
func key(id string, rev uint64) *configv1.FastLaneEntry {
	sum := sha256.Sum256([]byte(id))
	return &configv1.FastLaneEntry{Rev: rev, Entry: &configv1.FastLaneEntry_Key{Key: &configv1.KeyRecord{
		Sha256: sum[:], KeyId: id, AppId: "app-1", TenantId: "tenant-1", Plan: "gold",
		Status: configv1.KeyStatus_KEY_STATUS_ACTIVE}}}
}

func deny(jti string, rev uint64) *configv1.FastLaneEntry {
	return &configv1.FastLaneEntry{Rev: rev, Entry: &configv1.FastLaneEntry_Deny{Deny: &configv1.DenyEntry{
		Match: &configv1.DenyEntry_Jti{Jti: jti}, Expires: timestamppb.New(time.Now().Add(time.Hour))}}}
}

func issuerKeys(issuer string, rev uint64) *configv1.FastLaneEntry {
	return &configv1.FastLaneEntry{Rev: rev, Entry: &configv1.FastLaneEntry_IssuerKeys{IssuerKeys: &configv1.IssuerKeys{
		Issuer: issuer, JwksJson: `{"keys":[]}`}}}
}

// name names an entry for comparisons: its identity and rev.
func name(e *configv1.FastLaneEntry) string {
	switch x := e.GetEntry().(type) {
	case *configv1.FastLaneEntry_Key:
		return fmt.Sprintf("key %s@%d", x.Key.GetKeyId(), e.GetRev())
	case *configv1.FastLaneEntry_Deny:
		if sub := x.Deny.GetSubject(); sub != "" {
			return fmt.Sprintf("deny sub %s@%d", sub, e.GetRev())
		}
		return fmt.Sprintf("deny %s@%d", x.Deny.GetJti(), e.GetRev())
	case *configv1.FastLaneEntry_IssuerKeys:
		return fmt.Sprintf("issuer %s@%d", x.IssuerKeys.GetIssuer(), e.GetRev())
	case *configv1.FastLaneEntry_UsageMark:
		return fmt.Sprintf("mark %s/%s:%d@%d", x.UsageMark.GetNodeId(), x.UsageMark.GetSpoolId(), x.UsageMark.GetSeq(), e.GetRev())
	}
	return fmt.Sprintf("unknown@%d", e.GetRev())
}

// names are the entries' names, sorted.
func names(entries []*configv1.FastLaneEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = name(e)
	}
	slices.Sort(out)
	return out
}

// applied are the entries' names after applying them in order, the last
// state of each entry winning, sorted: what a node holds of them.
func applied(entries []*configv1.FastLaneEntry) []string {
	last := map[string]string{}
	for _, e := range entries {
		n := name(e)
		last[n[:strings.LastIndexByte(n, '@')]] = n
	}
	out := make([]string, 0, len(last))
	for _, n := range last {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// model is what the fast lane should hold: every entry's newest state
// and the version it last changed at.
type model map[string]modelEntry

type modelEntry struct {
	name         string
	rev, version uint64
}

// publish applies a batch stored as version: an entry replaces the one
// it names only if its rev is higher.
func (m model) publish(version uint64, entries ...*configv1.FastLaneEntry) {
	for _, e := range entries {
		n := name(e)
		id := n[:strings.LastIndexByte(n, '@')]
		if old, ok := m[id]; !ok || old.rev < e.GetRev() {
			m[id] = modelEntry{name: n, rev: e.GetRev(), version: version}
		}
	}
}

// since names the entries changed after version, sorted.
func (m model) since(version uint64) []string {
	out := []string{}
	for _, e := range m {
		if e.version > version {
			out = append(out, e.name)
		}
	}
	slices.Sort(out)
	return out
}

// TestFastLaneHello: a node that holds nothing, a version of another
// epoch or a version ahead of the control plane gets the whole state; one
// that holds a version of the current epoch gets what changed since.
func TestFastLaneHello(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{})
	m := model{}
	for i, batch := range [][]*configv1.FastLaneEntry{
		{key("a", 1), key("b", 2), deny("jti-1", 3)},
		{key("c", 4), key("a", 5), issuerKeys("idp", 6)},
		{key("d", 7), deny("jti-1", 8)},
	} {
		resp := l.publish(t, uint64(i), uint64(i+1), batch...)
		if resp.GetVersion() != uint64(i+1) {
			t.Fatalf("Publish #%d = version %d, want %d", i+1, resp.GetVersion(), i+1)
		}
		m.publish(resp.GetVersion(), batch...)
	}
	epoch := l.epoch(t)
	if len(epoch) != 32 {
		t.Fatalf("epoch %q, want 32 hex digits", epoch)
	}
	for _, c := range []struct {
		name     string
		epoch    string
		version  uint64
		wantFull bool
		want     []string
	}{
		{"nothing", "", 0, true, m.since(0)},
		{"version 0 of the epoch", epoch, 0, false, m.since(0)},
		{"version 1", epoch, 1, false, m.since(1)},
		{"version 2", epoch, 2, false, m.since(2)},
		{"another epoch", otherEpoch, 2, true, m.since(0)},
		{"the epoch ahead", epoch, 4, true, m.since(0)},
		{"the epoch far ahead", epoch, 1 << 40, true, m.since(0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			n := l.connect(t, "node-"+strings.ReplaceAll(c.name, " ", "-"), c.epoch, c.version)
			u, _ := n.update(t)
			if u.GetEpoch() != epoch || u.GetVersion() != 3 || u.GetFull() != c.wantFull {
				t.Errorf("update = epoch %s version %d full %t, want %s 3 %t", u.GetEpoch(), u.GetVersion(), u.GetFull(), epoch, c.wantFull)
			}
			if got := applied(u.GetEntries()); !slices.Equal(got, c.want) {
				t.Errorf("update entries = %v, want %v", names(u.GetEntries()), c.want)
			}
			if c.wantFull {
				if got := names(u.GetEntries()); !slices.Equal(got, c.want) {
					t.Errorf("full update = %v, want each entry once: %v", got, c.want)
				}
			}
		})
	}
}

// TestFastLanePublish: every batch accepted is the next version; a retry
// is answered with the version that holds it and sends nothing; a gap is
// refused; an entry older than the stored one is not a change.
func TestFastLanePublish(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{})
	if src := l.source(t, "keys"); src.GetSeq() != 0 || src.GetVersion() != 0 {
		t.Errorf("Source(keys) before any publish = %v, want seq 0, version 0", src)
	}
	m := model{}
	publish := func(from, to, wantVersion uint64, entries ...*configv1.FastLaneEntry) {
		t.Helper()
		resp := l.publish(t, from, to, entries...)
		if resp.GetVersion() != wantVersion || resp.GetSeq() != to {
			t.Fatalf("Publish(keys, %d, %d) = %v, want version %d, seq %d", from, to, resp, wantVersion, to)
		}
		m.publish(wantVersion, entries...)
	}
	publish(0, 2, 1, key("a", 1), key("b", 2))
	publish(2, 5, 2, key("a", 5), key("c", 4))
	publish(5, 6, 3) // no entries: still a version

	epoch := l.epoch(t)
	current := l.connect(t, "node-current", epoch, 3)
	behind := l.connect(t, "node-behind", epoch, 2)
	if u, _ := behind.update(t); u.GetVersion() != 3 || u.GetFull() || len(u.GetEntries()) != 0 {
		t.Errorf("node one behind an empty batch: update %v, want version 3 with no entries", u)
	}
	behind.ack(t, 3, "")
	l.waitNodes(t, "both nodes at version 3", func(nodes []*distributionv1.NodeFastLane) bool {
		return len(nodes) == 2 && nodes[0].GetVersion() == 3 && nodes[1].GetVersion() == 3
	})

	// Retries: the batch whose to_seq is stored is answered with the
	// current version, however it starts.
	for _, r := range [][2]uint64{{5, 6}, {2, 5}, {0, 2}, {0, 6}} {
		resp := l.publish(t, r[0], r[1], key("a", 1), key("z", 99))
		if resp.GetVersion() != 3 || resp.GetSeq() != 6 {
			t.Errorf("retried Publish(keys, %d, %d) = %v, want version 3, seq 6", r[0], r[1], resp)
		}
	}
	_, err := l.pub.Publish(context.Background(), connect.NewRequest(&distributionv1.PublishRequest{
		Source: "keys", FromSeq: 7, ToSeq: 9, Entries: []*configv1.FastLaneEntry{key("z", 98)}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "seq 6") {
		t.Errorf("Publish(keys, 7, 9) after seq 6 = %v, want FailedPrecondition naming seq 6", err)
	}
	if src := l.source(t, "keys"); src.GetSeq() != 6 || src.GetVersion() != 3 {
		t.Errorf("Source(keys) after retries and a gap = %v, want seq 6, version 3", src)
	}

	// Another source has its own seq and shares the versions.
	resp, err := l.pub.Publish(context.Background(), connect.NewRequest(&distributionv1.PublishRequest{
		Source: "identity", FromSeq: 0, ToSeq: 1, Entries: []*configv1.FastLaneEntry{deny("jti-1", 1)}}))
	if err != nil || resp.Msg.GetVersion() != 4 || resp.Msg.GetSeq() != 1 {
		t.Fatalf("Publish(identity, 0, 1) = %v, %v; want version 4, seq 1", resp, err)
	}
	m.publish(4, deny("jti-1", 1))
	if src := l.source(t, "keys"); src.GetSeq() != 6 || src.GetVersion() != 4 {
		t.Errorf("Source(keys) after identity's publish = %v, want seq 6, version 4", src)
	}
	if src := l.source(t, "nobody"); src.GetSeq() != 0 || src.GetVersion() != 4 {
		t.Errorf("Source(nobody) = %v, want seq 0, version 4", src)
	}

	for _, n := range []*node{current, behind} {
		// The first update since the retries: they sent nothing.
		u, _ := n.update(t)
		if u.GetVersion() != 4 || !slices.Equal(names(u.GetEntries()), []string{"deny jti-1@1"}) {
			t.Errorf("node %s: update = version %d %v, want version 4 [deny jti-1@1]", n.id, u.GetVersion(), names(u.GetEntries()))
		}
		n.ack(t, 4, "")
	}

	// a@3 is older than the stored a@5: the store keeps a@5 and the
	// batch changes only c.
	publish(6, 8, 5, key("a", 3), key("c", 7))
	for _, n := range []*node{current, behind} {
		u, _ := n.update(t)
		if u.GetVersion() != 5 || u.GetFull() || !slices.Equal(names(u.GetEntries()), []string{"key c@7"}) {
			t.Errorf("node %s: update = version %d full %t %v, want version 5 [key c@7]", n.id, u.GetVersion(), u.GetFull(), names(u.GetEntries()))
		}
	}
	for _, c := range []struct {
		epoch   string
		version uint64
	}{{"", 0}, {epoch, 1}, {epoch, 4}} {
		n := l.connect(t, fmt.Sprintf("node-at-%d", c.version), c.epoch, c.version)
		u, _ := n.update(t)
		if got, want := applied(u.GetEntries()), m.since(c.version); u.GetVersion() != 5 || !slices.Equal(got, want) {
			t.Errorf("node at version %d: update = version %d %v, want version 5 %v", c.version, u.GetVersion(), names(u.GetEntries()), want)
		}
	}
}

// TestFastLaneKeepsDenyEntries: the control plane keeps a deny entry
// until denyentry.KeepUntil (and its prune margin), not the expires it
// asks for, so that a node that joins later still gets every entry that
// covers a live token.
func TestFastLaneKeepsDenyEntries(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_800_000_000, 0)
	clk := testclock.New(t0)
	l := startLane(t, distribution.Options{Now: clk.Now})
	asked := timestamppb.New(t0.Add(15 * time.Minute))
	entry := func(rev uint64, d *configv1.DenyEntry) *configv1.FastLaneEntry {
		d.Expires = asked
		return &configv1.FastLaneEntry{Rev: rev, Entry: &configv1.FastLaneEntry_Deny{Deny: d}}
	}
	l.publish(t, 0, 3,
		// Every token of user-7 issued before t0: an issuer may let one
		// live a day.
		entry(1, &configv1.DenyEntry{Match: &configv1.DenyEntry_Subject{Subject: "user-7"}, IssuedBefore: timestamppb.New(t0)}),
		// A token that expires in three hours.
		entry(2, &configv1.DenyEntry{Match: &configv1.DenyEntry_Jti{Jti: "three-hours"}, TokenExpires: timestamppb.New(t0.Add(3 * time.Hour))}),
		// Nothing but the expires asked for.
		entry(3, &configv1.DenyEntry{Match: &configv1.DenyEntry_Jti{Jti: "bare"}}))
	nodes := 0
	state := func(what string, want ...string) {
		t.Helper()
		nodes++
		n := l.connect(t, fmt.Sprintf("node-%d", nodes), "", 0)
		defer n.close()
		u, _ := n.update(t)
		if got := names(u.GetEntries()); !slices.Equal(got, want) {
			t.Errorf("%s: a new node gets %v, want %v", what, got, want)
		}
	}
	// Publishes prune, at most every 10 minutes, an hour after KeepUntil.
	clk.Set(t0.Add(3*time.Hour + 10*time.Minute))
	l.publish(t, 3, 4, key("k1", 4))
	state("past the asked expires", "deny sub user-7@1", "deny three-hours@2", "key k1@4")
	clk.Set(t0.Add(4*time.Hour + 10*time.Minute))
	l.publish(t, 4, 5, key("k2", 5))
	state("past the token's exp", "deny sub user-7@1", "key k1@4", "key k2@5")
	clk.Set(t0.Add(24*time.Hour + 5*time.Minute + time.Hour + time.Second))
	l.publish(t, 5, 6, key("k3", 6))
	state("past a day's lifetime", "key k1@4", "key k2@5", "key k3@6")
}

// TestFastLaneLargeState: an update of more than partEntries entries
// comes in parts of one version, each but the last saying more follows.
func TestFastLaneLargeState(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{})
	const total = 10000 + 1 // partEntries + 1
	l.publish(t, 0, 1, key("first", 1))
	epoch := l.epoch(t)
	behind := l.connect(t, "node-behind", epoch, 1)
	batch := make([]*configv1.FastLaneEntry, total)
	for i := range batch {
		batch[i] = key(fmt.Sprintf("k-%05d", i), uint64(i+2))
	}
	if resp := l.publish(t, 1, 2, batch...); resp.GetVersion() != 2 {
		t.Fatalf("Publish = version %d, want 2", resp.GetVersion())
	}
	for _, c := range []struct {
		node     *node
		wantFull bool
		want     int
	}{
		{l.connect(t, "node-new", "", 0), true, total + 1},
		{behind, false, total},
	} {
		u, parts := c.node.update(t)
		if parts != 2 || u.GetVersion() != 2 || u.GetFull() != c.wantFull {
			t.Errorf("node %s: update of %d parts, version %d, full %t; want 2 parts, version 2, full %t", c.node.id, parts, u.GetVersion(), u.GetFull(), c.wantFull)
		}
		if got, distinct := len(u.GetEntries()), len(slices.Compact(names(u.GetEntries()))); got != c.want || distinct != c.want {
			t.Errorf("node %s: %d entries, %d distinct; want %d", c.node.id, got, distinct, c.want)
		}
	}
}

// TestFastLaneFarBehind: a node more versions behind than the control
// plane keeps in memory gets exactly the entries changed since its
// version; nodes within them get what brings them to the same state.
func TestFastLaneFarBehind(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{})
	const (
		recentBatches = 4096
		every         = 16 // a batch in every so many changes an entry
		batches       = recentBatches + 2*every
		keys          = 40
	)
	m := model{}
	first := []*configv1.FastLaneEntry{key("early", 1), key("k-0", 1)}
	l.publish(t, 0, 1, first...)
	m.publish(1, first...)
	// The many batches are published with the producer API in process,
	// without a round trip each, and most of them empty (a store write is
	// slow under the race detector); a node cannot tell them from others.
	p := l.srv.Publisher()
	for v := uint64(2); v <= batches; v++ {
		// The keys change in turn; each batch that changes one also
		// carries the previous change's key at a rev older than stored.
		var e []*configv1.FastLaneEntry
		if v == 2 || v == batches-recentBatches {
			// Changed once, in the version after a node's: a node that
			// is not sent its next version misses it.
			e = append(e, key(fmt.Sprintf("once-%d", v), v))
		}
		if v%every == 0 {
			e = append(e, key(fmt.Sprintf("k-%d", v/every%keys), v))
			if v > every {
				e = append(e, key(fmt.Sprintf("k-%d", (v/every-1)%keys), v-every-1))
			}
		}
		resp, err := p.Publish(context.Background(), connect.NewRequest(&distributionv1.PublishRequest{
			Source: "keys", FromSeq: v - 1, ToSeq: v, Entries: e}))
		if err != nil || resp.Msg.GetVersion() != v {
			t.Fatalf("Publish #%d = %v, %v; want version %d", v, resp, err, v)
		}
		m.publish(v, e...)
	}
	epoch := l.epoch(t)
	for _, c := range []struct {
		name    string
		version uint64
		// exact: the update is each changed entry once (read from the
		// store, or a single batch); otherwise the batches since the
		// node's version, in order.
		exact bool
	}{
		{"far behind", 1, true},
		{"just older than memory", batches - recentBatches - 1, true},
		{"the oldest in memory", batches - recentBatches, false},
		{"one behind", batches - 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			n := l.connect(t, "node-"+strings.ReplaceAll(c.name, " ", "-"), epoch, c.version)
			u, _ := n.update(t)
			want := m.since(c.version)
			if u.GetVersion() != batches || u.GetFull() {
				t.Errorf("update = version %d full %t, want %d, not full", u.GetVersion(), u.GetFull(), batches)
			}
			if got := applied(u.GetEntries()); !slices.Equal(got, want) {
				t.Errorf("update from version %d brings %d entries to %v, want %v", c.version, len(u.GetEntries()), got, want)
			}
			if got := names(u.GetEntries()); c.exact && !slices.Equal(got, want) {
				t.Errorf("update from version %d = %v, want %v", c.version, got, want)
			}
		})
	}
}

// TestFastLaneWait: Wait answers when every connected node acknowledged
// the version, or at its timeout with the nodes that did not; a refusal
// does not count, and a node that left is not waited for.
func TestFastLaneWait(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{})
	if resp, _ := l.laneWait(t, 1, wait); !resp.GetComplete() || resp.GetNodes() != 0 || len(resp.GetBehind()) != 0 {
		t.Errorf("Wait with no node = %v, want complete, 0 nodes", resp)
	}
	nodes := map[string]*node{}
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		n := l.connect(t, id, "", 0)
		if u, _ := n.update(t); u.GetVersion() != 0 || !u.GetFull() {
			t.Fatalf("node %s: first update %v, want version 0, full", id, u)
		}
		n.ack(t, 0, "")
		nodes[id] = n
	}
	v := l.publish(t, 0, 1, key("a", 1)).GetVersion()
	for _, n := range nodes {
		if u, _ := n.update(t); u.GetVersion() != v {
			t.Fatalf("node %s: update %v, want version %d", n.id, u, v)
		}
	}
	const refused = `entry key "a": refused (test)`
	nodes["node-a"].ack(t, v, "")
	nodes["node-c"].ack(t, v, refused)
	l.waitNodes(t, "node-a's ACK and node-c's refusal", func(ns []*distributionv1.NodeFastLane) bool {
		return len(ns) == 3 && ns[0].GetVersion() == v && ns[2].GetError() != ""
	})

	const short = 200 * time.Millisecond
	resp, took := l.laneWait(t, v, short)
	want := &distributionv1.WaitResponse{Nodes: 3, Behind: []*distributionv1.NodeFastLane{
		{NodeId: "node-b", Version: 0}, {NodeId: "node-c", Version: 0, Error: refused}}}
	if !proto.Equal(resp, want) || took < short {
		t.Errorf("Wait(%d, %s) = %v after %s, want %v at the timeout", v, short, resp, took, want)
	}

	nodes["node-b"].ack(t, v, "")
	l.waitNodes(t, "node-b's ACK", func(ns []*distributionv1.NodeFastLane) bool { return len(ns) == 3 && ns[1].GetVersion() == v })
	resp, _ = l.laneWait(t, v, short)
	want = &distributionv1.WaitResponse{Nodes: 3, Behind: []*distributionv1.NodeFastLane{{NodeId: "node-c", Version: 0, Error: refused}}}
	if !proto.Equal(resp, want) {
		t.Errorf("Wait(%d) with node-c's refusal = %v, want %v", v, resp, want)
	}

	// node-c leaves while Wait waits for it.
	type result struct {
		resp *distributionv1.WaitResponse
		took time.Duration
	}
	// waitAsync calls Wait(v) and returns once the call reached the
	// server, so that what the test does next most likely happens while
	// it waits (a Wait that misses what changes then answers at its
	// timeout, not at once).
	waitAsync := func(v uint64) <-chan result {
		for len(l.waits) > 0 {
			<-l.waits
		}
		waited := make(chan result, 1)
		go func() {
			start := time.Now()
			resp, err := l.pub.Wait(context.Background(), connect.NewRequest(&distributionv1.WaitRequest{Version: v, Timeout: durationpb.New(wait)}))
			if err != nil {
				t.Errorf("Wait(%d): %v", v, err)
				waited <- result{}
				return
			}
			waited <- result{resp.Msg, time.Since(start)}
		}()
		timeout := time.NewTimer(wait)
		defer timeout.Stop()
		select {
		case <-l.waits:
		case <-timeout.C:
			t.Fatalf("Wait(%d) did not reach the server in %s", v, wait)
		}
		return waited
	}
	answer := func(waited <-chan result, what string) {
		t.Helper()
		timeout := time.NewTimer(wait + time.Second)
		defer timeout.Stop()
		select {
		case r := <-waited:
			if want := (&distributionv1.WaitResponse{Complete: true, Nodes: 2}); !proto.Equal(r.resp, want) || r.took >= wait/2 {
				t.Errorf("Wait(%d) %s = %v after %s, want %v at once", v, what, r.resp, r.took, want)
			}
		case <-timeout.C:
			t.Fatalf("Wait(%d) %s did not answer", v, what)
		}
	}
	waited := waitAsync(v)
	nodes["node-c"].close()
	answer(waited, "after node-c left")

	// Wait wakes up for ACKs.
	v = l.publish(t, 1, 2, key("b", 2)).GetVersion()
	for _, n := range []*node{nodes["node-a"], nodes["node-b"]} {
		if u, _ := n.update(t); u.GetVersion() != v {
			t.Fatalf("node %s: update %v, want version %d", n.id, u, v)
		}
	}
	waited = waitAsync(v)
	nodes["node-a"].ack(t, v, "")
	nodes["node-b"].ack(t, v, "")
	answer(waited, "after node-a's and node-b's ACKs")
}

// TestFastLaneAuth: the streams need the node token and the producer API
// the publisher token, when they are set.
func TestFastLaneAuth(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{
		NodeTokenHash:      store.SHA256([]byte(nodeToken)),
		PublisherTokenHash: store.SHA256([]byte(publisherToken)),
	})
	hello := func(id string) *distributionv1.FastLaneRequest {
		return &distributionv1.FastLaneRequest{Message: &distributionv1.FastLaneRequest_Hello{Hello: &distributionv1.FastLaneHello{NodeId: id}}}
	}
	for _, token := range []string{"", publisherToken, nodeToken + "x"} {
		n := l.connectAs(t, "node-"+fmt.Sprint(len(token)), token, hello("node-1"))
		if err := n.ended(t); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("FastLane with token %q: %v, want Unauthenticated", token, err)
		}
	}
	if u, _ := l.connectAs(t, "node-ok", nodeToken, hello("node-ok")).update(t); !u.GetFull() {
		t.Errorf("FastLane with the node token: update %v, want the full state", u)
	}

	ctx := context.Background()
	for _, token := range []string{"", nodeToken, publisherToken + "x"} {
		p := l.publisher(token)
		_, err := p.Publish(ctx, connect.NewRequest(&distributionv1.PublishRequest{Source: "keys", FromSeq: 0, ToSeq: 1,
			Entries: []*configv1.FastLaneEntry{key("a", 1)}}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("Publish with token %q: %v, want Unauthenticated", token, err)
		}
		if _, err := p.Source(ctx, connect.NewRequest(&distributionv1.SourceRequest{Source: "keys"})); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("Source with token %q: %v, want Unauthenticated", token, err)
		}
		if _, err := p.Wait(ctx, connect.NewRequest(&distributionv1.WaitRequest{Version: 1})); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("Wait with token %q: %v, want Unauthenticated", token, err)
		}
	}
	if _, version, _ := l.store.FastLaneInfo(ctx); version != 0 {
		t.Errorf("after refused publishes the fast lane is at version %d, want 0", version)
	}
	p := l.publisher(publisherToken)
	resp, err := p.Publish(ctx, connect.NewRequest(&distributionv1.PublishRequest{Source: "keys", FromSeq: 0, ToSeq: 1,
		Entries: []*configv1.FastLaneEntry{key("a", 1)}}))
	if err != nil || resp.Msg.GetVersion() != 1 {
		t.Fatalf("Publish with the publisher token = %v, %v; want version 1", resp, err)
	}
	if src, err := p.Source(ctx, connect.NewRequest(&distributionv1.SourceRequest{Source: "keys"})); err != nil || src.Msg.GetSeq() != 1 {
		t.Errorf("Source with the publisher token = %v, %v; want seq 1", src, err)
	}
}

// TestFastLaneInvalid: a request the protocol does not allow is
// InvalidArgument and changes nothing.
func TestFastLaneInvalid(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{})
	ctx := context.Background()
	valid := key("a", 1)
	noStatus := key("b", 2)
	noStatus.GetKey().Status = configv1.KeyStatus_KEY_STATUS_UNSPECIFIED
	shortHash := key("b", 2)
	shortHash.GetKey().Sha256 = []byte{1, 2, 3}
	noExpiry := deny("jti-1", 2)
	noExpiry.GetDeny().Expires = nil
	for _, c := range []struct {
		name string
		req  *distributionv1.PublishRequest
	}{
		{"to_seq equal to from_seq", &distributionv1.PublishRequest{Source: "keys", FromSeq: 1, ToSeq: 1, Entries: []*configv1.FastLaneEntry{valid}}},
		{"to_seq before from_seq", &distributionv1.PublishRequest{Source: "keys", FromSeq: 2, ToSeq: 1, Entries: []*configv1.FastLaneEntry{valid}}},
		{"no to_seq", &distributionv1.PublishRequest{Source: "keys", Entries: []*configv1.FastLaneEntry{valid}}},
		{"no source", &distributionv1.PublishRequest{FromSeq: 0, ToSeq: 1, Entries: []*configv1.FastLaneEntry{valid}}},
		{"source not a name", &distributionv1.PublishRequest{Source: "Keys!", FromSeq: 0, ToSeq: 1, Entries: []*configv1.FastLaneEntry{valid}}},
		{"rev 0", &distributionv1.PublishRequest{Source: "keys", FromSeq: 0, ToSeq: 1, Entries: []*configv1.FastLaneEntry{valid, key("b", 0)}}},
		{"an entry of nothing", &distributionv1.PublishRequest{Source: "keys", FromSeq: 0, ToSeq: 1, Entries: []*configv1.FastLaneEntry{valid, {Rev: 2}}}},
		{"a key without a status", &distributionv1.PublishRequest{Source: "keys", FromSeq: 0, ToSeq: 1, Entries: []*configv1.FastLaneEntry{valid, noStatus}}},
		{"a key with a short hash", &distributionv1.PublishRequest{Source: "keys", FromSeq: 0, ToSeq: 1, Entries: []*configv1.FastLaneEntry{valid, shortHash}}},
		{"a deny entry without expiry", &distributionv1.PublishRequest{Source: "keys", FromSeq: 0, ToSeq: 1, Entries: []*configv1.FastLaneEntry{valid, noExpiry}}},
	} {
		if _, err := l.pub.Publish(ctx, connect.NewRequest(c.req)); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Publish with %s: %v, want InvalidArgument", c.name, err)
		}
	}
	entries, version, err := l.store.FastLaneSince(ctx, 0)
	if err != nil || version != 0 || len(entries) != 0 {
		t.Errorf("after invalid publishes the store holds version %d, %d entries (%v), want nothing", version, len(entries), err)
	}
	if src := l.source(t, "keys"); src.GetSeq() != 0 || src.GetVersion() != 0 {
		t.Errorf("Source(keys) after invalid publishes = %v, want seq 0, version 0", src)
	}
	if _, err := l.pub.Source(ctx, connect.NewRequest(&distributionv1.SourceRequest{Source: "Keys!"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("Source(Keys!): %v, want InvalidArgument", err)
	}
	for _, req := range []*distributionv1.WaitRequest{
		{Version: 0},
		{Version: 1, Timeout: durationpb.New(0)},
		{Version: 1, Timeout: durationpb.New(301 * time.Second)},
	} {
		if _, err := l.pub.Wait(ctx, connect.NewRequest(req)); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Wait(%v): %v, want InvalidArgument", req, err)
		}
	}
	if resp := l.publish(t, 0, 1, valid); resp.GetVersion() != 1 {
		t.Errorf("the first valid Publish = version %d, want 1", resp.GetVersion())
	}

	for _, c := range []struct {
		name  string
		first *distributionv1.FastLaneRequest
	}{
		{"an ACK first", &distributionv1.FastLaneRequest{Message: &distributionv1.FastLaneRequest_Ack{Ack: &distributionv1.FastLaneAck{Version: 1}}}},
		{"a node id with a space", &distributionv1.FastLaneRequest{Message: &distributionv1.FastLaneRequest_Hello{Hello: &distributionv1.FastLaneHello{NodeId: "node 1"}}}},
		{"no node id", &distributionv1.FastLaneRequest{Message: &distributionv1.FastLaneRequest_Hello{Hello: &distributionv1.FastLaneHello{}}}},
	} {
		n := l.connectAs(t, c.name, "", c.first)
		if err := n.ended(t); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("FastLane starting with %s: %v, want InvalidArgument", c.name, err)
		}
	}
	if nodes := l.srv.LaneNodes(); len(nodes) != 0 {
		t.Errorf("after invalid hellos the nodes are %v, want none", nodes)
	}
}

// TestFastLaneReconnect: a node that comes back with the version it
// acknowledged gets what changed since, and replaces its old stream.
func TestFastLaneReconnect(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{})
	m := model{}
	publish := func(from, to uint64, entries ...*configv1.FastLaneEntry) uint64 {
		t.Helper()
		v := l.publish(t, from, to, entries...).GetVersion()
		m.publish(v, entries...)
		return v
	}
	publish(0, 1, key("a", 1), key("b", 1))

	n := l.connect(t, "node-1", "", 0)
	u, _ := n.update(t)
	epoch := u.GetEpoch()
	n.ack(t, u.GetVersion(), "")
	v := publish(1, 2, key("c", 2))
	if u, _ = n.update(t); u.GetVersion() != v {
		t.Fatalf("update %v, want version %d", u, v)
	}
	n.ack(t, v, "")
	l.waitNodes(t, "node-1 at version 2", func(ns []*distributionv1.NodeFastLane) bool {
		return len(ns) == 1 && ns[0].GetVersion() == v
	})
	n.close()
	l.waitNodes(t, "node-1 gone", func(ns []*distributionv1.NodeFastLane) bool { return len(ns) == 0 })

	publish(2, 3, key("a", 3))
	latest := publish(3, 4, key("d", 4), key("b", 4))
	again := l.connect(t, "node-1", epoch, v)
	u, _ = again.update(t)
	if want := m.since(v); u.GetVersion() != latest || u.GetFull() || !slices.Equal(applied(u.GetEntries()), want) {
		t.Errorf("after reconnecting at version %d: update version %d full %t %v, want version %d %v",
			v, u.GetVersion(), u.GetFull(), names(u.GetEntries()), latest, want)
	}
	if resp, _ := l.laneWait(t, latest, time.Millisecond); resp.GetComplete() || len(resp.GetBehind()) != 1 || resp.GetBehind()[0].GetVersion() != v {
		t.Errorf("Wait(%d) before the reconnected node's ACK = %v, want node-1 behind at %d", latest, resp, v)
	}
	again.ack(t, latest, "")

	// The same node on a second stream, before the first one ends:
	// one node, which the new stream speaks for.
	third := l.connect(t, "node-1", epoch, latest)
	publish(4, 5, key("e", 5))
	u, _ = third.update(t)
	third.ack(t, u.GetVersion(), "")
	if resp, _ := l.laneWait(t, u.GetVersion(), wait); !resp.GetComplete() || resp.GetNodes() != 1 {
		t.Errorf("Wait(%d) with node-1 on two streams = %v, want complete, 1 node", u.GetVersion(), resp)
	}
}

// TestFastLaneStoreDown: a node whose update the control plane cannot
// read is told so, and is not left waiting on a stream that sends nothing.
func TestFastLaneStoreDown(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{})
	l.publish(t, 0, 1, key("a", 1))
	if err := l.store.Close(); err != nil {
		t.Fatal(err)
	}
	n := l.connect(t, "node-1", "", 0)
	if err := n.ended(t); connect.CodeOf(err) != connect.CodeUnavailable || strings.Contains(err.Error(), "sql") {
		t.Errorf("FastLane with the store down: %v, want Unavailable, without the store's error", err)
	}
	l.waitNodes(t, "node-1 gone", func(ns []*distributionv1.NodeFastLane) bool { return len(ns) == 0 })
}

// TestFastLaneWaitCountsStreamNodes: a node on the snapshot stream whose
// fast-lane stream is not up is behind for Wait, so a key is not shown
// because one node's lane happens to be down; once its lane is up and
// acknowledges, Wait is complete.
func TestFastLaneWaitCountsStreamNodes(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{})
	v := l.publish(t, 0, 1, key("a", 1)).GetVersion()
	dc := distributionv1connect.NewDistributionServiceClient(l.client("", 0), l.url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snap := dc.Stream(ctx)
	t.Cleanup(func() { _ = snap.CloseRequest(); _ = snap.CloseResponse() })
	if err := snap.Send(&distributionv1.StreamRequest{Message: &distributionv1.StreamRequest_Hello{Hello: &distributionv1.Hello{NodeId: "node-s"}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for len(l.srv.Status().Nodes) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the node is not on the snapshot stream")
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, _ := l.laneWait(t, v, 200*time.Millisecond)
	want := &distributionv1.WaitResponse{Nodes: 1, Behind: []*distributionv1.NodeFastLane{{NodeId: "node-s", Error: "not on the fast lane"}}}
	if !proto.Equal(resp, want) {
		t.Errorf("Wait with a node off the lane = %v, want %v", resp, want)
	}
	n := l.connect(t, "node-s", "", 0)
	if u, _ := n.update(t); u.GetVersion() != v {
		t.Fatalf("update %v, want version %d", u, v)
	}
	n.ack(t, v, "")
	if resp, _ := l.laneWait(t, v, wait); !resp.GetComplete() || resp.GetNodes() != 1 {
		t.Errorf("Wait once the node's lane acknowledged = %v, want complete, 1 node", resp)
	}
}

// TestFastLaneWaitRemembersRefusals: a node that refused entries of a
// version and then cleanly acknowledged a later one still lacks what it
// refused: Wait for the refused version counts it as behind, with the
// refusal; Wait for the later one does not.
func TestFastLaneWaitRemembersRefusals(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{})
	n := l.connect(t, "node-r", "", 0)
	if u, _ := n.update(t); !u.GetFull() {
		t.Fatalf("first update %v, want full", u)
	}
	n.ack(t, 0, "")
	v1 := l.publish(t, 0, 1, key("a", 1)).GetVersion()
	if u, _ := n.update(t); u.GetVersion() != v1 {
		t.Fatalf("update %v, want version %d", u, v1)
	}
	const refused = `entries[0]: refused (test)`
	n.ack(t, v1, refused)
	v2 := l.publish(t, 1, 2, key("b", 2)).GetVersion()
	if u, _ := n.update(t); u.GetVersion() != v2 {
		t.Fatalf("update %v, want version %d", u, v2)
	}
	n.ack(t, v2, "")
	l.waitNodes(t, "node-r's clean ACK of the later version", func(ns []*distributionv1.NodeFastLane) bool {
		return len(ns) == 1 && ns[0].GetVersion() == v2
	})
	resp, _ := l.laneWait(t, v1, 200*time.Millisecond)
	want := &distributionv1.WaitResponse{Nodes: 1, Behind: []*distributionv1.NodeFastLane{{NodeId: "node-r", Version: v2, Error: refused}}}
	if !proto.Equal(resp, want) {
		t.Errorf("Wait(%d), the refused version = %v, want %v", v1, resp, want)
	}
	if resp, _ := l.laneWait(t, v2, wait); !resp.GetComplete() {
		t.Errorf("Wait(%d), the cleanly acknowledged version = %v, want complete", v2, resp)
	}
}
