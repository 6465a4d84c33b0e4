package versions_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/portico-gw/portico/control/store"
	"github.com/portico-gw/portico/control/versions"
)

func commit(msg string) store.Commit {
	return store.Commit{Config: []byte("cfg " + msg), Snapshot: []byte("snap " + msg), CreatedBy: "test", Message: msg,
		Audit: store.AuditEntry{Actor: "test", Action: "test", Object: msg}}
}

func TestCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "control.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var published []int64
	w := versions.New(st, func(_ context.Context, v int64) error { published = append(published, v); return nil }, nil)

	v, err := w.Commit(ctx, func(_ context.Context, latest store.Version) (store.Commit, error) {
		if latest.Number != 0 {
			t.Errorf("the first plan saw version %d, want none", latest.Number)
		}
		return commit("first"), nil
	})
	if err != nil || v.Number != 1 {
		t.Fatalf("first commit: %v, %v", v, err)
	}

	// Another writer commits while a plan is made: the plan is made
	// again, from the newer version.
	var seen []int64
	v, err = w.Commit(ctx, func(ctx context.Context, latest store.Version) (store.Commit, error) {
		seen = append(seen, latest.Number)
		if len(seen) == 1 {
			if _, err := st.Commit(ctx, latest.Number, commit("other")); err != nil {
				t.Fatal(err)
			}
		}
		return commit("mine"), nil
	})
	if err != nil || v.Number != 3 || len(seen) != 2 || seen[0] != 1 || seen[1] != 2 {
		t.Errorf("a commit that lost a race: %v, %v, plans from %v; want version 3, planned from 1 then 2", v, err, seen)
	}
	if len(published) != 2 || published[0] != 1 || published[1] != 3 {
		t.Errorf("published %v, want 1 and 3 (the other writer publishes its own)", published)
	}

	// ErrSkip and a refusal commit nothing and come back as they are.
	refused := errors.New("refused")
	for _, want := range []error{versions.ErrSkip, refused} {
		if _, err := w.Commit(ctx, func(context.Context, store.Version) (store.Commit, error) { return store.Commit{}, want }); !errors.Is(err, want) {
			t.Errorf("Commit of a plan returning %v = %v", want, err)
		}
	}
	if latest, _ := st.Latest(ctx); latest.Number != 3 {
		t.Errorf("the newest version is %d after plans that committed nothing, want 3", latest.Number)
	}

	// A writer that always loses gives up.
	_, err = w.Commit(ctx, func(ctx context.Context, latest store.Version) (store.Commit, error) {
		if _, err := st.Commit(ctx, latest.Number, commit("again")); err != nil {
			t.Fatal(err)
		}
		return commit("never"), nil
	})
	if !errors.Is(err, versions.ErrBusy) {
		t.Errorf("Commit losing every race = %v, want ErrBusy", err)
	}
}
