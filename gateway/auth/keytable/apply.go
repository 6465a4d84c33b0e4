package keytable

import (
	"bytes"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Change is one key's new record at revision Rev.
type Change struct {
	Record *configv1.KeyRecord
	// Rev is the revision of the record in the key service; a higher one
	// is newer.
	Rev uint64
}

// Apply returns a table holding t's keys with changes applied in order. A
// change adds its record's key, or replaces the key with the same sha256,
// unless the table already holds that key (from t, or from an earlier
// change of the call) at revision Rev or higher: then the change is
// skipped. A key is not removed; a revocation is a record with status
// revoked.
//
// Apply checks every record as Build does and, if any is unfit, returns a
// *BuildError whose problems give positions in changes, and applies none.
// A record may repeat the key id of an earlier change only with the same
// sha256, and may use a key id of a key in t's overlay only with that key's
// sha256 (a DuplicateKeyID problem with Other -1). Key ids of keys in t's
// base are not checked, for that would cost time in proportion to the
// table: keeping a key id to one key is the key service's job.
//
// Apply leaves t as it is, for readers may be using it; t and the table
// returned share t's base. It takes time in proportion to t.OverlayLen() +
// len(changes), not to t.Len(). If no change wins, Apply returns t itself.
// A nil t is an empty table. Apply keeps no reference to changes.
func (t *Table) Apply(changes []Change) (*Table, error) {
	if len(changes) == 0 {
		return t, nil
	}
	if t == nil {
		t = &Table{}
	}
	records := make([]*configv1.KeyRecord, len(changes))
	for i, c := range changes {
		records[i] = c.Record
	}
	// The overlay does not intern its strings: it is small, and keeping
	// one's own strings lets an entry move to the next overlay without
	// hashing them. Compact accounts for the copies it brings the base.
	b := builder{
		records:   records,
		ids:       make(map[string]int32, len(changes)),
		revisions: true,
	}
	entries := make([]entry, len(changes))
	for i, r := range records {
		entries[i] = b.entry(i, r)
		entries[i].rev = changes[i].Rev
	}
	b.checkHeld(&t.over)
	if len(b.problems) > 0 {
		return nil, b.err()
	}

	// The changes that win, at most one per key, and which of t's
	// overlay they replace.
	var (
		won      = make([]slot, 0, len(changes)+len(t.over.slots))
		wonAt    = make(map[[32]byte]int, len(changes))
		replaced = make([]bool, len(t.over.slots))
		n        = t.n
	)
	for i, c := range changes {
		h := [32]byte(c.Record.GetSha256())
		if w, ok := wonAt[h]; ok {
			if won[w].e.rev < c.Rev {
				won[w].e = entries[i]
			}
			continue
		}
		if j := t.over.index(&h); j >= 0 {
			if t.over.slots[j].e.rev >= c.Rev {
				continue
			}
			replaced[j] = true
		} else if j := t.base.index(&h); j >= 0 {
			if t.base.slots[j].e.rev >= c.Rev {
				continue
			}
		} else {
			n++
		}
		wonAt[h] = len(won)
		won = append(won, slot{hash: h, e: entries[i]})
	}
	if len(won) == 0 {
		return t, nil
	}

	// The new overlay: t's, but for the keys replaced, and the winners.
	// Its arena is built afresh, so that the strings of replaced keys do
	// not outlive the call, nor those of the changes that lost beyond the
	// next.
	keys := won // with room for the rest
	from := split{a: t.over.arena}
	b.arena.Grow(len(from.a)) // about what the entries kept need
	for i := range t.over.slots {
		if !replaced[i] {
			s := &t.over.slots[i]
			keys = append(keys, slot{hash: s.hash, e: b.reuse(&s.e, from)})
		}
	}
	over := b.layout(len(keys),
		func(i int) []byte { return keys[i].hash[:] },
		func(i int) entry { return keys[i].e })
	// Compact will join the arenas of base and overlay: they must fit.
	if err := b.finish(&over, len(changes)-1, uint64(len(t.base.arena))); err != nil {
		return nil, err
	}
	return &Table{base: t.base, over: over, n: n, waste: t.waste}, nil
}

// checkHeld reports the records that use a key id that l holds for another
// hash. It takes time in proportion to l and to the records, but hashes only
// the key ids of l, to look them up in the small map of the records' ids.
func (b *builder) checkHeld(l *layer) {
	var held map[string]bool // key ids of records that l holds for another hash
	for i := range l.slots {
		s := &l.slots[i]
		id := l.str(&s.e, fKeyID)
		first, ok := b.ids[id]
		if !ok {
			continue
		}
		// A hash that is not 32 bytes long is reported already.
		if h := b.records[first].GetSha256(); len(h) == 32 && !bytes.Equal(h, s.hash[:]) {
			if held == nil {
				held = make(map[string]bool)
			}
			held[id] = true
		}
	}
	for i, r := range b.records {
		// Only the records with the hash of the first record with their
		// key id: the others are reported already.
		if id := r.GetKeyId(); held[id] && bytes.Equal(r.GetSha256(), b.records[b.ids[id]].GetSha256()) {
			b.problem(DuplicateKeyID, i, id, -1, "key_id already used by another key of the table")
		}
	}
}
