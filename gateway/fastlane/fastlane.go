// Package fastlane holds a gateway node's fast-lane state: the API keys,
// token deny entries and issuers' signing keys that reach the node through
// the control plane's fast lane and the key service's signed snapshot,
// outside the staged snapshots, and the quota service's usage marks, which
// the lane hands to the node's usage shipper (OnUsageMark).
//
// Every entry carries the key service's revision number. An entry replaces
// the one of the same identity only when its revision is higher, so the
// stream and the signed snapshot may deliver the same change twice and in
// any order, and the newest always wins; nothing is ever taken back by an
// older message.
//
// Changing the state never blocks a request: the key table is
// copy-on-write (keytable.Table.Apply builds a small overlay over the
// shared base, in time proportional to the overlay, not to the table) and
// is published with one atomic store. When the overlay grows, a background
// goroutine merges it into a new base, and the changes that arrived
// meanwhile are applied again on top (the revision rule makes that
// harmless).
//
// Lifecycle: New, then Apply (stream updates) and ApplySigned (polled
// snapshots) from any goroutine; they serialise. OnUsageMark may be set
// at any time. Close stops a compaction in progress.
package fastlane

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/portico-gw/portico/gateway/auth/keytable"
	"github.com/portico-gw/portico/gateway/denyentry"
	"github.com/portico-gw/portico/gateway/laneentry"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Options configure a Lane.
type Options struct {
	// SetKeys installs the fast lane's key table for every later request
	// (auth.Authenticator.SetLaneKeys). It must not block.
	SetKeys func(*keytable.Table)
	// SetTokens installs the deny entries and the issuers' published keys
	// (by issuer name, each a JWKS document). It returns an error, and the
	// node keeps what it had, when the keys do not parse; the Lane then
	// leaves out the issuers' keys the call changed, and offers them
	// again one issuer at a time.
	SetTokens func(deny []*configv1.DenyEntry, issuerKeys map[string]string) error
	// Now is the clock for dropping deny entries past
	// denyentry.KeepUntil; nil: time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Lane is a node's fast-lane state. It is safe for concurrent use.
type Lane struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	keys    *keytable.Table
	deny    map[laneentry.DenyKey]denyItem
	issuers map[string]issuerItem
	// marks are the newest usage mark of each spool (laneentry.UsageMarkKey).
	marks map[string]markItem
	// compacting is set while a compaction runs; pending are the key
	// changes applied since it started, to apply again on its result.
	compacting bool
	pending    []keytable.Change
	// signedSeq is the sequence of the newest signed snapshot applied.
	signedSeq uint64
	maxRev    uint64
	closed    bool
	// compacted is closed and replaced after each compaction (tests).
	compacted chan struct{}

	// hookMu is held while usage marks are passed to onMark, taken before
	// mu is released, so that the hook sees the marks in the order the
	// lane applied them, and is never called with mu held.
	hookMu sync.Mutex
	onMark func(*configv1.UsageMark) // under mu and hookMu to set
}

type markItem struct {
	rev  uint64
	mark *configv1.UsageMark
}

type denyItem struct {
	rev   uint64
	entry *configv1.DenyEntry
	// keep is denyentry.KeepUntil of entry: the lane does not know the
	// issuers, whose lifetimes the verifier applies, and an issuer's
	// lifetime may be raised while the entry is held.
	keep time.Time
}

type issuerItem struct {
	rev  uint64
	jwks string
}

// New returns an empty Lane.
func New(opts Options) *Lane {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &Lane{opts: opts, log: opts.Logger, deny: map[laneentry.DenyKey]denyItem{}, issuers: map[string]issuerItem{},
		marks: map[string]markItem{}, compacted: make(chan struct{})}
	if l.log == nil {
		l.log = slog.Default()
	}
	return l
}

// EntryError lists the entries a Lane refused; it applied the others.
type EntryError struct {
	Problems []string
}

func (e *EntryError) Error() string {
	const listed = 10
	var b strings.Builder
	fmt.Fprintf(&b, "fastlane: refused %d entries", len(e.Problems))
	for i, p := range e.Problems {
		if i == listed {
			fmt.Fprintf(&b, "; and %d more", len(e.Problems)-listed)
			break
		}
		b.WriteString("; ")
		b.WriteString(p)
	}
	return b.String()
}

// Refused reports whether err is an *EntryError: the entries it names
// were left out, and everything else was applied.
func Refused(err error) bool {
	var e *EntryError
	return errors.As(err, &e)
}

