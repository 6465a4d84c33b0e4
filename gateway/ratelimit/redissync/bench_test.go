package redissync_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-gw/portico/gateway/ratelimit/redissync"
	"github.com/portico-gw/portico/testing/redistest"
)

// BenchmarkSync measures one node's sync of n active buckets against a
// local Redis: the cost in the gateway (allocs) and the round trip, most
// of which is the script's time in Redis (reported as redis-µs/key).
func BenchmarkSync(b *testing.B) {
	srv := redistest.Start(b)
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("single/keys=%d", n), func(b *testing.B) {
			benchmarkSync(b, srv.Client(b), n)
		})
	}
	cluster := redistest.StartCluster(b, 3)
	b.Run("cluster/keys=10000", func(b *testing.B) {
		benchmarkSync(b, cluster.Client(b), 10000)
	})
}

func benchmarkSync(b *testing.B, client redis.UniversalClient, n int) {
	s := redissync.New(client, redissync.Options{Node: "bench", Timeout: 10 * time.Second, Prefix: "bench:" + b.Name() + ":"})
	reports := make([]redissync.Report, n)
	for i := range reports {
		reports[i] = redissync.Report{Key: "plan/gold/default\x00app-" + strconv.Itoa(i), Rate: 1000, Burst: 2000, Admitted: 40, Demand: 45}
	}
	ctx := context.Background()
	if _, err := s.Sync(ctx, reports); err != nil {
		b.Fatal(err)
	}
	single, _ := client.(*redis.Client)
	if single != nil {
		single.ConfigResetStat(ctx)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Sync(ctx, reports); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if single != nil {
		if usec, ok := evalUsec(ctx, single); ok {
			b.ReportMetric(usec/float64(b.N*n), "redis-µs/key")
		}
	}
}

// evalUsec returns the server time spent in EVALSHA since the last CONFIG
// RESETSTAT, from INFO commandstats.
func evalUsec(ctx context.Context, c *redis.Client) (float64, bool) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "usec="); ok {
				f, err := strconv.ParseFloat(v, 64)
				return f, err == nil
			}
		}
	}
	return 0, false
}
