package keytable

import (
	"bytes"
	"encoding/binary"
	"math"
)

// OverlayLen returns the number of keys in t's overlay: the keys changed by
// Apply since the last Build or Compact.
func (t *Table) OverlayLen() int {
	if t == nil {
		return 0
	}
	return len(t.over.slots)
}

// minCompact is the overlay size up to which ShouldCompact never asks for a
// compaction.
const minCompact = 4096

// ShouldCompact reports whether t's overlay has grown enough that t should
// be compacted: when it holds more than max(4096, √Len()) keys.
//
// Apply costs about 0.3 µs per key of the overlay, and Compact about 0.1 µs
// per key of the table (BenchmarkApply, BenchmarkCompact). Compacting at an
// overlay of o keys, a change costs 0.15·o µs of Apply on average, as the
// overlay grows from 0 to o, plus 0.1·n/o µs as its share of a compaction:
// least near o = 0.8·√n, and hardly more at √n. Up to 16 M keys, though,
// the floor of 4096 rules. For a million keys a change then costs about
// 0.6 ms on average (1.2 ms just before a compaction) rather than the
// 0.25 ms possible at o = 800; but a compaction allocates a new base as large
// as the table, 120 MB, whose collection and page faults cost the gateway's
// core more than the CPU time, and it now comes five times less often:
// every 4096 changes, about every 20 minutes at a few changes a second. An
// overlay of 4096 keys takes about 1 MB.
func (t *Table) ShouldCompact() bool {
	return t.OverlayLen() > compactAt(t.Len())
}

// compactAt returns the overlay size beyond which a table of n keys should
// be compacted.
func compactAt(n int) int {
	return max(minCompact, int(math.Sqrt(float64(n))))
}

// Compact returns a table with t's keys, all in its base: the overlay is
// merged into a copy of the base in time in proportion to Len, without the
// checks and the hashing of strings that Build does. Lookup on the result
// returns what it returns on t, for every hash.
//
// Compact leaves t as it is, for readers may be using it, and may run on
// any goroutine. It takes about as much memory again as t's base. If t's
// overlay is empty, Compact returns t itself.
//
// The strings of the keys that the overlay replaces stay in the new base's
// arena, as do the overlay's copies of strings the base holds already; when
// they would make up more than half the arena, Compact rebuilds it, which
// takes about as long as half a Build. With an overlay of 4096 keys and a
// million keys whose arena takes 28 MB, that is about one compaction in
// thirty.
func (t *Table) Compact() *Table {
	if t == nil || len(t.over.slots) == 0 {
		return t
	}
	base := t.base.slots
	// The overlay's strings follow the base's in the new arena.
	from := split{a: t.base.arena, b: t.over.arena}
	moved := uint32(len(from.a))
	// Every string the overlay brings counts as waste, but for its key
	// ids, which are unique, and which the base keys they replace lose.
	waste := t.waste + len(from.b)
	slots := make([]slot, 0, t.n)
	// Both layers are sorted by hash: copy the base keys up to each
	// overlay key, then the overlay key in place of any base key with its
	// hash.
	next := 0 // the first base key not yet copied
	for _, s := range t.over.slots {
		p := t.base.search(&s.hash)
		slots = append(slots, base[next:p]...)
		next = p
		if p < len(base) && base[p].hash == s.hash {
			waste += int(base[p].e.n[fKeyID])
			next++
		}
		waste -= int(s.e.n[fKeyID])
		for f := range s.e.off {
			s.e.off[f] += moved
		}
		slots = append(slots, s)
	}
	slots = append(slots, base[next:]...)

	var arena string
	if 2*waste > len(from.a)+len(from.b) {
		arena, waste = rebuild(slots, from, len(from.a)+len(from.b)-waste), 0
	} else {
		arena = from.a + from.b
	}
	shift, starts := buckets(len(slots))
	for i := range slots {
		starts[binary.BigEndian.Uint64(slots[i].hash[:8])>>shift+1]++
	}
	for i := 1; i < len(starts); i++ {
		starts[i] += starts[i-1]
	}
	return &Table{
		base:  layer{slots: slots, starts: starts, shift: shift, arena: arena},
		n:     len(slots),
		waste: waste,
	}
}

// rebuild makes a new arena for slots, whose strings are in from, and points
// their entries into it. size is about the size it will have.
func rebuild(slots []slot, from split, size int) string {
	b := builder{strs: make(map[string]uint32)}
	b.arena.Grow(size)
	for i := range slots {
		slots[i].e = b.reuse(&slots[i].e, from)
	}
	return b.arenaString()
}

// search returns the position in l.slots of the first key whose hash is not
// less than hash: the key with that hash, if l holds it, or where it would
// go.
func (l *layer) search(hash *[32]byte) int {
	if len(l.slots) == 0 {
		return 0
	}
	b := binary.BigEndian.Uint64(hash[:8]) >> l.shift
	i, end := l.starts[b], l.starts[b+1]
	for i < end && bytes.Compare(l.slots[i].hash[:], hash[:]) < 0 {
		i++
	}
	return int(i)
}
