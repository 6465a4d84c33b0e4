package apikey_test

import (
	"go/build"
	"slices"
	"testing"
)

// TestImports keeps the package pure, as the key service imports it too:
// standard library only, and nothing that does I/O or logs.
func TestImports(t *testing.T) {
	t.Parallel()
	allowed := []string{"crypto/sha256", "errors", "fmt", "hash/crc32", "io", "strconv"}
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if !slices.Contains(allowed, imp) {
			t.Errorf("gateway/apikey imports %q; allowed are %q", imp, allowed)
		}
	}
}
