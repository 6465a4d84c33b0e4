package laneentry_test

import (
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/laneentry"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

func deny(d *configv1.DenyEntry) *configv1.FastLaneEntry {
	return &configv1.FastLaneEntry{Entry: &configv1.FastLaneEntry_Deny{Deny: d}}
}

func TestDenyIdentity(t *testing.T) {
	t.Parallel()
	at := func(s int64) *timestamppb.Timestamp { return &timestamppb.Timestamp{Seconds: s} }
	jti := func(iss, v string, ib *timestamppb.Timestamp) *configv1.DenyEntry {
		return &configv1.DenyEntry{Issuer: iss, Match: &configv1.DenyEntry_Jti{Jti: v}, IssuedBefore: ib, Expires: at(99)}
	}
	sub := func(iss, v string, ib *timestamppb.Timestamp) *configv1.DenyEntry {
		return &configv1.DenyEntry{Issuer: iss, Match: &configv1.DenyEntry_Subject{Subject: v}, IssuedBefore: ib}
	}
	client := func(iss, v string, ib *timestamppb.Timestamp) *configv1.DenyEntry {
		return &configv1.DenyEntry{Issuer: iss, Match: &configv1.DenyEntry_ClientId{ClientId: v}, IssuedBefore: ib}
	}
	id := func(d *configv1.DenyEntry) string {
		t.Helper()
		got, err := laneentry.Of(deny(d))
		if err != nil || got.Kind != laneentry.Deny || len(got.Key) != 64 {
			t.Fatalf("Of(%v) = %v, %v", d, got, err)
		}
		return got.Key
	}
	same := [][2]*configv1.DenyEntry{
		// A jti entry is one token whatever its issued_before and expiry.
		{jti("login", "t1", at(5)), jti("login", "t1", at(7))},
		{jti("login", "t1", nil), jti("login", "t1", at(7))},
		{sub("login", "u1", at(5)), sub("login", "u1", at(5))},
	}
	for _, p := range same {
		if id(p[0]) != id(p[1]) {
			t.Errorf("%v and %v are one entry, ids differ", p[0], p[1])
		}
	}
	different := [][2]*configv1.DenyEntry{
		{jti("login", "t1", nil), jti("partner", "t1", nil)},
		{jti("login", "u1", nil), sub("login", "u1", at(5))},
		{sub("login", "u1", at(5)), client("login", "u1", at(5))},
		{sub("login", "u1", at(5)), sub("login", "u1", at(6))},
		{sub("login", "u1", at(5)), sub("login", "u1", &timestamppb.Timestamp{Seconds: 5, Nanos: 1})},
		{sub("login", "u1", nil), sub("login", "u1", at(5))},
		// Length prefixes keep the parts apart.
		{sub("log", "inu1", at(5)), sub("login", "u1", at(5))},
	}
	for _, p := range different {
		if id(p[0]) == id(p[1]) {
			t.Errorf("%v and %v are different entries, one id", p[0], p[1])
		}
	}
	// The encoding is what the key service has always stored: pinned.
	if got, want := id(sub("login", "user-42", at(1796150000))), "37412141930b215ff81d0941a2e8f071fc6899cae10b060f7ff92be9e816b8c8"; got != want {
		t.Errorf("the stored id of a subject entry = %s, want %s as before", got, want)
	}
	for _, bad := range []*configv1.DenyEntry{{Issuer: "login"}, {Issuer: "login", Match: &configv1.DenyEntry_Jti{}}} {
		if _, err := laneentry.Of(deny(bad)); err == nil {
			t.Errorf("Of(%v) succeeded", bad)
		}
	}
}

func TestOtherKinds(t *testing.T) {
	t.Parallel()
	k, err := laneentry.Of(&configv1.FastLaneEntry{Entry: &configv1.FastLaneEntry_Key{Key: &configv1.KeyRecord{KeyId: "key_1"}}})
	if err != nil || k != (laneentry.ID{Kind: laneentry.Key, Key: "key_1"}) {
		t.Errorf("key entry: %v, %v", k, err)
	}
	i, err := laneentry.Of(&configv1.FastLaneEntry{Entry: &configv1.FastLaneEntry_IssuerKeys{IssuerKeys: &configv1.IssuerKeys{Issuer: "login"}}})
	if err != nil || i != (laneentry.ID{Kind: laneentry.IssuerKeys, Key: "login"}) {
		t.Errorf("issuer keys entry: %v, %v", i, err)
	}
	for _, bad := range []*configv1.FastLaneEntry{{}, {Entry: &configv1.FastLaneEntry_Key{Key: &configv1.KeyRecord{}}}, {Entry: &configv1.FastLaneEntry_IssuerKeys{IssuerKeys: &configv1.IssuerKeys{}}}} {
		if _, err := laneentry.Of(bad); err == nil {
			t.Errorf("Of(%v) succeeded", bad)
		}
	}
	if !laneentry.Wins(2, 1) || laneentry.Wins(1, 1) || laneentry.Wins(1, 2) {
		t.Error("Wins: a higher revision, and only it, replaces")
	}
}

func TestUsageMark(t *testing.T) {
	t.Parallel()
	mark := func(node, spool string) *configv1.FastLaneEntry {
		return &configv1.FastLaneEntry{Rev: 1, Entry: &configv1.FastLaneEntry_UsageMark{UsageMark: &configv1.UsageMark{NodeId: node, SpoolId: spool, Seq: 7}}}
	}
	got, err := laneentry.Of(mark("node-1", "0123456789abcdef"))
	if want := (laneentry.ID{Kind: laneentry.UsageMark, Key: "node-1/0123456789abcdef"}); err != nil || got != want {
		t.Errorf("Of(usage mark) = %v, %v, want %v", got, err, want)
	}
	if k := laneentry.UsageMarkKey("node-1", "0123456789abcdef"); k != got.Key {
		t.Errorf("UsageMarkKey = %q, want %q as Of says", k, got.Key)
	}
	// A node's new spool is another entry: its marks start again at rev
	// order of their own.
	other, err := laneentry.Of(mark("node-1", "fedcba9876543210"))
	if err != nil || other == got {
		t.Errorf("another spool of the node: %v, %v, want a different id than %v", other, err, got)
	}
	for _, bad := range []*configv1.FastLaneEntry{
		mark("", "0123456789abcdef"), mark("node-1", ""), mark("", ""),
		{Entry: &configv1.FastLaneEntry_UsageMark{}},
		// The separator cannot be forged: "a/b"+"c" and "a"+"b/c" would be one key.
		mark("a/b", "c"), mark("a", "b/c"),
	} {
		if id, err := laneentry.Of(bad); err == nil {
			t.Errorf("Of(%v) = %v, want an error", bad, id)
		}
	}
}
