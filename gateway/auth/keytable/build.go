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
// or scopes that could not be sent in an identity header.
//
// Build keeps no reference to records. It runs off the request path; for a
// million keys it takes about a second.
func Build(records []*configv1.KeyRecord) (*Table, error) {
	b := builder{
		records: records,
		ids:     make(map[string]int32, len(records)),
		strs:    make(map[string]uint32),
	}
	return b.build()
}

// maxStr is the longest string an entry can refer to.
const maxStr = math.MaxUint16

type builder struct {
	records  []*configv1.KeyRecord
	problems []Problem

	// ids maps each key id to the index of the first record with it.
	ids map[string]int32
	// strs maps every other string to its offset in the arena: key ids
	// are unique, so interning them would only grow the map.
	strs map[string]uint32
	// order holds the arena's strings in order; size is their total
	// length.
	order []string
	size  uint64
	// scopes is scratch space for joining a record's scopes.
	scopes []byte
}

func (b *builder) problem(kind ProblemKind, i int, keyID string, other int, format string, args ...any) {
	b.problems = append(b.problems, Problem{
		Kind: kind, Index: i, KeyID: keyID, Other: other, Reason: fmt.Sprintf(format, args...),
	})
}

func (b *builder) build() (*Table, error) {
	// Counting sort: count the keys of each bucket, then place each key at
	// the next free slot of its bucket.
	k := max(bits.Len(uint(len(b.records)))-1, 0)
	shift := uint8(64 - k)
	starts := make([]uint32, 1<<k+1)
	for _, r := range b.records {
		if h := r.GetSha256(); len(h) == 32 {
			starts[binary.BigEndian.Uint64(h)>>shift+1]++
		}
	}
	for i := 1; i < len(starts); i++ {
		starts[i] += starts[i-1]
	}
	next := slices.Clone(starts[:len(starts)-1])
	slots := make([]slot, starts[len(starts)-1])
	// index[p] is the position in records of slots[p], for sorting and
	// for naming the records of duplicate hashes.
	index := make([]int32, len(slots))

	for i, r := range b.records {
		e := b.entry(i, r)
		h := r.GetSha256()
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
	if b.size > math.MaxUint32 {
		b.problem(TooLarge, len(b.records)-1, "", -1, "the table's strings take %d bytes, more than 4 GiB", b.size)
	}
	if len(b.problems) > 0 {
		slices.SortStableFunc(b.problems, func(x, y Problem) int { return cmp.Compare(x.Index, y.Index) })
		return nil, &BuildError{Problems: b.problems}
	}

	var arena strings.Builder
	arena.Grow(int(b.size))
	for _, s := range b.order {
		arena.WriteString(s)
	}
	return &Table{slots: slots, starts: starts, shift: shift, arena: arena.String()}, nil
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
	case dup:
		b.problem(DuplicateKeyID, i, id, int(first), "key_id also used by keys[%d]", first)
	default:
		b.ids[id] = int32(i)
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
	b.size += uint64(len(s))
	b.order = append(b.order, s)
	return uint32(off), uint16(len(s)) // size is checked once all are added
}

// intern returns where s is in the arena, adding it the first time.
func (b *builder) intern(s string) (uint32, uint16) {
	if s == "" {
		return 0, 0
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

// sortBucket sorts a bucket's slots by hash, and for equal hashes by record
// position, then reports every hash held by more than one record.
func (b *builder) sortBucket(slots []slot, index []int32) {
	if len(slots) < 2 {
		return
	}
	sort.Sort(bucket{slots, index})
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
