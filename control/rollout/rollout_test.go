package rollout_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-gw/portico/control/rollout"
	"github.com/portico-gw/portico/gateway/routestats"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

func TestStageNodes(t *testing.T) {
	t.Parallel()
	var fleet []rollout.Node
	for _, id := range []string{"eu-1", "eu-2", "eu-3", "eu-4", "eu-5", "us-1", "us-2", "us-3", "us-4", "us-5", "us-6", "us-7"} {
		fleet = append(fleet, rollout.Node{ID: id, Region: id[:2]})
	}
	for i, want := range [][]string{
		{"eu-1", "eu-2", "us-1", "us-2"},                         // two per region, first by id
		{"eu-1", "eu-2", "us-1", "us-2"},                         // 10 % of 12 is 2: the canaries already
		{"eu-1", "eu-2", "us-1", "us-2", "eu-3", "eu-4", "eu-5"}, // the canaries' first region
		{"eu-1", "eu-2", "us-1", "us-2", "eu-3", "eu-4", "eu-5", "us-3", "us-4", "us-5", "us-6", "us-7"},
	} {
		if got := rollout.StageNodes(i, fleet); !reflect.DeepEqual(got, want) {
			t.Errorf("StageNodes(%s) = %v, want %v", rollout.Stages[i], got, want)
		}
	}
	// A region with labelled canaries takes only those.
	fleet[3].Canary = true // eu-4
	if got, want := rollout.StageNodes(0, fleet), []string{"eu-4", "us-1", "us-2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("StageNodes(canary) with eu-4 labelled = %v, want %v", got, want)
	}
	if got := rollout.StageNodes(3, nil); len(got) != 0 {
		t.Errorf("StageNodes of no fleet = %v", got)
	}
}

// counts is n calls, failed of them failing, each taking d.
func counts(n, failed uint64, d time.Duration) routestats.Counts {
	var r routestats.Route
	for i := uint64(0); i < n; i++ {
		r.Observe(i < failed, d)
	}
	return r.Counts()
}

func judge() *rollout.Judge {
	return &rollout.Judge{
		Criteria: rollout.Criteria{MinRequests: 20, MaxErrorRateIncrease: 0.05, MaxLatencyRatio: 2, MinLatencyIncrease: 50 * time.Millisecond},
		Changed:  rollout.Matcher{All: true}, Next: 2, Previous: 1,
	}
}

func obs(onNew bool, routes map[string]routestats.Counts) rollout.Observation {
	return rollout.Observation{After: routes, OnNew: onNew}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		name          string
		stage         int
		nodes         []rollout.Observation
		evidence, few string
	}{
		{"as good", 0, []rollout.Observation{
			obs(true, map[string]routestats.Counts{"r": counts(100, 1, 5*ms)}),
			obs(false, map[string]routestats.Counts{"r": counts(100, 1, 5*ms)})}, "", ""},
		{"failing", 0, []rollout.Observation{
			obs(true, map[string]routestats.Counts{"r": counts(100, 30, 5*ms)}),
			obs(false, map[string]routestats.Counts{"r": counts(100, 1, 5*ms)})}, "route r failed 30 of 100 calls", ""},
		{"slow", 0, []rollout.Observation{
			obs(true, map[string]routestats.Counts{"r": counts(100, 0, 300*ms)}),
			obs(false, map[string]routestats.Counts{"r": counts(100, 0, 5*ms)})}, "route r p99", ""},
		{"too few on the new version", 0, []rollout.Observation{
			obs(true, map[string]routestats.Counts{"r": counts(5, 5, 5*ms)}),
			obs(false, map[string]routestats.Counts{"r": counts(100, 0, 5*ms)})}, "", "r"},
		{"a new route at the canaries, against none failing", 0, []rollout.Observation{
			obs(true, map[string]routestats.Counts{"new": counts(50, 10, 5*ms)})}, "route new failed 10 of 50", ""},
		{"a route with no old calls after the canaries, against none failing", 1, []rollout.Observation{
			obs(true, map[string]routestats.Counts{"new": counts(50, 10, 5*ms)})}, "route new failed 10 of 50", ""},
		{"a route the change removes", 0, []rollout.Observation{
			obs(true, map[string]routestats.Counts{"kept": counts(50, 0, 5*ms)}),
			obs(false, map[string]routestats.Counts{"kept": counts(50, 0, 5*ms), "gone": counts(50, 0, 5*ms)})}, "", ""},
	} {
		ev, few := judge().Stage(tc.stage, tc.nodes)
		if tc.evidence == "" && ev != "" || tc.evidence != "" && !strings.Contains(ev, tc.evidence) || few != tc.few {
			t.Errorf("%s: evidence %q, too few %q; want %q, %q", tc.name, ev, few, tc.evidence, tc.few)
		}
	}

	// The old version's rate carries to later stages, where too few
	// nodes are left on it; counters that went down (a restart) count
	// whole.
	j := judge()
	if ev, _ := j.Stage(0, []rollout.Observation{
		obs(true, map[string]routestats.Counts{"r": counts(100, 0, 5*ms)}),
		obs(false, map[string]routestats.Counts{"r": counts(100, 0, 5*ms)})}); ev != "" {
		t.Fatalf("a good canary stage: %s", ev)
	}
	restarted := rollout.Observation{Before: map[string]routestats.Counts{"r": counts(500, 0, 5*ms)}, After: map[string]routestats.Counts{"r": counts(40, 20, 5*ms)}, OnNew: true}
	if ev, _ := j.Stage(3, []rollout.Observation{restarted}); !strings.Contains(ev, "failed 20 of 40") {
		t.Errorf("a later stage after a restart, judged on the carried rate: %q", ev)
	}

	// Only the changed routes count.
	j = judge()
	j.Changed = rollout.Matcher{}
	if ev, _ := j.Stage(0, []rollout.Observation{obs(true, map[string]routestats.Counts{"r": counts(100, 100, 5*ms)})}); ev != "" {
		t.Errorf("an unchanged route judged: %s", ev)
	}
}

