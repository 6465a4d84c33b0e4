package jwt_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/portico-gw/portico/gateway/auth/jwt"
)

func TestMergeJWKS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, base, published string
		want                  []string // kids in order; "" for a key without one
		wantErr               bool
	}{
		{"no base", "", kidSet("a"), []string{"a"}, false},
		{"disjoint", kidSet("a"), kidSet("b"), []string{"b", "a"}, false},
		{"same kid", kidSet("a", "b"), kidSet("b", "c"), []string{"b", "c", "a"}, false},
		{"base key without kid", `{"keys":[{"kty":"EC"}]}`, kidSet("a"), []string{"a", ""}, false},
		{"nothing published", kidSet("a"), `{"keys":[]}`, []string{"a"}, false},
		{"malformed base", `{"keys":[`, kidSet("a"), nil, true},
		{"malformed published", kidSet("a"), `{"keys":"nope"}`, nil, true},
		{"published not JSON", kidSet("a"), `nope`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := jwt.MergeJWKS(tc.base, tc.published)
			if tc.wantErr {
				if err == nil {
					t.Errorf("MergeJWKS(%q, %q) = %s, want an error", tc.base, tc.published, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("MergeJWKS(%q, %q): %v", tc.base, tc.published, err)
			}
			var set struct {
				Keys []map[string]string `json:"keys"`
			}
			if err := json.Unmarshal([]byte(got), &set); err != nil {
				t.Fatalf("MergeJWKS(%q, %q) = %s, not a key set: %v", tc.base, tc.published, got, err)
			}
			var kids []string
			for _, k := range set.Keys {
				kids = append(kids, k["kid"])
			}
			if diff := cmp.Diff(tc.want, kids); diff != "" {
				t.Errorf("MergeJWKS(%q, %q) kids (-want +got):\n%s", tc.base, tc.published, diff)
			}
		})
	}
	// The published key replaces the base key of its kid.
	base := `{"keys":[{"kty":"EC","kid":"a","x":"old"},{"kty":"EC","kid":"b","x":"kept"}]}`
	got, err := jwt.MergeJWKS(base, `{"keys":[{"kty":"EC","kid":"a","x":"new"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "old") || !strings.Contains(got, `"new"`) || !strings.Contains(got, `"kept"`) {
		t.Errorf("MergeJWKS = %s, want a with x new, and b kept", got)
	}
}

// kidSet is a key set of EC keys with kids.
func kidSet(kids ...string) string {
	var keys []string
	for _, k := range kids {
		keys = append(keys, `{"kty":"EC","kid":"`+k+`"}`)
	}
	return `{"keys":[` + strings.Join(keys, ",") + `]}`
}
