package load

import (
	"math"
	"math/bits"
	"time"
)

// The histogram is log-linear, as HDR histograms are: values below 2·subCount
// nanoseconds have a bucket each, and every power of two above is split into
// subCount buckets, so a recorded value is known to within 1/subCount
// (0.8 %) at any magnitude.
const (
	subBits  = 7
	subCount = 1 << subBits
	// maxValue caps what is recorded (about 18 minutes); larger values
	// count as maxValue.
	maxValue = 1<<40 - 1
	nBuckets = (40 - subBits + 1) * subCount
)

// Histogram counts durations. The zero value is empty and ready to use. It
// is not safe for concurrent use: each load generator worker records into its
// own and the results are merged.
type Histogram struct {
	counts [nBuckets]uint64
	n      uint64
	sum    float64
	max    int64
}

func bucketOf(v int64) int {
	if v < 2*subCount {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - subBits - 1
	return (e+1)*subCount + int(v>>e) - subCount
}

// bucketMid is the value reported for bucket i: the middle of its range.
func bucketMid(i int) int64 {
	if i < 2*subCount {
		return int64(i)
	}
	e := i/subCount - 1
	low := int64(i%subCount+subCount) << e
	return low + (int64(1)<<e)/2
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	v = min(max(v, 0), maxValue)
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
	h.max = max(h.max, v)
}

// Merge adds every value recorded in o.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest recorded value.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the average of the recorded values.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the value below which a fraction q of the recorded values
// lie (0 ≤ q ≤ 1), to within the bucket precision. An empty histogram
// returns 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(bucketMid(i), h.max))
		}
	}
	return time.Duration(h.max)
}
