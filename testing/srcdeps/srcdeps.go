// Package srcdeps lets a test that works through a subprocess (go build,
// go list, buf) depend on the sources that subprocess reads. go test caches
// a passing result keyed on what the test binary itself opened; a change
// only the subprocess would see would otherwise replay a stale pass.
package srcdeps

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Touch reads every file under root whose name ends in one of exts
// (skipping .git and testdata), so go test records them as inputs.
func Touch(t testing.TB, root string, exts ...string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if slices.Contains(exts, filepath.Ext(path)) || slices.Contains(exts, d.Name()) {
			_, err = os.ReadFile(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
