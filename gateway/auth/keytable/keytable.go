// Package keytable holds the gateway's API key table: Build turns the key
// records of a snapshot into an immutable Table, Table.Apply layers key
// changes over it, and Table.Check authenticates a presented key against it
// without allocating.
//
// Keys are held only as SHA-256 hashes (see package apikey). Check refuses a
// malformed key before hashing it, then looks the hash up and checks the
// record's status and expiry.
//
// # Layout
//
// The gateway runs pinned to one core, and every garbage collection marks the
// live heap on that core, so a table of a million pointer-rich records (a map
// of *Record, or the protos themselves) adds milliseconds to every cycle and
// to the tail latency of the requests it delays. A Table is instead two
// layers of pointer-free blocks that the collector never looks inside. Each
// layer has:
//
//   - slots: the 32-byte hash and a fixed-size entry of every key, grouped by
//     the leading bits of the hash, each group sorted by hash (so the slots
//     as a whole are sorted by hash);
//   - starts: where each group begins in slots (2^k groups for 2^k ≤ n <
//     2^(k+1) keys, so a group holds one or two keys on average);
//   - an arena: one string holding the ids, plans and scope lists, which
//     entries refer to by offset and length. The base's holds each once
//     (many keys share a tenant, a plan and a set of scopes); the overlay's,
//     which is small, holds each key's own, so that a key moves from one
//     overlay to the next without its strings being looked up.
//
// SHA-256 hashes are uniform, so the leading bits alone spread keys evenly and
// no further hashing is needed. A Record's strings are slices of an arena:
// Lookup copies no bytes and allocates nothing.
//
// # Overlay
//
// The first layer, the base, is what Build makes; it can hold millions of
// keys and takes about a second to build. The second, the overlay, holds the
// keys changed since: Apply builds a new overlay, with the same code as
// Build, from the old overlay and the changes, and shares the base with the
// table it was called on, so a change costs time in proportion to the
// overlay, not the table. Lookup and Check look in the overlay first, then
// in the base: one more probe of a small, cache-friendly layer. Compact
// merges the overlay into a new base in one linear pass, appending the
// overlay's arena to the base's, and rebuilds the arena only when the strings
// no key uses, or that repeat others, would make up more than half of it.
//
// Every key carries the revision of the change that set it, 0 for the
// records given to Build. A change replaces a key only if its revision is
// higher than the key's, so applying a change twice, or an old change after
// a newer one, leaves the table as it was.
//
// # Lifecycle
//
// The owner of a table, a single goroutine that publishes tables through an
// atomic.Pointer that readers load, keeps it up to date like this:
//
//  1. Build a table from the snapshot's records and publish it.
//  2. For each batch of changes from the key service, publish
//     cur.Apply(batch). Apply returns cur itself if no change wins; if it
//     returns an error, it applied nothing and cur stays.
//  3. When the published table's ShouldCompact reports true, and no
//     compaction is running, start one: call Compact on the published
//     table, c0, on another goroutine, for it takes 0.1 s for a million
//     keys. Keep applying batches to the published table meanwhile (step 2),
//     and keep a list of those Apply accepted.
//  4. When Compact returns, apply the listed batches, in order, to its
//     result, and publish that: it holds the same keys as the table it
//     replaces, with a small overlay. A change is skipped where the table
//     holds its key at its revision or a newer one, so a batch listed that
//     c0 holds already does no harm: the list may start early.
//  5. A new snapshot starts again at step 1, and ends any compaction
//     running: drop its result.
//
// A snapshot's records have revision 0, so a change that is older than the
// snapshot but comes after it wins over the snapshot's record of its key:
// the owner should apply only changes newer than the snapshot.
package keytable

