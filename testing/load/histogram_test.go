package load

import (
	"testing"
	"time"
)

func TestHistogramQuantile(t *testing.T) {
	t.Parallel()
	var h Histogram
	for i := 1; i <= 100000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 50 * time.Millisecond},
		{0.99, 99 * time.Millisecond},
		{0.999, 99900 * time.Microsecond},
		{1, 100 * time.Millisecond},
	} {
		got := h.Quantile(tc.q)
		if diff := float64(got-tc.want) / float64(tc.want); diff < -0.01 || diff > 0.01 {
			t.Errorf("Quantile(%v) = %v, want %v ± 1%%", tc.q, got, tc.want)
		}
	}
	var small Histogram
	small.Record(3)
	small.Record(200)
	if got := small.Quantile(0.5); got != 3 {
		t.Errorf("Quantile(0.5) of {3ns, 200ns} = %v, want 3ns", got)
	}
	var merged Histogram
	merged.Merge(&h)
	merged.Merge(&small)
	if merged.Count() != 100002 || merged.Max() != 100*time.Millisecond {
		t.Errorf("Merge: count %d, max %v; want 100002, 100ms", merged.Count(), merged.Max())
	}
}

func TestBucketsCoverRange(t *testing.T) {
	t.Parallel()
	for _, v := range []int64{0, 1, 255, 256, 257, 511, 512, 1 << 20, 1<<20 + 12345, maxValue} {
		i := bucketOf(v)
		if i < 0 || i >= nBuckets {
			t.Fatalf("bucketOf(%d) = %d, outside [0, %d)", v, i, nBuckets)
		}
		mid := bucketMid(i)
		if err := float64(mid-v) / float64(max(v, 1)); err < -1.0/subCount || err > 1.0/subCount {
			t.Errorf("bucketMid(bucketOf(%d)) = %d, more than 1/%d off", v, mid, subCount)
		}
	}
}
