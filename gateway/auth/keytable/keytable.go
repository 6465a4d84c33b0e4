// Package keytable holds the gateway's API key table: Build turns the key
// records of a snapshot into an immutable Table, and Table.Check authenticates
// a presented key against it without allocating.
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
// to the tail latency of the requests it delays. A Table is instead four
// pointer-free blocks that the collector never looks inside:
//
//   - slots: the 32-byte hash and a fixed-size entry of every key, grouped by
//     the leading bits of the hash, each group sorted by hash;
//   - starts: where each group begins in slots (2^k groups for 2^k ≤ n <
//     2^(k+1) keys, so a group holds one or two keys on average);
//   - an arena: one string holding every id, plan and scope list once
//     (many keys share a tenant, a plan and a set of scopes), which entries
//     refer to by offset and length;
//   - the Table itself.
//
// SHA-256 hashes are uniform, so the leading bits alone spread keys evenly and
// no further hashing is needed. A Record's strings are slices of the arena:
// Lookup copies no bytes and allocates nothing.
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
}

// Len returns the number of keys in t.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.slots)
}

// Lookup returns the record of the key whose SHA-256 is hash. It does not
// allocate.
func (t *Table) Lookup(hash [32]byte) (Record, bool) {
	if t == nil {
		return Record{}, false
	}
	b := binary.BigEndian.Uint64(hash[:8]) >> t.shift
	for i, end := t.starts[b], t.starts[b+1]; i < end; i++ {
		if s := &t.slots[i]; s.hash == hash {
			return t.record(&s.e), true
		}
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
	if _, err := apikey.Parse(key); err != nil {
		return Record{}, malformed(err)
	}
	r, ok := t.Lookup(apikey.Hash(key))
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

func (t *Table) record(e *entry) Record {
	return Record{
		KeyID:     t.str(e, fKeyID),
		AppID:     t.str(e, fAppID),
		TenantID:  t.str(e, fTenantID),
		Plan:      t.str(e, fPlan),
		Scopes:    t.str(e, fScopes),
		Priority:  configv1.Priority(e.priority),
		Revoked:   e.revoked,
		NotAfter:  e.notAfter,
		Successor: t.str(e, fSuccessor),
	}
}

func (t *Table) str(e *entry, f int) string {
	off := e.off[f]
	return t.arena[off : off+uint32(e.n[f])]
}