import (
	"encoding/binary"

	"github.com/portico-gw/portico/gateway/apikey"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Table is an immutable API key table. It is safe for concurrent use; swap
// tables behind an atomic.Pointer to change keys. A nil *Table is an empty
// table.
type Table struct {
	// base holds the keys of the last Build or Compact, over the keys
	// changed since. A key in over hides the same key in base.
	base, over layer
	// n is the number of distinct keys: base's and those of over that
	// are not in base.
	n int
	// waste bounds the bytes of base's arena that no entry refers to, or
	// that repeat another string, so that Compact knows when rebuilding
	// the arena pays.
	waste int
}

// layer is a set of keys laid out in buckets. Its zero value is empty. It
// holds no pointers but to pointer-free blocks.
type layer struct {
	// slots holds the keys grouped by bucket, each bucket sorted by hash.
	slots []slot
	// starts[b] is the index in slots of bucket b's first key; it has one
	// more element than there are buckets.
	starts []uint32
	// shift turns the first 8 bytes of a hash, big-endian, into a bucket.
	shift uint8
	// arena holds every string of every entry.
	arena string
}

// slot is one key. It holds no pointers.
type slot struct {
	hash [32]byte
	e    entry
}

// entry is what a key stands for, with its strings as offsets and lengths in
// the arena. It holds no pointers.
type entry struct {
	notAfter int64
	rev      uint64
	off      [nFields]uint32
	n        [nFields]uint16
	priority uint8
	revoked  bool
}

// The string fields of an entry.
const (
	fKeyID = iota
	fAppID
	fTenantID
	fPlan
	fScopes
	fSuccessor
	nFields
)

// Record is a key's record as the gateway uses it. Its strings share memory
// with the Table, which stays alive as long as they do.
type Record struct {
	KeyID, AppID, TenantID, Plan string
	// Scopes are the record's scopes joined by single spaces, in record
	// order, "" if none: the value of the x-auth-scopes header.
	Scopes   string
	Priority configv1.Priority
	Revoked  bool
	// NotAfter is when the key stops working, in Unix nanoseconds; 0 means
	// never. The key works at NotAfter itself and fails after it.
	NotAfter int64
	// Successor is the key id of the key that replaced this one; "" if none.
	Successor string
	// Rev is the revision of the Change that set the record, 0 for a
	// record given to Build.
	Rev uint64
}

// Len returns the number of keys in t.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// Lookup returns the record of the key whose SHA-256 is hash. It does not
// allocate.
func (t *Table) Lookup(hash [32]byte) (Record, bool) {
	if t == nil {
		return Record{}, false
	}
	if i := t.over.index(&hash); i >= 0 {
		return t.over.record(&t.over.slots[i].e), true
	}
	if i := t.base.index(&hash); i >= 0 {
		return t.base.record(&t.base.slots[i].e), true
	}
	return Record{}, false
}

// Check authenticates key at now (Unix nanoseconds): the key must be well
// formed (apikey.Parse), known, not revoked, and not past its NotAfter. The
// error is ErrMalformed (wrapping the *apikey.Error that says why),
// ErrUnknown, ErrRevoked or ErrExpired; none holds any part of the key or of
// its hash. With ErrRevoked and ErrExpired the Record is returned too, so
// that the caller can log which key id was refused; otherwise it is empty.
// Check does not allocate, whether it succeeds or fails.
func (t *Table) Check(key string, now int64) (Record, error) {
	return CheckFirst(t, nil, key, now)
}

// CheckFirst is Check against two tables with one parse and one hash: a
// key first holds is judged by first's record alone (a revocation there
// wins over an active record in second); otherwise by second's. Either
// table may be nil. It does not allocate.
func CheckFirst(first, second *Table, key string, now int64) (Record, error) {
	if _, err := apikey.Parse(key); err != nil {
		return Record{}, malformed(err)
	}
	h := apikey.Hash(key)
	r, ok := first.Lookup(h)
	if !ok && second != nil {
		r, ok = second.Lookup(h)
	}
	switch {
	case !ok:
		return Record{}, ErrUnknown
	case r.Revoked:
		return r, ErrRevoked
	case r.NotAfter != 0 && now > r.NotAfter:
		return r, ErrExpired
	}
	return r, nil
}

// index returns the position in l.slots of the key whose SHA-256 is hash, or
// -1 if l does not hold it.
func (l *layer) index(hash *[32]byte) int {
	if len(l.slots) == 0 {
		return -1
	}
	b := binary.BigEndian.Uint64(hash[:8]) >> l.shift
	for i, end := l.starts[b], l.starts[b+1]; i < end; i++ {
		if l.slots[i].hash == *hash {
			return int(i)
		}
	}
	return -1
}

func (l *layer) record(e *entry) Record {
	return Record{
		KeyID:     l.str(e, fKeyID),
		AppID:     l.str(e, fAppID),
		TenantID:  l.str(e, fTenantID),
		Plan:      l.str(e, fPlan),
		Scopes:    l.str(e, fScopes),
		Priority:  configv1.Priority(e.priority),
		Revoked:   e.revoked,
		NotAfter:  e.notAfter,
		Successor: l.str(e, fSuccessor),
		Rev:       e.rev,
	}
}

func (l *layer) str(e *entry, f int) string {
	off := e.off[f]
	return l.arena[off : off+uint32(e.n[f])]
}
