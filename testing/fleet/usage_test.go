package fleet_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/portico-gw/portico/control"
	"github.com/portico-gw/portico/control/store"
	gwdist "github.com/portico-gw/portico/gateway/distribution"
	"github.com/portico-gw/portico/gateway/laneentry"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
	"github.com/portico-gw/portico/gen/portico/distribution/v1/distributionv1connect"
	"github.com/portico-gw/portico/internal/lanepub"
	"github.com/portico-gw/portico/testing/admintest"
	"github.com/portico-gw/portico/testing/gatewaytest"
)

const (
	usagePublisherToken = "usage-test-publisher-token-0123456789abcdef"
	usageSpool          = "00112233445566778899aabbccddeeff"
)

// usageRecorder is a node's usage counting as its stream client sees it.
type usageRecorder struct {
	spool   *distributionv1.UsageSpool
	offsets chan time.Duration
	resends chan *distributionv1.ResendUsage
}

func (u *usageRecorder) UsageSpool() *distributionv1.UsageSpool { return u.spool }
func (u *usageRecorder) SetClockOffset(d time.Duration) {
	select {
	case u.offsets <- d:
	default: // the test reads the first few
	}
}
func (u *usageRecorder) ResendUsage(r *distributionv1.ResendUsage) { u.resends <- r }

// markOutbox is the quota service's usage marks as a lanepub source.
type markOutbox struct {
	mu      sync.Mutex
	entries []*configv1.FastLaneEntry // entries[i].Rev == i+1
}

func (o *markOutbox) add(node, spool string, seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.entries = append(o.entries, &configv1.FastLaneEntry{Rev: uint64(len(o.entries) + 1), Entry: &configv1.FastLaneEntry_UsageMark{
		UsageMark: &configv1.UsageMark{NodeId: node, SpoolId: spool, Seq: seq}}})
}

func (o *markOutbox) Changes(_ context.Context, after uint64, limit int) ([]*configv1.FastLaneEntry, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if after >= uint64(len(o.entries)) {
		return nil, nil
	}
	return o.entries[after:min(uint64(len(o.entries)), after+uint64(limit))], nil
}

func (o *markOutbox) Seq(context.Context) (uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return uint64(len(o.entries)), nil
}

func (o *markOutbox) Advance(context.Context, uint64) (bool, error) { return false, nil }

