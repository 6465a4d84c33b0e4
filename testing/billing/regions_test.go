package billing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/portico-gw/portico/quota"
	"github.com/portico-gw/portico/quota/store"
	"github.com/portico-gw/portico/testing/gatewaytest"
	"github.com/portico-gw/portico/testing/kafkatest"
)

// TestTwoRegions: two regions, eu and us, each with its own Kafka, a node
// shipping to it and a quota consumer of it, both consumers on the one
// (global) store. Region us's Kafka is away for a while under traffic:
// its node's spool grows, and once the broker is back the totals
// converge on exactly what the clients of both regions saw, per key and
// product. The eu service publishes the store's usage marks for both
// regions' nodes (one publisher per store: the marks are the store's).
//
// Wall time: about 10 s (200 ms windows, Kafka away 2 s).
func TestTwoRegions(t *testing.T) {
	const window = 200 * time.Millisecond
	const down = 2 * time.Second
	ctx := context.Background()
	clk := clock{}
	kafkas := map[string]*kafkatest.Cluster{"eu": kafkatest.Start(t, 2, topic), "us": kafkatest.Start(t, 2, topic)}
	cp := startControl(t, clk)
	keys := newKeys(t)
	version, lane := configure(t, cp, keys)
	st, err := store.Open(ctx, pgDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	qs := map[string]*quotaService{
		"eu": startQuota(t, quota.Options{Store: st, Brokers: kafkas["eu"].Addrs(), Topic: topic, Group: "quota-eu",
			ControlURL: cp.url, ControlToken: publisherToken, HTTPClient: gatewaytest.H2CClient(t)}),
		"us": startQuota(t, quota.Options{Store: st, Brokers: kafkas["us"].Addrs(), Topic: topic, Group: "quota-us"}),
	}
	dir := t.TempDir()
	nodes := map[string]*localNode{}
	for _, region := range []string{"eu", "us"} {
		id := region + "-1"
		nodes[region] = startLocal(t, nodeConfig{ID: id, Region: region, Dir: dir + "/" + id, ControlURL: cp.url,
			Brokers: kafkas[region].Addrs(), Topic: topic, Window: window})
	}
	waitNodes(t, cp, version, lane, time.Time{}, "eu-1", "us-1")

	c := newClients(t, keys)
	tr := startTraffic(t, c, nodes["eu"], nodes["us"])
	eventually(t, time.Minute, "traffic in both regions", func() bool { return tr.rounds("eu-1") >= 5 && tr.rounds("us-1") >= 5 })
	kafkas["us"].SetDown(true)
	downAt := time.Now()
	var peak uint64
	eventually(t, down+time.Minute, "region us's Kafka away a while, its node's spool growing", func() bool {
		peak = max(peak, nodes["us"].stats(t).Ship.Pending)
		return time.Since(downAt) >= down && peak >= 5
	})
	kafkas["us"].SetDown(false)
	rounds := tr.rounds("us-1")
	eventually(t, time.Minute, "traffic in region us after its Kafka's return", func() bool { return tr.rounds("us-1") >= rounds+5 })
	tr.stop()
	if n := c.failed(); n > 0 {
		t.Fatalf("%d calls were not answered as expected", n)
	}
	seen := c.seen("")

	// Converged: the store's totals, over every period the calls fell in,
	// equal the clients' counts, and each region's spool is all in.
	periods := []string{periodOf(downAt.Add(-time.Hour)), periodOf(time.Now())}
	if periods[0] == periods[1] {
		periods = periods[1:]
	}
	spools := map[string]string{}
	for _, ns := range cp.Distribution.Status().Nodes {
		spools[ns.ID] = ns.Usage.GetSpoolId()
	}
	eventuallyWhy(t, time.Minute, "the totals to converge on the clients' counts", func() (bool, string) {
		got := map[tk]tally{}
		for _, p := range periods {
			for id, tot := range totals(t, st, p) {
				g := got[id]
				g.add(tally{Counted: tot.Counts.Counted, Billable: tot.Counts.Billable, ByClass: tot.Counts.ByClass})
				got[id] = g
			}
		}
		for _, k := range keys {
			for _, product := range []string{"pa", "pb"} {
				id := tk{k.id, product}
				if got[id] != seen[id] {
					return false, fmt.Sprintf("%s %s: the store counts %s; the clients saw %s", k.id, product, fmtTally(got[id]), fmtTally(seen[id]))
				}
			}
		}
		seqs := contiguous(t, st)
		for region, n := range nodes {
			s := seqs[n.id()+"/"+spools[n.id()]]
			if last := n.stats(t).Usage.LastSeq; s.Contiguous < last || s.Region != region {
				return false, fmt.Sprintf("node %s: spool at %d, the store %+v", n.id(), last, s)
			}
		}
		return true, ""
	})
	for _, region := range []string{"eu", "us"} {
		s := qs[region].Stats()
		t.Logf("region %s: the clients saw %s; its consumer applied %d windows (%d duplicates); %d connections cut",
			region, fmtTally(sumOf(c.seen(region+"-1"))), s.Applied, s.Duplicates, kafkas[region].Cuts())
	}
	if kafkas["us"].Cuts() == 0 {
		t.Error("region us's Kafka cut no connection")
	}
	t.Logf("region us's Kafka away %v: its node's spool grew to %d windows waiting; totals exact after: %s", down, peak, fmtTally(sumOf(seen)))
}
