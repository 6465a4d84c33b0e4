package keytable

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

func TestCompactAt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, want int }{
		{0, 4096}, {1_000_000, 4096}, {16_777_216, 4096}, {25_000_000, 5000}, {100_000_000, 10_000},
	} {
		if got := compactAt(tc.n); got != tc.want {
			t.Errorf("compactAt(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// TestCompactArena changes the same few keys again and again, each time
// with a plan never seen before, and compacts after each change: the arena
// must stay within twice what a Build of the same records needs, and the
// rebuilds that keep it there must keep every key's strings.
func TestCompactArena(t *testing.T) {
	t.Parallel()
	var records []*configv1.KeyRecord
	for i := range 100 {
		h := make([]byte, 32)
		h[0], h[31] = byte(i), 1
		records = append(records, &configv1.KeyRecord{
			Sha256: h, KeyId: fmt.Sprintf("key_%04d", i), AppId: fmt.Sprintf("app_%d", i%7), Plan: "gold",
			Scopes: []string{"a:read"}, Status: configv1.KeyStatus_KEY_STATUS_ACTIVE,
		})
	}
	tbl, err := Build(records)
	if err != nil {
		t.Fatal(err)
	}
	rebuilds := 0
	revs := make([]uint64, len(records))
	for rev := range uint64(400) {
		r := proto.Clone(records[rev%10]).(*configv1.KeyRecord)
		r.Plan = fmt.Sprint("plan-", rev)
		records[rev%10], revs[rev%10] = r, rev+1
		if tbl, err = tbl.Apply([]Change{{Record: r, Rev: rev + 1}}); err != nil {
			t.Fatal(err)
		}
		tbl = tbl.Compact()
		fresh, err := Build(records)
		if err != nil {
			t.Fatal(err)
		}
		got, need := len(tbl.base.arena), len(fresh.base.arena)
		if got > 2*need {
			t.Fatalf("after %d changes the arena holds %d bytes, more than twice the %d a Build needs", rev+1, got, need)
		}
		if tbl.waste == 0 {
			rebuilds++
			if got != need {
				t.Errorf("after %d changes the rebuilt arena holds %d bytes, want %d as a Build", rev+1, got, need)
			}
		}
		for i, r := range records {
			rec, ok := tbl.Lookup([32]byte(r.Sha256))
			want, _ := fresh.Lookup([32]byte(r.Sha256))
			want.Rev = revs[i]
			if !ok || rec != want {
				t.Fatalf("after %d changes Lookup(keys[%d]) = %+v, %v; want %+v", rev+1, i, rec, ok, want)
			}
		}
	}
	if rebuilds < 3 {
		t.Errorf("%d rebuilds of the arena, want at least 3", rebuilds)
	}
}
