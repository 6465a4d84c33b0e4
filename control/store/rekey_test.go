package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-gw/portico/gateway/laneentry"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/internal/sqlstore"
)

// TestRekeyDenyEntries: a database whose deny entries carry the control
// plane's old ids gets laneentry's on Open, so that the same entry
// published again replaces its stored copy instead of standing beside it.
func TestRekeyDenyEntries(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "control.db")

	// The database as the release before made it: two steps.
	old := schema()
	old.Steps, old.Go = old.Steps[:2], nil
	db, err := sqlstore.Open(ctx, dsn, old)
	if err != nil {
		t.Fatal(err)
	}
	d := &configv1.DenyEntry{Issuer: "login", Match: &configv1.DenyEntry_Subject{Subject: "user-1"},
		IssuedBefore: timestamppb.New(time.Unix(1796150000, 0)), Expires: timestamppb.New(time.Unix(1796160000, 0))}
	entry := &configv1.FastLaneEntry{Rev: 3, Entry: &configv1.FastLaneEntry_Deny{Deny: d}}
	data, err := proto.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	// The old id: the first 16 bytes of the SHA-256 of the parts joined.
	sum := sha256.Sum256([]byte(strings.Join([]string{"login", "sub", "user-1", "1796150000.0"}, "\x00")))
	oldID := hex.EncodeToString(sum[:16])
	key := &configv1.FastLaneEntry{Rev: 2, Entry: &configv1.FastLaneEntry_Key{Key: &configv1.KeyRecord{KeyId: "key_1"}}}
	keyData, _ := proto.Marshal(key)
	_, err = db.SQL().ExecContext(ctx, `INSERT INTO fast_lane_entries (kind, id, rev, data, expires_at, version) VALUES
		('deny', ?, 3, ?, 0, 1), ('key', 'key_1', 2, ?, 0, 1)`, oldID, data, keyData)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()

	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := func() map[string]bool {
		t.Helper()
		got, _, err := s.FastLaneSince(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, e := range got {
			out[e.Kind+"/"+e.ID] = true
		}
		return out
	}
	want, _ := laneentry.Of(entry)
	if got := ids(); len(got) != 2 || !got["deny/"+want.Key] || !got["key/key_1"] {
		t.Fatalf("entries after Open: %v, want the deny entry as deny/%s and key/key_1", got, want.Key)
	}

	// The same entry, published again at a higher rev, replaces it.
	again := proto.CloneOf(entry)
	again.Rev = 4
	againData, _ := proto.Marshal(again)
	if _, _, err := s.PublishFastLane(ctx, "keys", 0, 4, []FastLaneEntry{{Kind: "deny", ID: want.Key, Rev: 4, Data: againData}}); err != nil {
		t.Fatal(err)
	}
	if got := ids(); len(got) != 2 {
		t.Errorf("entries after the entry came again: %v, want it once", got)
	}
}

// TestHaltsFromAudit: the halts the audit log held before rollouts had a
// table become halted rollouts, with the version the fleet kept.
func TestHaltsFromAudit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "control.db")
	old := schema()
	old.Steps, old.Go = old.Steps[:3], map[int]sqlstore.GoStep{3: rekeyDenyEntries}
	db, err := sqlstore.Open(ctx, dsn, old)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.SQL().ExecContext(ctx, `INSERT INTO audit (at, actor, team, action, object, outcome, detail, version) VALUES
		(1, 'system', '', 'rollout.halt', 'version 7', 'ok', 'node n refused it: bad cluster', 6),
		(2, 'system', '', 'rollout.revert', 'version 8', 'ok', 'slow', 7)`)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.GetRollout(ctx, 7)
	if err != nil || r.State != "halted" || r.Previous != 6 || r.Evidence != "node n refused it: bad cluster" {
		t.Errorf("the halt of version 7 as a rollout: %+v, %v", r, err)
	}
	if _, err := s.GetRollout(ctx, 8); err == nil {
		t.Error("a revert became a rollout row: only halts are carried over")
	}
}
