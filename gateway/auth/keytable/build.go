package keytable

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Build returns a table of records. It checks every record and, if any is
// unfit, returns a *BuildError listing every problem rather than a table:
// nil records, sha256 values that are not 32 bytes, missing or duplicate key
// ids, duplicate hashes (naming both keys), statuses other than active or
// revoked, unknown priorities, invalid not_after timestamps, and ids, plans
// or scopes that could not be sent in an identity header. Every key of the
// table has revision 0.
//
// Build keeps no reference to records. It runs off the request path; for a
// million keys it takes about a second.
func Build(records []*configv1.KeyRecord) (*Table, error) {
	b := builder{
		records: records,
		ids:     make(map[string]int32, len(records)),
		strs:    make(map[string]uint32),
	}
	l := b.layout(len(records),
		func(i int) []byte { return records[i].GetSha256() },
		func(i int) entry { return b.entry(i, records[i]) })
	if err := b.finish(&l, len(records)-1, 0); err != nil {
		return nil, err
	}
	return &Table{base: l, n: len(l.slots)}, nil
}

// maxStr is the longest string an entry can refer to.
const maxStr = math.MaxUint16

// builder makes a layer: it checks records, turns them into entries whose
// strings it collects for the arena, and lays entries out in buckets.
type builder struct {
	records  []*configv1.KeyRecord
	problems []Problem

	// ids maps each key id to the index of the first record with it.
	ids map[string]int32
	// revisions allows a key id to appear again with the same hash, as
	// Apply's changes may hold several revisions of a key.
	revisions bool
	// strs maps every other string to its offset in the arena: key ids
	// are unique, so interning them would only grow the map. If strs is
	// nil, strings are not interned: each entry has its own.
	strs map[string]uint32
	// arena holds the strings added, unless their total length, size,
	// exceeds the 4 GiB that offsets can reach: then the layer cannot be
	// built, and the bytes would be wasted.
	arena strings.Builder
	size  uint64
	// scopes is scratch space for joining a record's scopes.
	scopes []byte
	// sorter sorts a bucket: kept here, it is not allocated for each.
	sorter bucket
}

func (b *builder) problem(kind ProblemKind, i int, keyID string, other int, format string, args ...any) {
	b.problems = append(b.problems, Problem{
		Kind: kind, Index: i, KeyID: keyID, Other: other, Reason: fmt.Sprintf(format, args...),
	})
}

// layout lays n keys out in buckets. hash(i) is the sha256 of key i, entry(i)
// its entry. layout calls entry once for every key, in order, even for a key
// whose hash is not 32 bytes long, which it leaves out: entry reports that.
// Keys that share a hash are reported as records of b.records; they are
// kept, so that every problem is found, but the layer is then unusable.
func (b *builder) layout(n int, hash func(i int) []byte, entry func(i int) entry) layer {
	// Counting sort: count the keys of each bucket, then place each key at
	// the next free slot of its bucket.
	shift, starts := buckets(n)
	for i := range n {
		if h := hash(i); len(h) == 32 {
			starts[binary.BigEndian.Uint64(h)>>shift+1]++
		}
	}
	for i := 1; i < len(starts); i++ {
		starts[i] += starts[i-1]
	}
	next := slices.Clone(starts[:len(starts)-1])
	slots := make([]slot, starts[len(starts)-1])
	// index[p] is the position of slots[p] among the keys, for sorting
	// and for naming the records of duplicate hashes.
	index := make([]int32, len(slots))

	for i := range n {
		e := entry(i)
		h := hash(i)
		if len(h) != 32 {
			continue
		}
		bucket := binary.BigEndian.Uint64(h) >> shift
		p := next[bucket]
		next[bucket]++
		copy(slots[p].hash[:], h)
		slots[p].e = e
		index[p] = int32(i)
	}

	for bucket := range len(starts) - 1 {
		b.sortBucket(slots[starts[bucket]:starts[bucket+1]], index[starts[bucket]:starts[bucket+1]])
	}
	return layer{slots: slots, starts: starts, shift: shift}
}

// buckets returns the shift and the zeroed starts of a layer of n keys.
func buckets(n int) (uint8, []uint32) {
	k := max(bits.Len(uint(n))-1, 0)
	return uint8(64 - k), make([]uint32, 1<<k+1)
}

