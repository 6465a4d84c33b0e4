package router_test

import (
	"go/build"
	"slices"
	"testing"
)

// TestImports keeps the package pure: standard library only, and nothing that does
// I/O, logs, keeps time or starts goroutines. net/textproto is there for
// CanonicalMIMEHeaderKey alone.
func TestImports(t *testing.T) {
	t.Parallel()
	allowed := []string{"fmt", "net/textproto", "regexp", "sort", "strconv", "strings"}
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if !slices.Contains(allowed, imp) {
			t.Errorf("gateway/router imports %q; allowed are %q", imp, allowed)
		}
	}
}
