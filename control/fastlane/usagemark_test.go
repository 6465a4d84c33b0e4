package fastlane_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"connectrpc.com/connect"

	"github.com/portico-gw/portico/control/distribution"
	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/gateway/laneentry"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	distributionv1 "github.com/portico-gw/portico/gen/portico/distribution/v1"
)

const spoolA = "0123456789abcdef"

func usageMark(node string, seq, rev uint64) *configv1.FastLaneEntry {
	return &configv1.FastLaneEntry{Rev: rev, Entry: &configv1.FastLaneEntry_UsageMark{
		UsageMark: &configv1.UsageMark{NodeId: node, SpoolId: spoolA, Seq: seq}}}
}

func (l *lane) publishAs(t *testing.T, source string, from, to uint64, entries ...*configv1.FastLaneEntry) *distributionv1.PublishResponse {
	t.Helper()
	resp, err := l.pub.Publish(context.Background(), connect.NewRequest(&distributionv1.PublishRequest{
		Source: source, FromSeq: from, ToSeq: to, Entries: entries}))
	if err != nil {
		t.Fatalf("Publish(%s, %d, %d): %v", source, from, to, err)
	}
	return resp.Msg
}

// TestFastLaneUsageMarks: the quota service's usage marks are kept and
// sent as the key service's entries are, each spool's newest by the quota
// service's revisions, which never meet the key service's: a key and a
// mark at one revision are both kept, and a key at a high revision does
// not hide a mark at a lower one.
func TestFastLaneUsageMarks(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{})
	n := l.connect(t, "node-1", "", 0)
	if u, _ := n.update(t); !u.GetFull() || len(u.GetEntries()) != 0 {
		t.Fatalf("first update %v, want the empty full state", u)
	}
	n.ack(t, 0, "")

	if resp := l.publishAs(t, "keys", 0, 50, key("a", 50)); resp.GetVersion() != 1 {
		t.Fatalf("Publish(keys) = version %d, want 1", resp.GetVersion())
	}
	if u, _ := n.update(t); !slices.Equal(names(u.GetEntries()), []string{"key a@50"}) {
		t.Errorf("update after the key = %v", names(u.GetEntries()))
	}
	n.ack(t, 1, "")
	l.publishAs(t, "quota", 0, 2, usageMark("node-1", 7, 1), usageMark("node-2", 3, 2))
	if u, _ := n.update(t); u.GetVersion() != 2 || !slices.Equal(names(u.GetEntries()), []string{"mark node-1/" + spoolA + ":7@1", "mark node-2/" + spoolA + ":3@2"}) {
		t.Errorf("update after the marks = version %d %v", u.GetVersion(), names(u.GetEntries()))
	}
	n.ack(t, 2, "")
	// A newer mark replaces a spool's; a stale one (a retry the quota
	// service sent late) changes nothing.
	l.publishAs(t, "quota", 2, 4, usageMark("node-1", 9, 4), usageMark("node-2", 1, 2))
	if u, _ := n.update(t); !slices.Equal(names(u.GetEntries()), []string{"mark node-1/" + spoolA + ":9@4"}) {
		t.Errorf("update after a newer and a stale mark = %v, want the newer alone", names(u.GetEntries()))
	}
	n.ack(t, 3, "")

	// A node that joins gets every kind in its full state.
	late := l.connect(t, "node-late", "", 0)
	u, _ := late.update(t)
	want := []string{"key a@50", "mark node-1/" + spoolA + ":9@4", "mark node-2/" + spoolA + ":3@2"}
	if !u.GetFull() || !slices.Equal(names(u.GetEntries()), want) {
		t.Errorf("a new node's full state = %v, want %v", names(u.GetEntries()), want)
	}
	if src := l.source(t, "quota"); src.GetSeq() != 4 || src.GetVersion() != 3 {
		t.Errorf("Source(quota) = %v, want seq 4, version 3", src)
	}
}

// TestFastLaneUsageMarkSources: usage marks come from the quota service's
// source alone, and it publishes nothing else; a mark that names no spool
// is refused. None of these changes the lane.
func TestFastLaneUsageMarkSources(t *testing.T) {
	t.Parallel()
	l := startLane(t, distribution.Options{})
	ctx := context.Background()
	noSpool := usageMark("node-1", 1, 1)
	noSpool.GetUsageMark().SpoolId = ""
	for _, c := range []struct {
		name   string
		source string
		entry  *configv1.FastLaneEntry
	}{
		{"a usage mark from keys", "keys", usageMark("node-1", 1, 1)},
		{"a usage mark from another source", "billing", usageMark("node-1", 1, 1)},
		{"a key from quota", "quota", key("a", 1)},
		{"a deny entry from quota", "quota", deny("jti-1", 1)},
		{"a usage mark without a spool", "quota", noSpool},
	} {
		_, err := l.pub.Publish(ctx, connect.NewRequest(&distributionv1.PublishRequest{Source: c.source, FromSeq: 0, ToSeq: 1,
			Entries: []*configv1.FastLaneEntry{c.entry}}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Publish of %s: %v, want InvalidArgument", c.name, err)
		}
	}
	entries, version, err := l.store.FastLaneSince(ctx, 0)
	if err != nil || version != 0 || len(entries) != 0 {
		t.Errorf("after refused publishes the store holds version %d, %d entries (%v), want nothing", version, len(entries), err)
	}
}

// TestUsageToken: with a usage token set, usage marks take it and it
// publishes nothing else; the publisher token can no longer publish marks
// (nor read the quota source) but keeps publishing keys.
func TestUsageToken(t *testing.T) {
	t.Parallel()
	const usageToken = "ptk_usage_token_for_the_quota_service_0123"
	l := startLane(t, distribution.Options{
		PublisherTokenHash: store.SHA256([]byte(publisherToken)),
		UsageTokenHash:     store.SHA256([]byte(usageToken)),
	})
	ctx := context.Background()
	mark := func(token string, rev uint64) error {
		_, err := l.publisher(token).Publish(ctx, connect.NewRequest(&distributionv1.PublishRequest{Source: laneentry.UsageSource,
			FromSeq: rev - 1, ToSeq: rev, Entries: []*configv1.FastLaneEntry{usageMark("n1", 5, rev)}}))
		return err
	}
	keys := func(token string, rev uint64) error {
		_, err := l.publisher(token).Publish(ctx, connect.NewRequest(&distributionv1.PublishRequest{Source: "keys",
			FromSeq: rev - 1, ToSeq: rev, Entries: []*configv1.FastLaneEntry{key(fmt.Sprint("k", rev), rev)}}))
		return err
	}
	if err := mark(publisherToken, 1); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a usage mark with the publisher token: %v, want PermissionDenied", err)
	}
	if _, err := l.publisher(publisherToken).Source(ctx, connect.NewRequest(&distributionv1.SourceRequest{Source: laneentry.UsageSource})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("Source %q with the publisher token: %v, want PermissionDenied", laneentry.UsageSource, err)
	}
	if err := keys(usageToken, 1); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a key with the usage token: %v, want PermissionDenied", err)
	}
	if err := mark(usageToken+"x", 1); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a usage mark with a wrong token: %v, want Unauthenticated", err)
	}
	if _, version, _ := l.store.FastLaneInfo(ctx); version != 0 {
		t.Errorf("after refused publishes the fast lane is at version %d, want 0", version)
	}
	if err := mark(usageToken, 1); err != nil {
		t.Errorf("a usage mark with the usage token: %v", err)
	}
	if err := keys(publisherToken, 1); err != nil {
		t.Errorf("a key with the publisher token: %v", err)
	}
}