// Apply merges entries into the state: each replaces the entry of the same
// identity if its revision is higher. Entries that are invalid are left
// out and listed in the *EntryError returned; the others are applied.
func (l *Lane) Apply(entries []*configv1.FastLaneEntry) error {
	l.mu.Lock()
	marks, err := l.applyLocked(entries)
	l.unlockAndHandMarks(marks)
	return err
}

// OnUsageMark sets fn as the hook the lane passes every usage mark it
// applies to (a mark replaces the one of its spool, node id and spool id,
// when its revision is higher): the node's usage shipper, which trims its
// spool at the mark when the mark is its own (same node id and spool id)
// and ignores the others. Setting it passes fn the marks the lane holds
// already, so that a mark that arrived before the shipper started is not
// lost; nil removes the hook.
//
// fn is called from the goroutine that applies an update, one call at a
// time, in the order the lane applied the marks, never with the lane's
// lock held; the node's acknowledgment of the update waits for it, so it
// must not block for long. fn must not keep the mark past the call
// without cloning it (it is the lane's).
func (l *Lane) OnUsageMark(fn func(*configv1.UsageMark)) {
	l.mu.Lock()
	l.hookMu.Lock()
	l.onMark = fn
	held := make([]*configv1.UsageMark, 0, len(l.marks))
	for _, m := range l.marks {
		held = append(held, m.mark)
	}
	l.mu.Unlock()
	defer l.hookMu.Unlock()
	if fn == nil {
		return
	}
	sort.Slice(held, func(i, j int) bool {
		return laneentry.UsageMarkKey(held[i].GetNodeId(), held[i].GetSpoolId()) < laneentry.UsageMarkKey(held[j].GetNodeId(), held[j].GetSpoolId())
	})
	for _, m := range held {
		fn(m)
	}
}

// UsageMark returns the newest usage mark the lane holds for the spool
// spoolID of node nodeID.
func (l *Lane) UsageMark(nodeID, spoolID string) (*configv1.UsageMark, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.marks[laneentry.UsageMarkKey(nodeID, spoolID)]
	return m.mark, ok
}

// unlockAndHandMarks releases mu and passes marks to the hook, in order,
// holding hookMu from before mu is released.
func (l *Lane) unlockAndHandMarks(marks []*configv1.UsageMark) {
	if len(marks) == 0 {
		l.mu.Unlock()
		return
	}
	l.hookMu.Lock()
	fn := l.onMark
	l.mu.Unlock()
	defer l.hookMu.Unlock()
	if fn == nil {
		return
	}
	for _, m := range marks {
		fn(m)
	}
}

// ApplySigned merges a signed snapshot's entries, already verified, at
// its sequence: a snapshot not newer than the last one applied is refused
// with ErrStale. The snapshot is the key service's: a usage mark in it is
// not the quota service's and is dropped.
func (l *Lane) ApplySigned(seq uint64, entries []*configv1.FastLaneEntry) error {
	l.mu.Lock()
	if seq <= l.signedSeq {
		defer l.mu.Unlock()
		return fmt.Errorf("%w: sequence %d, the node applied %d", ErrStale, seq, l.signedSeq)
	}
	if slices.ContainsFunc(entries, func(e *configv1.FastLaneEntry) bool { return e.GetUsageMark() != nil }) {
		entries = slices.DeleteFunc(slices.Clone(entries), func(e *configv1.FastLaneEntry) bool { return e.GetUsageMark() != nil })
	}
	marks, err := l.applyLocked(entries)
	l.signedSeq = seq
	l.unlockAndHandMarks(marks)
	return err
}

// ErrStale is ApplySigned's error for a snapshot older than one applied.
var ErrStale = errors.New("fastlane: signed snapshot is not newer than the one applied")

// SignedSeq returns the sequence of the newest signed snapshot applied.
func (l *Lane) SignedSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.signedSeq
}

// MaxRev returns the highest revision of the key service's entries (keys,
// deny entries, issuers' keys) the lane has applied. Usage marks are left
// out: their revisions are the quota service's, another sequence.
func (l *Lane) MaxRev() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxRev
}

// Keys returns the lane's key table.
func (l *Lane) Keys() *keytable.Table {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keys
}

