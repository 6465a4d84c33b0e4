package router

import (
	"reflect"
	"testing"

	"github.com/portico-gw/portico/testing/gclayout"
)

// TestCoreIsFlat keeps the compiled table out of the garbage collector's way: apart
// from the host maps, the regexps and the one string, nothing in a core may hold a
// pointer, so that its slices are allocated as noscan however many routes there are.
func TestCoreIsFlat(t *testing.T) {
	t.Parallel()
	mayPoint := map[string]bool{"exact": true, "wild": true, "regexps": true, "strs": true}
	ct := reflect.TypeFor[core]()
	for i := range ct.NumField() {
		f := ct.Field(i)
		if mayPoint[f.Name] {
			continue
		}
		what, ft := "field", f.Type
		if ft.Kind() == reflect.Slice {
			what, ft = "element of field", ft.Elem()
		}
		if gclayout.HasPointers(ft) {
			t.Errorf("core: %s %s (%v) holds pointers", what, f.Name, ft)
		}
	}
}

// TestHashKeyAvalanche checks that flipping any bit of a key, or of its parent
// node's index, flips each bit of the hash about half of the time, so that keys
// that differ little, such as "svc001" and "svc002", still spread over the table.
func TestHashKeyAvalanche(t *testing.T) {
	t.Parallel()
	var flips [64]int
	trials := 0
	count := func(a, b uint64) {
		trials++
		for i := range flips {
			flips[i] += int((a ^ b) >> i & 1)
		}
	}
	for n := 0; n <= 40; n++ {
		key := make([]byte, n)
		for i := range key {
			key[i] = "svc0123456789/.-_abcdefgh"[(i*7+n)%25]
		}
		const parent = 12345
		h := hashKey(0, parent, string(key), prefix(string(key)))
		for i := range key {
			for bit := range 8 {
				key[i] ^= 1 << bit
				count(h, hashKey(0, parent, string(key), prefix(string(key))))
				key[i] ^= 1 << bit
			}
		}
		for bit := range 31 {
			count(h, hashKey(0, parent^1<<bit, string(key), prefix(string(key))))
		}
	}
	for i, f := range flips {
		if p := float64(f) / float64(trials); p < 0.4 || p > 0.6 {
			t.Errorf("hashKey: bit %d flips in %.0f%% of %d one-bit changes, want about half", i, 100*p, trials)
		}
	}
}

// TestStdMethod checks that stdMethod finds every method of stdMethods at its
// index, and no other.
func TestStdMethod(t *testing.T) {
	t.Parallel()
	for i, m := range stdMethods {
		if got := stdMethod(m); got != i {
			t.Errorf("stdMethod(%q) = %d, want %d", m, got, i)
		}
	}
	if stdMethods[methodGET] != "GET" {
		t.Errorf("stdMethods[methodGET] = %q, want GET", stdMethods[methodGET])
	}
	for _, m := range []string{"", "get", "GETX", "GE", "PURGE", "PROPFIND"} {
		if got := stdMethod(m); got != -1 {
			t.Errorf("stdMethod(%q) = %d, want -1", m, got)
		}
	}
}
