package fleet_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
)

var revocations = flag.Int("revocations", 0, "keys TestRevocationLatency revokes (0: 1,000, or 50 under the race detector)")

// TestRevocationLatency revokes keys one by one on a fleet of ten nodes
// while every node serves calls with the keys being revoked, and reports
// how long each revocation took from RevokeKey returning to the last node
// applying it (p50, p99, max). It fails if any call with a revoked key
// succeeded on a node that had already applied the revocation when the
// call arrived. It asserts no timing: the figures are for the report.
func TestRevocationLatency(t *testing.T) {
	n := *revocations
	if n == 0 {
		n = 1000
		if raceEnabled {
			n = 50
		}
	}
	const nodesN = 10
	cp, ks, nodes := keyFleet(t, nodesN)

	type key struct {
		id, raw string
	}
	keys := make([]key, n)
	for i := range keys {
		c := createKey(t, ks, fmt.Sprintf("app-%d", i))
		keys[i] = key{c.GetKey().GetKeyId(), c.GetRawKey()}
	}

	// Traffic: two callers per node, each calling with the key being
	// revoked now or one of its neighbours.
	type result struct {
		node, key int
		start     time.Time
		status    int
	}
	var (
		cursor  atomic.Int64
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		mu      sync.Mutex
		results []result
	)
	for ni, nd := range nodes {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
				defer client.CloseIdleConnections()
				var mine []result
				defer func() { mu.Lock(); results = append(results, mine...); mu.Unlock() }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					k := min(max(int(cursor.Load())+rand.IntN(5)-2, 0), n-1)
					req, _ := http.NewRequest("GET", nd.gw.URL()+"/v1/orders/o-1", nil)
					req.Host = "api.example.com"
					req.Header.Set("X-Api-Key", keys[k].raw)
					start := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						t.Errorf("node %d: %v", ni, err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					mine = append(mine, result{ni, k, start, resp.StatusCode})
				}
			}()
		}
	}

	called, returned := make([]time.Time, n), make([]time.Time, n)
	var last uint64
	began := time.Now()
	for i, k := range keys {
		cursor.Store(int64(i))
		called[i] = time.Now()
		resp, err := ks.keys.RevokeKey(context.Background(), connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: k.id, Reason: "latency test"}))
		if err != nil {
			t.Fatal(err)
		}
		returned[i] = time.Now()
		last = resp.Msg.GetVersion()
	}
	revoking := time.Since(began)
	waitLane(t, cp, nodesN, last)
	close(stop)
	wg.Wait()

	// applied[node][key] is when the node applied the key's revocation.
	applied := make([][]time.Time, nodesN)
	lat, fromCall := make([]time.Duration, n), make([]time.Duration, n)
	for ni, nd := range nodes {
		applied[ni] = make([]time.Time, n)
		for i, k := range keys {
			at, ok := nd.lane.revokedAt(k.id)
			if !ok {
				t.Fatalf("node %d never applied the revocation of key %d", ni, i)
			}
			applied[ni][i] = at
			lat[i] = max(lat[i], at.Sub(returned[i]))
			fromCall[i] = max(fromCall[i], at.Sub(called[i]))
		}
	}
	violations, after, calls := 0, 0, len(results)
	for _, r := range results {
		if !r.start.After(applied[r.node][r.key]) {
			continue
		}
		after++
		if r.status == 200 {
			violations++
			if violations <= 5 {
				t.Errorf("node %d served key %d %s after it applied its revocation", r.node, r.key, r.start.Sub(applied[r.node][r.key]))
			}
		}
	}
	if violations > 0 {
		t.Errorf("%d calls with a revoked key succeeded after their node applied the revocation", violations)
	}
	if after == 0 {
		t.Error("no call came after a revocation: the test measured nothing")
	}
	slices.Sort(lat)
	slices.Sort(fromCall)
	pct := func(d []time.Duration, p float64) time.Duration { return max(d[int(p*float64(n-1))], 0) }
	t.Logf("%d nodes, %d keys revoked one by one in %s (%s per RevokeKey); %d calls during it, %d after their node had applied the revocation, %d of those succeeded",
		nodesN, n, revoking.Round(time.Millisecond), (revoking / time.Duration(n)).Round(time.Microsecond), calls, after, violations)
	t.Logf("RevokeKey returned → last node applied: p50 %s, p99 %s, max %s (a negative time, the nodes applying before RevokeKey returned, counts as 0)",
		pct(lat, 0.50), pct(lat, 0.99), pct(lat, 1))
	t.Logf("RevokeKey called → last node applied: p50 %s, p99 %s, max %s", pct(fromCall, 0.50), pct(fromCall, 0.99), pct(fromCall, 1))
}