// finish gives l its arena, or returns the problems found. last is the
// position of the last record, which a TooLarge problem names; other is the
// size of the strings of the layer l is to join.
func (b *builder) finish(l *layer, last int, other uint64) error {
	if size := b.size + other; size > math.MaxUint32 {
		b.problem(TooLarge, last, "", -1, "the table's strings take %d bytes, more than 4 GiB", size)
	}
	if len(b.problems) > 0 {
		return b.err()
	}
	l.arena = b.arenaString()
	return nil
}

// arenaString returns the arena built. The arena lives as long as the
// table, and with it the spare capacity of the builder's buffer, up to half
// of it: if that is more than a little, it returns a copy without.
func (b *builder) arenaString() string {
	if spare := b.arena.Cap() - b.arena.Len(); spare > b.arena.Len()/16 {
		return strings.Clone(b.arena.String())
	}
	return b.arena.String()
}

// err returns the problems found, in the order of the records.
func (b *builder) err() error {
	slices.SortStableFunc(b.problems, func(x, y Problem) int { return cmp.Compare(x.Index, y.Index) })
	return &BuildError{Problems: b.problems}
}

// entry checks record r, at position i, and returns its entry.
func (b *builder) entry(i int, r *configv1.KeyRecord) entry {
	var e entry
	if r == nil {
		b.problem(NilRecord, i, "", -1, "nil record")
		return e
	}
	id := r.GetKeyId()
	if n := len(r.GetSha256()); n != 32 {
		b.problem(InvalidHash, i, id, -1, "sha256 is %d bytes, want 32", n)
	}
	switch first, dup := b.ids[id]; {
	case id == "":
		b.problem(MissingKeyID, i, "", -1, "key_id is empty")
	case dup && !(b.revisions && bytes.Equal(r.GetSha256(), b.records[first].GetSha256())):
		b.problem(DuplicateKeyID, i, id, int(first), "key_id also used by keys[%d]", first)
	default:
		if !dup {
			b.ids[id] = int32(i)
		}
		if b.text(i, id, "key_id", id) {
			e.off[fKeyID], e.n[fKeyID] = b.add(id)
		}
	}
	for _, f := range []struct {
		field int
		name  string
		value string
	}{
		{fAppID, "app_id", r.GetAppId()},
		{fTenantID, "tenant_id", r.GetTenantId()},
		{fPlan, "plan", r.GetPlan()},
		{fSuccessor, "successor_key_id", r.GetSuccessorKeyId()},
	} {
		if b.text(i, id, f.name, f.value) {
			e.off[f.field], e.n[f.field] = b.intern(f.value)
		}
	}
	if s, ok := b.joinScopes(i, id, r.GetScopes()); ok {
		e.off[fScopes], e.n[fScopes] = b.internBytes(s)
	}

	switch r.GetStatus() {
	case configv1.KeyStatus_KEY_STATUS_ACTIVE:
	case configv1.KeyStatus_KEY_STATUS_REVOKED:
		e.revoked = true
	default:
		b.problem(InvalidStatus, i, id, -1, "status %v, want active or revoked", r.GetStatus())
	}
	if p := r.GetPriority(); configv1.Priority_name[int32(p)] == "" || p > math.MaxUint8 {
		b.problem(InvalidPriority, i, id, -1, "unknown priority %d", int32(p))
	} else {
		e.priority = uint8(p)
	}
	if na, err := unixNano(r.GetNotAfter()); err != nil {
		b.problem(InvalidNotAfter, i, id, -1, "not_after: %v", err)
	} else {
		e.notAfter = na
	}
	return e
}

// text reports whether s, the field named name of record i, can go into an
// identity header: at most maxStr bytes, each visible ASCII.
func (b *builder) text(i int, id, name, s string) bool {
	if len(s) > maxStr {
		b.problem(InvalidText, i, id, -1, "%s is %d bytes long, more than %d", name, len(s), maxStr)
		return false
	}
	for j := range len(s) {
		if c := s[j]; c <= ' ' || c > '~' {
			b.problem(InvalidText, i, id, -1, "%s has byte %#02x at %d, want visible ASCII", name, c, j)
			return false
		}
	}
	return true
}

// joinScopes checks the scopes of record i and joins them with spaces. The
// result is valid until the next call.
func (b *builder) joinScopes(i int, id string, scopes []string) ([]byte, bool) {
	b.scopes = b.scopes[:0]
	for j, s := range scopes {
		if !scopeToken(s) {
			b.problem(InvalidText, i, id, -1, "scopes[%d] %q is not an RFC 6749 scope token", j, s)
			return nil, false
		}
		if j > 0 {
			b.scopes = append(b.scopes, ' ')
		}
		b.scopes = append(b.scopes, s...)
	}
	if len(b.scopes) > maxStr {
		b.problem(InvalidText, i, id, -1, "scopes take %d bytes, more than %d", len(b.scopes), maxStr)
		return nil, false
	}
	return b.scopes, true
}