// TestUsagePlumbing: the quota service's usage marks, published as
// source "quota" through lanepub, reach a node's OnUsageMark hook over
// the real fast lane; the reconciler's re-send reaches the node's usage
// through the relay and the node's real snapshot stream; the node's
// clock offset is measured from the control plane's answers; the relay
// lists the node's spool and refuses callers without the publisher token.
func TestUsagePlumbing(t *testing.T) {
	t.Parallel()
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	p, err := control.New(context.Background(), control.Options{Store: st, NodeToken: nodeToken, PublisherToken: usagePublisherToken,
		Logger: gatewaytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	srv := httptest.NewUnstartedServer(p.Handler)
	gatewaytest.StartH2C(t, srv)

	gw := gatewaytest.Start(t, nil, nil)
	marks := make(chan *configv1.UsageMark, 16)
	gw.Node.FastLane().OnUsageMark(func(m *configv1.UsageMark) { marks <- m })
	usage := &usageRecorder{
		spool:   &distributionv1.UsageSpool{SpoolId: usageSpool, FirstSeq: 1, LastSeq: 12},
		offsets: make(chan time.Duration, 4), resends: make(chan *distributionv1.ResendUsage, 4),
	}
	// The node's clock is 2 minutes behind the control plane's.
	const skew = 2 * time.Minute
	client := gwdist.New(gwdist.Options{
		URL: srv.URL, HTTPClient: gatewaytest.H2CClient(t), Token: nodeToken, NodeID: "node-u1", Pool: "public", Region: "eu-west",
		Apply: gw.Node.Apply, Lane: gw.Node.FastLane(), Usage: usage, Now: func() time.Time { return time.Now().Add(-skew) },
		Logger: gatewaytest.Logger(), ReportInterval: 20 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = client.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()

	// The clock: received − (sent + arrived)/2 on the node's clock, the
	// control plane's 2 minutes ahead, within half the round trip (which
	// the test cannot bound, but a loopback's is far under a second).
	select {
	case d := <-usage.offsets:
		if diff := d - skew; diff < -time.Second || diff > time.Second {
			t.Errorf("clock offset = %v, want %v within a loopback's half round trip", d, skew)
		}
	case <-deadline.C:
		t.Fatal("no clock offset within 20s")
	}

	// The marks: the quota service's outbox, published by lanepub.
	out := &markOutbox{}
	out.add("node-u1", usageSpool, 7)
	out.add("node-u2", usageSpool, 3)
	out.add("node-u1", usageSpool, 9)
	pub := lanepub.New(out, lanepub.Options{Name: laneentry.UsageSource, URL: srv.URL, Token: usagePublisherToken,
		HTTPClient: gatewaytest.H2CClient(t), Logger: gatewaytest.Logger()})
	if _, err := pub.Sync(context.Background()); err != nil {
		t.Fatalf("publishing the marks: %v", err)
	}
	// One update, the newest of each spool, in the lane's order.
	got := map[string]uint64{}
	for len(got) < 2 || got["node-u1"] != 9 {
		select {
		case m := <-marks:
			got[m.GetNodeId()] = m.GetSeq()
		case <-deadline.C:
			t.Fatalf("marks at the node after 20s: %v, want node-u1 at 9 and node-u2 at 3", got)
		}
	}
	if got["node-u2"] != 3 {
		t.Errorf("node-u2's mark = %d, want 3", got["node-u2"])
	}
	if m, ok := gw.Node.FastLane().UsageMark("node-u1", usageSpool); !ok || m.GetSeq() != 9 {
		t.Errorf("the lane holds node-u1's mark %v, %v; want seq 9", m, ok)
	}

	// The relay, as the reconciler calls it.
	relay := distributionv1connect.NewUsageRelayServiceClient(&http.Client{Transport: admintest.Bearer(usagePublisherToken, gatewaytest.H2CClient(t).Transport)}, srv.URL)
	spools, err := relay.Spools(context.Background(), connect.NewRequest(&distributionv1.SpoolsRequest{}))
	if err != nil {
		t.Fatalf("Spools: %v", err)
	}
	if n := spools.Msg.GetNodes(); len(n) != 1 || n[0].GetNodeId() != "node-u1" || n[0].GetRegion() != "eu-west" ||
		!cmp.Equal(n[0].GetUsage(), usage.spool, protocmp.Transform()) {
		t.Errorf("Spools = %v, want node-u1 in eu-west with its spool", n)
	} else if d := n[0].GetClockOffset().AsDuration(); d-skew < -time.Second || d-skew > time.Second {
		t.Errorf("the control plane's estimate of the offset = %v, want about %v", d, skew)
	}
	rs := &distributionv1.ResendUsage{SpoolId: usageSpool, FromSeq: 4, ToSeq: 6}
	if _, err := relay.Resend(context.Background(), connect.NewRequest(&distributionv1.ResendRequest{NodeId: "node-u1", Resend: rs})); err != nil {
		t.Fatalf("Resend: %v", err)
	}
	select {
	case r := <-usage.resends:
		if diff := cmp.Diff(rs, r, protocmp.Transform()); diff != "" {
			t.Errorf("the re-send the node got (-want +got):\n%s", diff)
		}
	case <-deadline.C:
		t.Fatal("no re-send at the node within 20s")
	}
	for _, token := range []string{"", nodeToken} {
		r := distributionv1connect.NewUsageRelayServiceClient(&http.Client{Transport: admintest.Bearer(token, gatewaytest.H2CClient(t).Transport)}, srv.URL)
		if _, err := r.Spools(context.Background(), connect.NewRequest(&distributionv1.SpoolsRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("Spools with token %q: %v, want Unauthenticated", token, err)
		}
		if _, err := r.Resend(context.Background(), connect.NewRequest(&distributionv1.ResendRequest{NodeId: "node-u1", Resend: rs})); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("Resend with token %q: %v, want Unauthenticated", token, err)
		}
	}
}