// applyLocked applies entries and returns the usage marks that replaced
// the ones held, for the hook.
func (l *Lane) applyLocked(entries []*configv1.FastLaneEntry) ([]*configv1.UsageMark, error) {
	var problems []string
	var marks []*configv1.UsageMark
	var changes []keytable.Change
	// where[i] is the position in entries of changes[i].
	var where []int
	tokens := false
	// The issuers whose keys the call changes, as they were, so that
	// keys the node refuses can be taken back.
	var issuers []issuerChange
	now := l.opts.Now()
	for i, e := range entries {
		if e.GetRev() == 0 {
			problems = append(problems, fmt.Sprintf("entries[%d]: rev 0", i))
			continue
		}
		switch x := e.GetEntry().(type) {
		case *configv1.FastLaneEntry_Key:
			changes = append(changes, keytable.Change{Record: x.Key, Rev: e.GetRev()})
			where = append(where, i)
		case *configv1.FastLaneEntry_Deny:
			k, err := identity(x.Deny)
			if err != nil {
				problems = append(problems, fmt.Sprintf("entries[%d]: %v", i, err))
				continue
			}
			if old, ok := l.deny[k]; ok && !laneentry.Wins(e.GetRev(), old.rev) {
				continue
			}
			if keep := denyentry.KeepUntil(x.Deny); keep.After(now) {
				l.deny[k] = denyItem{rev: e.GetRev(), entry: x.Deny, keep: keep}
			} else {
				delete(l.deny, k)
			}
			tokens = true
		case *configv1.FastLaneEntry_IssuerKeys:
			name := x.IssuerKeys.GetIssuer()
			err := checkJWKS(x.IssuerKeys.GetJwksJson())
			if name == "" {
				err = errors.New("no issuer name")
			}
			if err != nil {
				problems = append(problems, fmt.Sprintf("entries[%d]: issuer %q: %v", i, name, err))
				continue
			}
			old, ok := l.issuers[name]
			if ok && !laneentry.Wins(e.GetRev(), old.rev) {
				continue
			}
			if j := slices.IndexFunc(issuers, func(c issuerChange) bool { return c.name == name }); j >= 0 {
				issuers[j].at = i
			} else {
				issuers = append(issuers, issuerChange{name: name, at: i, old: old, had: ok})
			}
			l.issuers[name] = issuerItem{rev: e.GetRev(), jwks: x.IssuerKeys.GetJwksJson()}
			tokens = true
		case *configv1.FastLaneEntry_UsageMark:
			id, err := laneentry.Of(e)
			if err != nil {
				problems = append(problems, fmt.Sprintf("entries[%d]: %v", i, err))
				continue
			}
			if old, ok := l.marks[id.Key]; !ok || laneentry.Wins(e.GetRev(), old.rev) {
				l.marks[id.Key] = markItem{rev: e.GetRev(), mark: x.UsageMark}
				marks = append(marks, x.UsageMark)
			}
			continue // not the key service's revision: MaxRev leaves it out
		default:
			problems = append(problems, fmt.Sprintf("entries[%d]: no entry", i))
			continue
		}
		l.maxRev = max(l.maxRev, e.GetRev())
	}
	if len(changes) > 0 {
		p := l.applyKeysLocked(changes, where)
		problems = append(problems, p...)
	}
	// Deny entries past KeepUntil go with any change: no token they
	// cover can be accepted any more.
	for k, d := range l.deny {
		if !d.keep.After(now) {
			delete(l.deny, k)
			tokens = true
		}
	}
	if tokens && l.opts.SetTokens != nil {
		problems = append(problems, l.setTokensLocked(issuers)...)
	}
	if len(problems) > 0 {
		return marks, &EntryError{Problems: problems}
	}
	return marks, nil
}

// issuerChange is an issuer's keys before a call of applyLocked changed
// them, and the position of the entry that did.
type issuerChange struct {
	name string
	at   int
	old  issuerItem
	had  bool
}

func (c issuerChange) undo(l *Lane) {
	if c.had {
		l.issuers[c.name] = c.old
	} else {
		delete(l.issuers, c.name)
	}
}

// setTokensLocked installs the deny entries and issuers' keys. When the
// node refuses them, it keeps what it had, and so must the lane, or every
// later change (a deny entry above all) would be refused with the same
// keys: the issuers' keys changed by the call are taken back, then offered
// again one issuer at a time, and those the node refuses are left out and
// answered as problems.
func (l *Lane) setTokensLocked(changed []issuerChange) []string {
	err := l.opts.SetTokens(l.tokensLocked())
	if err == nil {
		return nil
	}
	if len(changed) == 0 {
		return []string{"tokens: " + err.Error()}
	}
	next := make([]issuerItem, len(changed))
	for i, c := range changed {
		next[i] = l.issuers[c.name]
		c.undo(l)
	}
	if err := l.opts.SetTokens(l.tokensLocked()); err != nil {
		problems := []string{"tokens: " + err.Error()}
		for _, c := range changed {
			problems = append(problems, fmt.Sprintf("entries[%d]: issuer %q: not applied", c.at, c.name))
		}
		return problems
	}
	var problems []string
	for i, c := range changed {
		l.issuers[c.name] = next[i]
		if err := l.opts.SetTokens(l.tokensLocked()); err != nil {
			c.undo(l)
			problems = append(problems, fmt.Sprintf("entries[%d]: issuer %q: %v", c.at, c.name, err))
		}
	}
	return problems
}

