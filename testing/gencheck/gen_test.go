// Package gencheck_test keeps the generated code and the vendored .proto
// sources honest: regenerating gen/ must change nothing, buf lint must pass,
// and proto/third_party must match the descriptors the binary links.
package gencheck_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/portico-gw/portico/testing/gobuild"
	"github.com/portico-gw/portico/testing/srcdeps"
)

func buf(t *testing.T, root string, args ...string) {
	t.Helper()
	out, err := gobuild.Buf(root, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("buf %v: %v\n%s", args, err, out)
	}
}

func TestBufLint(t *testing.T) {
	root := repoRoot(t)
	srcdeps.Touch(t, root, ".proto", "buf.yaml")
	buf(t, root, "lint")
}

// TestGeneratedCodeIsCurrent regenerates gen/ into a temporary directory and
// fails if any file differs from, is missing from, or is extra to the
// committed tree.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	root := repoRoot(t)
	// Read the inputs here too: go test's cache cannot see what the buf
	// subprocess reads.
	srcdeps.Touch(t, root, ".proto", "buf.yaml", "buf.gen.yaml", "go.mod", "go.sum")
	out := t.TempDir()
	buf(t, root, "generate", "-o", out)

	fresh := readTree(t, filepath.Join(out, "gen"))
	committed := readTree(t, filepath.Join(root, "gen"))
	for path, want := range fresh {
		got, ok := committed[path]
		switch {
		case !ok:
			t.Errorf("gen/%s is missing; run: go tool -modfile=tools/go.mod buf generate", path)
		case !bytes.Equal(got, want):
			t.Errorf("gen/%s is stale; run: go tool -modfile=tools/go.mod buf generate", path)
		}
	}
	for path := range committed {
		if _, ok := fresh[path]; !ok {
			t.Errorf("gen/%s is not generated from proto/; remove it or regenerate", path)
		}
	}
}

func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestGRPCGatewayProxyIsCurrent regenerates the test-only grpc-gateway
// proxy of the demo service and fails if it differs from the committed one.
func TestGRPCGatewayProxyIsCurrent(t *testing.T) {
	root := repoRoot(t)
	srcdeps.Touch(t, root, ".proto", "buf.yaml", "testing/grpcgw/buf.gen.yaml", "go.mod", "go.sum")
	out := t.TempDir()
	buf(t, root, "generate", "--template", "testing/grpcgw/buf.gen.yaml", "--path", "proto/portico/demo", "-o", out)
	const dir = "testing/grpcgw/portico"
	fresh := readTree(t, filepath.Join(out, dir))
	committed := readTree(t, filepath.Join(root, dir))
	if len(fresh) == 0 {
		t.Fatal("nothing generated")
	}
	for path, want := range fresh {
		if got, ok := committed[path]; !ok || !bytes.Equal(got, want) {
			t.Errorf("%s/%s is missing or stale; run: go tool -modfile=tools/go.mod buf generate --template testing/grpcgw/buf.gen.yaml --path proto/portico/demo", dir, path)
		}
	}
	for path := range committed {
		if _, ok := fresh[path]; !ok {
			t.Errorf("%s/%s is not generated; remove it", dir, path)
		}
	}
}
