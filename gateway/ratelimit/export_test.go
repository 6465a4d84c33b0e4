package ratelimit

// Sweep runs one eviction sweep at the Table's current time and returns
// the number of buckets evicted, for tests that drive the clock by hand.
func Sweep(t *Table) int {
	return t.sweep(t.nanos())
}