// scopeToken reports whether s is a scope-token of RFC 6749 section 3.3:
// 1*( %x21 / %x23-5B / %x5D-7E ).
func scopeToken(s string) bool {
	if s == "" {
		return false
	}
	for j := range len(s) {
		if c := s[j]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// add appends s to the arena and returns where it is.
func (b *builder) add(s string) (uint32, uint16) {
	off := b.size
	if b.size += uint64(len(s)); b.size <= math.MaxUint32 {
		b.arena.WriteString(s)
	}
	return uint32(off), uint16(len(s)) // size is checked once all are added
}

// intern returns where s is in the arena, adding it the first time.
func (b *builder) intern(s string) (uint32, uint16) {
	if s == "" {
		return 0, 0
	}
	if b.strs == nil {
		return b.add(s)
	}
	if off, ok := b.strs[s]; ok {
		return off, uint16(len(s))
	}
	off, n := b.add(s)
	b.strs[s] = off
	return off, n
}

// internBytes is intern for a scratch buffer: it copies p only the first
// time.
func (b *builder) internBytes(p []byte) (uint32, uint16) {
	if off, ok := b.strs[string(p)]; ok { // no allocation for the lookup
		return off, uint16(len(p))
	}
	return b.intern(string(p))
}

// reuse returns e, an entry of a layer already built whose strings are in
// from, with its strings added to the arena being built. e was checked when
// it was built, so reuse checks nothing.
func (b *builder) reuse(e *entry, from split) entry {
	c := *e
	c.off[fKeyID], c.n[fKeyID] = b.add(from.str(e, fKeyID))
	for _, f := range [...]int{fAppID, fTenantID, fPlan, fScopes, fSuccessor} {
		c.off[f], c.n[f] = b.intern(from.str(e, f))
	}
	return c
}

// split is an arena in two parts, a then b, read as if they were joined.
// No string of an entry spans both.
type split struct{ a, b string }

func (s split) str(e *entry, f int) string {
	off, n := int(e.off[f]), int(e.n[f])
	if off+n <= len(s.a) {
		return s.a[off : off+n]
	}
	return s.b[off-len(s.a) : off-len(s.a)+n]
}

// sortBucket sorts a bucket's slots by hash, and for equal hashes by record
// position, then reports every hash held by more than one record.
func (b *builder) sortBucket(slots []slot, index []int32) {
	if len(slots) < 2 {
		return
	}
	b.sorter = bucket{slots, index}
	sort.Sort(&b.sorter)
	first := 0 // the first slot of a run of equal hashes
	for j := 1; j < len(slots); j++ {
		if slots[j].hash != slots[first].hash {
			first = j
			continue
		}
		this, that := b.records[index[j]], b.records[index[first]]
		b.problem(DuplicateHash, int(index[j]), this.GetKeyId(), int(index[first]),
			"same sha256 as keys[%d] (key %q)", index[first], that.GetKeyId())
	}
}

// bucket sorts a bucket's slots and their record positions together.
type bucket struct {
	slots []slot
	index []int32
}

func (k bucket) Len() int { return len(k.slots) }

func (k bucket) Less(x, y int) bool {
	if c := bytes.Compare(k.slots[x].hash[:], k.slots[y].hash[:]); c != 0 {
		return c < 0
	}
	return k.index[x] < k.index[y]
}

func (k bucket) Swap(x, y int) {
	k.slots[x], k.slots[y] = k.slots[y], k.slots[x]
	k.index[x], k.index[y] = k.index[y], k.index[x]
}

// unixNano converts a not_after to Unix nanoseconds, 0 meaning never. A time
// beyond 2262 becomes the largest int64, and 1970-01-01T00:00:00Z itself one
// nanosecond earlier, so that a set not_after is never taken for "never".
func unixNano(ts *timestamppb.Timestamp) (int64, error) {
	if ts == nil {
		return 0, nil
	}
	if err := ts.CheckValid(); err != nil {
		return 0, err
	}
	s, ns := ts.GetSeconds(), int64(ts.GetNanos())
	switch {
	case s >= math.MaxInt64/1_000_000_000:
		return math.MaxInt64, nil
	case s < math.MinInt64/1_000_000_000:
		return math.MinInt64, nil
	case s == 0 && ns == 0:
		return -1, nil
	}
	return s*1e9 + ns, nil
}