// applyKeysLocked applies key changes, leaving out the ones the table
// refuses, and answers why it refused them.
func (l *Lane) applyKeysLocked(changes []keytable.Change, where []int) []string {
	var problems []string
	next, err := l.keys.Apply(changes)
	var be *keytable.BuildError
	if errors.As(err, &be) {
		bad := map[int]bool{}
		for _, p := range be.Problems {
			if p.Index >= 0 && p.Index < len(changes) && !bad[p.Index] {
				bad[p.Index] = true
				problems = append(problems, fmt.Sprintf("entries[%d]: %s", where[p.Index], p.Error()))
			}
		}
		kept := changes[:0:0]
		for i, c := range changes {
			if !bad[i] {
				kept = append(kept, c)
			}
		}
		changes = kept
		next, err = l.keys.Apply(changes)
	}
	if err != nil {
		return append(problems, "keys: "+err.Error())
	}
	l.keys = next
	if l.compacting {
		l.pending = append(l.pending, changes...)
	}
	if l.opts.SetKeys != nil {
		l.opts.SetKeys(next)
	}
	if !l.compacting && !l.closed && next.ShouldCompact() {
		l.compacting = true
		go l.compact(next)
	}
	return problems
}

// compact merges t's overlay into a new base off every request, then
// publishes it with the changes applied since t.
func (l *Lane) compact(t *keytable.Table) {
	merged := t.Compact()
	l.mu.Lock()
	defer l.mu.Unlock()
	next, err := merged.Apply(l.pending)
	if err != nil {
		// The pending changes were applied once already; they cannot
		// fail on the same keys. Keep the uncompacted table.
		l.log.Error("fast lane: applying changes after a compaction failed", "err", err)
	} else {
		l.keys = next
		if l.opts.SetKeys != nil {
			l.opts.SetKeys(next)
		}
	}
	l.pending = nil
	l.compacting = false
	close(l.compacted)
	l.compacted = make(chan struct{})
}

// tokensLocked returns the deny entries in a stable order and the
// issuers' keys.
func (l *Lane) tokensLocked() ([]*configv1.DenyEntry, map[string]string) {
	deny := make([]*configv1.DenyEntry, 0, len(l.deny))
	keys := make([]laneentry.DenyKey, 0, len(l.deny))
	for k := range l.deny {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.Issuer != b.Issuer {
			return a.Issuer < b.Issuer
		}
		if a.Match != b.Match {
			return a.Match < b.Match
		}
		if a.Value != b.Value {
			return a.Value < b.Value
		}
		if a.Before.Seconds != b.Before.Seconds {
			return a.Before.Seconds < b.Before.Seconds
		}
		return a.Before.Nanos < b.Before.Nanos
	})
	for _, k := range keys {
		deny = append(deny, l.deny[k].entry)
	}
	issuers := make(map[string]string, len(l.issuers))
	for name, it := range l.issuers {
		issuers[name] = it.jwks
	}
	return deny, issuers
}

// Close stops starting compactions and waits for one that runs.
func (l *Lane) Close() {
	l.mu.Lock()
	l.closed = true
	running, done := l.compacting, l.compacted
	l.mu.Unlock()
	if running {
		<-done
	}
}

// identity is d's identity (laneentry.DenyKeyOf), once d is an entry a
// node can apply: one with a valid expires, and an issued_before if it
// denies a subject's or client's tokens.
func identity(d *configv1.DenyEntry) (laneentry.DenyKey, error) {
	k, err := laneentry.DenyKeyOf(d)
	if err != nil {
		return k, err
	}
	if !d.GetExpires().IsValid() {
		return k, errors.New("deny entry has no valid expires")
	}
	if k.Match != "jti" && !d.GetIssuedBefore().IsValid() {
		return k, errors.New("a subject or client_id deny entry needs issued_before")
	}
	return k, nil
}

// checkJWKS checks that s is a JSON Web Key Set: an object with a "keys"
// array of objects. The verifier checks the keys themselves.
func checkJWKS(s string) error {
	var set struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal([]byte(s), &set); err != nil {
		return fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	if set.Keys == nil {
		return errors.New(`not a JSON Web Key Set: no "keys" array`)
	}
	return nil
}
