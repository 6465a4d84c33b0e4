package deptest_test

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoRaceFilesHoldOnlyConstants: testing/test.sh vets, staticchecks
// and tests the module as the race detector builds it, once, so a file
// built only without it (//go:build !race) is never checked. Such files
// may hold constants and nothing else, which nothing there can get wrong.
func TestNoRaceFilesHoldOnlyConstants(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "gen" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if !onlyWithoutRace(f) {
			return nil
		}
		seen++
		rel, _ := filepath.Rel(root, path)
		for _, decl := range f.Decls {
			if g, ok := decl.(*ast.GenDecl); !ok || g.Tok != token.CONST {
				t.Errorf("%s is built only without the race detector, which the suite never builds, and holds more than constants", rel)
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen == 0 {
		t.Fatal("no file is built only without the race detector: the walk found nothing to check")
	}
}

// onlyWithoutRace reports whether f's build constraint excludes the race
// build.
func onlyWithoutRace(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			expr, err := constraint.Parse(c.Text)
			if err != nil {
				return false
			}
			return !expr.Eval(func(tag string) bool { return tag == "race" || tag == "linux" || tag == "amd64" || tag == "gc" }) &&
				expr.Eval(func(tag string) bool { return tag == "linux" || tag == "amd64" || tag == "gc" })
		}
	}
	return false
}