func TestChangedRoutes(t *testing.T) {
	t.Parallel()
	cluster := func(addr string) *configv1.Cluster {
		return &configv1.Cluster{Name: "c", Endpoints: []*configv1.Endpoint{{Address: addr}}}
	}
	route := func(id, path string) *configv1.Route { return &configv1.Route{Id: id, Path: path, Cluster: "c"} }
	enc := func(s *configv1.Snapshot) []byte {
		b, err := proto.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	prev := enc(&configv1.Snapshot{Clusters: []*configv1.Cluster{cluster("a:1"), {Name: "d"}}, Routes: []*configv1.Route{route("same", "/s"), route("edited", "/e")},
		Services: []*configv1.Service{{Id: "svc", Cluster: "d"}}})
	next := enc(&configv1.Snapshot{Clusters: []*configv1.Cluster{cluster("a:1"), {Name: "d", Protocol: configv1.Protocol_PROTOCOL_GRPC}},
		Routes:   []*configv1.Route{route("same", "/s"), route("edited", "/e2"), route("added", "/a")},
		Services: []*configv1.Service{{Id: "svc", Cluster: "d"}}})
	m, err := rollout.ChangedRoutes(prev, next)
	if err != nil {
		t.Fatal(err)
	}
	for route, want := range map[string]bool{"same": false, "edited": true, "added": true, "svc.Get": true, "other.Get": false,
		"svc.list": false, "svc.": false} {
		if m.Match(route) != want {
			t.Errorf("Match(%q) = %v, want %v", route, !want, want)
		}
	}
	if m, err := rollout.ChangedRoutes([]byte("\xff"), next); err == nil || !m.Match("anything") {
		t.Errorf("ChangedRoutes of undecodable bytes: %v, matches all %v", err, m.All)
	}
}

// TestStageEvidence: Stage keeps what it read of each changed route, on
// the new version and on the old, for rollout status.
func TestStageEvidence(t *testing.T) {
	t.Parallel()
	j := rollout.Judge{Criteria: rollout.Criteria{MinRequests: 10, MaxErrorRateIncrease: 0.05, MaxLatencyRatio: 2, MinLatencyIncrease: 50 * time.Millisecond},
		Changed: rollout.Matcher{All: true}}
	j.Stage(0, []rollout.Observation{
		{OnNew: true, After: map[string]routestats.Counts{"r": {Requests: 40, Errors: 1}}},
		{OnNew: false, After: map[string]routestats.Counts{"r": {Requests: 30}}},
	})
	if len(j.Evidence) != 1 || j.Evidence[0].Route != "r" || j.Evidence[0].New.Requests != 40 || j.Evidence[0].New.Errors != 1 || j.Evidence[0].Old.Requests != 30 {
		t.Errorf("Evidence = %+v, want r: 40 calls and 1 failure new, 30 calls old", j.Evidence)
	}
}

// TestJudgeProbes: a changed route with too few real calls is judged on
// the synthetic probes the nodes sent, and one with neither is not
// judged at all: the stage has no evidence for it.
func TestJudgeProbes(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	type m = map[string]routestats.Counts
	probed := func(onNew bool, calls, probes m) rollout.Observation {
		return rollout.Observation{After: calls, ProbesAfter: probes, OnNew: onNew}
	}
	for _, tc := range []struct {
		name               string
		stage              int
		nodes              []rollout.Observation
		evidence, unjudged string
	}{
		{"a new route, no calls, failing probes", 0, []rollout.Observation{
			probed(true, m{"r": {}}, m{"r": counts(3, 3, ms)})},
			"route r failed 3 of 3 synthetic probes (100.0%) on version 2, none probed on version 1", ""},
		{"a new route, no calls, passing probes", 0, []rollout.Observation{
			probed(true, m{"r": {}}, m{"r": counts(3, 0, ms)})}, "", ""},
		{"a few calls and failing probes", 0, []rollout.Observation{
			probed(true, m{"r": counts(5, 0, ms)}, m{"r": counts(4, 4, ms)}),
			probed(false, m{"r": counts(100, 0, ms)}, m{"r": counts(4, 0, ms)})},
			"route r failed 4 of 4 synthetic probes and 0 of 5 calls (44.4%) on version 2, 0 of 4 probes (0.0%) on version 1", ""},
		{"a few failing calls and passing probes", 0, []rollout.Observation{
			probed(true, m{"r": counts(15, 15, ms)}, m{"r": counts(10, 0, ms)})},
			"route r failed 0 of 10 synthetic probes and 15 of 15 calls (60.0%) on version 2, none probed on version 1", ""},
		{"one failed probe", 0, []rollout.Observation{
			probed(true, m{"r": {}}, m{"r": counts(3, 1, ms)})}, "", ""},
		{"probes failing on both versions", 0, []rollout.Observation{
			probed(true, m{"r": {}}, m{"r": counts(5, 5, ms)}),
			probed(false, m{"r": {}}, m{"r": counts(5, 5, ms)})}, "", ""},
		{"enough real calls outweigh probes", 0, []rollout.Observation{
			probed(true, m{"r": counts(50, 0, ms)}, m{"r": counts(5, 5, ms)})}, "", ""},
		{"too few probes", 0, []rollout.Observation{
			probed(true, m{"r": counts(2, 2, ms)}, m{"r": counts(2, 2, ms)})}, "", "r"},
		{"no calls and no probes", 2, []rollout.Observation{
			probed(true, m{"a": {}, "b": counts(1, 0, ms)}, nil),
			probed(false, m{"a": counts(500, 0, ms)}, nil)}, "", "a,b"},
		{"probes of the old version alone", 0, []rollout.Observation{
			probed(true, m{"r": {}}, nil),
			probed(false, m{"r": {}}, m{"r": counts(9, 0, ms)})}, "", "r"},
		{"slow probes", 0, []rollout.Observation{
			probed(true, m{"r": {}}, m{"r": counts(5, 0, 300*ms)}),
			probed(false, m{"r": {}}, m{"r": counts(5, 0, ms)})},
			"route r synthetic probes took 512ms (median) on version 2, 1ms on version 1", ""},
		{"one slow probe among fast ones", 0, []rollout.Observation{
			probed(true, m{"r": {}}, m{"r": counts(4, 0, ms).Add(counts(1, 0, 300*ms))}),
			probed(false, m{"r": {}}, m{"r": counts(5, 0, ms)})}, "", ""},
	} {
		j := judge()
		ev, unjudged := j.Stage(tc.stage, tc.nodes)
		if ev != tc.evidence || unjudged != tc.unjudged {
			t.Errorf("%s: Stage = %q, unjudged %q; want %q, %q", tc.name, ev, unjudged, tc.evidence, tc.unjudged)
		}
		if tc.evidence != "" && j.Failed != "r" {
			t.Errorf("%s: Failed = %q, want r", tc.name, j.Failed)
		}
	}

	// A regression in real calls is the evidence, before one in another
	// route's probes, whatever their order.
	j0 := judge()
	ev, _ := j0.Stage(0, []rollout.Observation{
		probed(true, m{"a": {}, "b": counts(50, 50, ms)}, m{"a": counts(5, 5, ms)}),
		probed(false, m{"a": {}, "b": counts(50, 0, ms)}, nil)})
	if j0.Failed != "b" || !strings.Contains(ev, "route b failed 50 of 50 calls") {
		t.Errorf("a failing route in calls and another in probes: Failed %q, evidence %q; want b's calls", j0.Failed, ev)
	}

	// The old version's probe rate carries to a later stage with no
	// node left on it; probe counters are differences over the bake.
	j := judge()
	if ev, _ := j.Stage(0, []rollout.Observation{
		probed(true, m{"r": {}}, m{"r": counts(10, 5, ms)}),
		probed(false, m{"r": {}}, m{"r": counts(10, 5, ms)})}); ev != "" {
		t.Fatalf("a canary stage failing as much as the old version: %s", ev)
	}
	later := rollout.Observation{After: m{"r": {}}, ProbesBefore: m{"r": counts(10, 0, ms)}, ProbesAfter: m{"r": counts(20, 5, ms)}, OnNew: true}
	if ev, _ := j.Stage(3, []rollout.Observation{later}); ev != "" {
		t.Errorf("5 of 10 probes failing against a carried 50%%: %s", ev)
	}
	if len(j.Evidence) != 1 || j.Evidence[0].NewProbes.Requests != 10 || j.Evidence[0].NewProbes.Errors != 5 {
		t.Errorf("Evidence = %+v, want 10 probes, 5 failed, on the new version", j.Evidence)
	}
	worse := rollout.Observation{After: m{"r": {}}, ProbesBefore: m{"r": counts(20, 5, ms)}, ProbesAfter: m{"r": counts(30, 15, ms)}, OnNew: true}
	if ev, _ := j.Stage(3, []rollout.Observation{worse}); !strings.Contains(ev, "failed 10 of 10 synthetic probes") || !strings.Contains(ev, "50.0% of probes on version 1 earlier") {
		t.Errorf("10 of 10 probes failing against a carried 50%%: %q", ev)
	}
}
