// Package laneentry defines which of the fast lane's entries are the same
// entry, and which of two versions of one entry wins. The key service
// that stores the entries, the control plane that keeps and sends them,
// and the nodes that apply them must agree on both, or a revocation could
// be kept twice, or lost behind an older copy of itself. It is pure: every
// side imports it (as gateway/keysnapshot is the signed snapshot's one
// definition).
//
// An entry is a key (one per key id), a deny entry (one per DenyKey), an
// issuer's published keys (one per issuer), or a usage mark (one per
// node's usage spool: node id and spool id). Each carries its producer's
// revision (the key service's for the first three, the quota service's
// for usage marks), and an entry replaces the one of its identity only if
// its revision is higher (Wins), so that two paths delivering the same
// changes in any order end in the same state. Entries of different kinds
// never compare: each kind has one producer, whose revisions are the only
// ones its identities see.
package laneentry

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Kind is what an entry is.
type Kind string

// The kinds of entries.
const (
	Key        Kind = "key"
	Deny       Kind = "deny"
	IssuerKeys Kind = "issuer_keys"
	UsageMark  Kind = "usage_mark"
)

// ID is an entry's identity: its kind and a key unique within the kind
// (the key id, DenyKey.String, the issuer's name, or a usage mark's
// UsageMarkKey).
type ID struct {
	Kind Kind
	Key  string
}

// Of returns e's identity, or an error for an entry that names nothing.
func Of(e *configv1.FastLaneEntry) (ID, error) {
	switch x := e.GetEntry().(type) {
	case *configv1.FastLaneEntry_Key:
		if x.Key.GetKeyId() == "" {
			return ID{}, errors.New("a key entry without a key id")
		}
		return ID{Key, x.Key.GetKeyId()}, nil
	case *configv1.FastLaneEntry_Deny:
		k, err := DenyKeyOf(x.Deny)
		if err != nil {
			return ID{}, err
		}
		return ID{Deny, k.String()}, nil
	case *configv1.FastLaneEntry_IssuerKeys:
		if x.IssuerKeys.GetIssuer() == "" {
			return ID{}, errors.New("an issuer keys entry without an issuer")
		}
		return ID{IssuerKeys, x.IssuerKeys.GetIssuer()}, nil
	case *configv1.FastLaneEntry_UsageMark:
		node, spool := x.UsageMark.GetNodeId(), x.UsageMark.GetSpoolId()
		if node == "" || spool == "" {
			return ID{}, errors.New("a usage mark without its node id and spool id")
		}
		if strings.Contains(node, "/") || strings.Contains(spool, "/") {
			return ID{}, errors.New(`a usage mark's node id and spool id cannot contain "/"`)
		}
		return ID{UsageMark, UsageMarkKey(x.UsageMark.GetNodeId(), x.UsageMark.GetSpoolId())}, nil
	}
	return ID{}, errors.New("an entry of no known kind")
}

// UsageSource is the fast-lane source (PublishRequest.source) of usage
// marks, the quota service's. The control plane accepts usage marks from
// it alone, and nothing else from it: a usage mark's revisions are the
// quota service's sequence, and a mark of another producer's sequence
// could hide the quota service's newer ones (or the other way round).
const UsageSource = "quota"

// UsageMarkKey is a usage mark's key within its kind: node id, "/",
// spool id. Neither may contain a "/" (Of refuses a mark whose ids do,
// as the protos' patterns do), so no two spools share a key.
func UsageMarkKey(nodeID, spoolID string) string { return nodeID + "/" + spoolID }

// Wins reports whether an entry at revision rev replaces the one of its
// identity held at revision held.
func Wins(rev, held uint64) bool { return rev > held }

// DenyKey is a deny entry's identity: its issuer, what it matches (a
// token's jti, or a subject's or client's tokens), and, for a subject or
// client entry, its cut-off time. A jti entry's issued_before says
// nothing of which entry it is (it denies one token whatever the time),
// so it is left out. Two deny entries with one key are one entry: the one
// of the higher revision stands.
type DenyKey struct {
	Issuer string
	// Match is "jti", "subject" or "client_id"; Value what it must equal.
	Match, Value string
	// Before is issued_before, for subject and client entries that set it.
	Before struct {
		Set     bool
		Seconds int64
		Nanos   int32
	}
}

// DenyKeyOf returns d's key, or an error for an entry that matches
// nothing (or an empty value).
func DenyKeyOf(d *configv1.DenyEntry) (DenyKey, error) {
	k := DenyKey{Issuer: d.GetIssuer()}
	switch m := d.GetMatch().(type) {
	case *configv1.DenyEntry_Jti:
		k.Match, k.Value = "jti", m.Jti
	case *configv1.DenyEntry_Subject:
		k.Match, k.Value = "subject", m.Subject
	case *configv1.DenyEntry_ClientId:
		k.Match, k.Value = "client_id", m.ClientId
	default:
		return DenyKey{}, errors.New("deny entry matches nothing")
	}
	if k.Value == "" {
		return DenyKey{}, errors.New("deny entry matches an empty value")
	}
	if ib := d.GetIssuedBefore(); ib != nil && k.Match != "jti" {
		k.Before.Set, k.Before.Seconds, k.Before.Nanos = true, ib.GetSeconds(), ib.GetNanos()
	}
	return k, nil
}

// String is k as stores keep it: the hex SHA-256 of its parts (issuer,
// match, value, and "seconds.nanos" or nothing), each prefixed with its
// length, so that no two keys share an encoding.
func (k DenyKey) String() string {
	var before string
	if k.Before.Set {
		before = strconv.FormatInt(k.Before.Seconds, 10) + "." + strconv.FormatInt(int64(k.Before.Nanos), 10)
	}
	var b []byte
	for _, part := range []string{k.Issuer, k.Match, k.Value, before} {
		b = binary.AppendUvarint(b, uint64(len(part)))
		b = append(b, part...)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
