//go:build race

package gateway_test

// raceEnabled: the race detector slows everything ~10x and makes sync.Pool
// drop items, so tests move less data and allow more allocation under it.
const raceEnabled = true
