// Package deptest keeps the architecture's direction of imports true
// (STYLE.md, "Direction of imports"): it lists every package of the module
// with `go list` and fails on an import the layers forbid.
package deptest_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/portico-gw/portico/testing/srcdeps"
)

const module = "github.com/portico-gw/portico"

type pkg struct {
	ImportPath string
	Imports    []string // direct, non-test
	Deps       []string // transitive, non-test
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	srcdeps.Touch(t, root, ".go", "go.mod")
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// under reports whether path is dir or inside it (dir relative to the module).
func under(path, dir string) bool {
	full := module + "/" + dir
	return path == full || strings.HasPrefix(path, full+"/")
}

func ours(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

// pure lists the data-plane packages that control/, keysvc/ and quota/ may
// import, and that must do no I/O. (gateway/internal/cleanpath they reach
// only through gateway/snapshot, which checks route probes' paths with the
// node's own normalisation.)
var pure = []string{"gateway/snapshot", "gateway/router", "gateway/apikey", "gateway/openapi", "gateway/routestats", "gateway/keysnapshot", "gateway/denyentry", "gateway/laneentry", "gateway/internal/cleanpath"}

func isPure(path string) bool {
	return slices.ContainsFunc(pure, func(d string) bool { return under(path, d) })
}

// gatewayInternal are the packages of the top-level internal/ that the
// data plane may import: the rest is the services' plumbing.
var gatewayInternal = []string{"internal/svcauth", "internal/backoff"}

// planned are the paths the rules name before they exist.
// TestRulesNameRealPaths fails once one exists, so that it moves to the
// checked paths.
var planned []string

// TestRulesNameRealPaths: every path a rule names is a package of the
// module, or a directory of packages; a rule about a path that was
// renamed or removed would pass for ever, checking nothing.
func TestRulesNameRealPaths(t *testing.T) {
	t.Parallel()
	pkgs := listPackages(t)
	exists := func(dir string) bool {
		return slices.ContainsFunc(pkgs, func(p pkg) bool { return under(p.ImportPath, dir) })
	}
	named := append([]string{"gen", "gateway", "control", "keysvc", "quota", "quota/consume", "gateway/usage/kafka", "gateway/telemetry/metrics", "internal", "testing", "cmd"}, pure...)
	named = append(named, gatewayInternal...)
	for _, dir := range named {
		if !exists(dir) {
			t.Errorf("a rule names %s, which holds no package of the module", dir)
		}
	}
	for _, dir := range planned {
		if exists(dir) {
			t.Errorf("%s exists now: move it from planned to the paths checked", dir)
		}
	}
}

// ioPackages are the standard packages a pure package may not import
// directly. (Transitively they are unavoidable: protovalidate's CEL
// library imports net for its IP functions.)
var ioPackages = []string{"net", "net/http", "os", "os/exec", "os/signal", "syscall", "database/sql", "io/ioutil", "log", "log/slog"}

func TestImportDirection(t *testing.T) {
	t.Parallel()
	for _, p := range listPackages(t) {
		deps := p.Deps
		for _, d := range deps {
			if !ours(d) {
				continue
			}
			switch {
			case under(p.ImportPath, "gen") && !under(d, "gen"):
				t.Errorf("%s imports %s: gen/ imports nothing of ours", p.ImportPath, d)
			case under(p.ImportPath, "gateway") && (under(d, "control") || under(d, "keysvc") || under(d, "quota")):
				t.Errorf("%s imports %s: the data plane never imports the control plane, key service or quota service", p.ImportPath, d)
			case (under(p.ImportPath, "control") || under(p.ImportPath, "keysvc") || under(p.ImportPath, "quota")) && under(d, "gateway") && !isPure(d):
				t.Errorf("%s imports %s: only %v of the data plane may be imported outside it", p.ImportPath, d, pure)
			case (under(p.ImportPath, "keysvc") || under(p.ImportPath, "quota")) && under(d, "control"):
				t.Errorf("%s imports %s: keysvc and quota import neither plane's internals", p.ImportPath, d)
			case under(p.ImportPath, "control") && (under(d, "keysvc") || under(d, "quota")):
				t.Errorf("%s imports %s: the control plane talks to the key service and the quota service only through their APIs", p.ImportPath, d)
			case under(p.ImportPath, "keysvc") && under(d, "quota"), under(p.ImportPath, "quota") && under(d, "keysvc"):
				t.Errorf("%s imports %s: the key service and the quota service import neither of each other", p.ImportPath, d)
			case under(p.ImportPath, "internal") && !under(d, "internal") && !under(d, "gen") && !isPure(d):
				t.Errorf("%s imports %s: internal/ imports only internal/, gen/ and %v", p.ImportPath, d, pure)
			case under(p.ImportPath, "gateway") && under(d, "internal") && !slices.ContainsFunc(gatewayInternal, func(g string) bool { return under(d, g) }):
				t.Errorf("%s imports %s: of internal/, the data plane imports only %v", p.ImportPath, d, gatewayInternal)
			case under(d, "testing") && !under(p.ImportPath, "testing"):
				t.Errorf("%s imports %s: testing/ is for tests and benchmarks only", p.ImportPath, d)
			case isPure(p.ImportPath) && ours(d) && !isPure(d) && !under(d, "gen"):
				t.Errorf("%s imports %s: a pure package imports only pure packages and gen/", p.ImportPath, d)
			}
		}
		if isPure(p.ImportPath) {
			for _, imp := range p.Imports {
				if slices.Contains(ioPackages, imp) {
					t.Errorf("%s imports %s: pure packages do no I/O", p.ImportPath, imp)
				}
			}
		}
	}
}

// leaves are, for each heavy dependency, the one package of each
// top-level directory that may import it: it wraps it, and the rest sees
// a small interface (STYLE.md, "Each heavy dependency").
var leaves = map[string]map[string]string{
	"github.com/segmentio/kafka-go":       {"gateway": "gateway/usage/kafka", "quota": "quota/consume"},
	"github.com/prometheus/client_golang": {"gateway": "gateway/telemetry/metrics"},
}

// TestHeavyDependencyLeaves: under each directory of leaves, only its
// leaf imports the dependency.
func TestHeavyDependencyLeaves(t *testing.T) {
	t.Parallel()
	for _, p := range listPackages(t) {
		for dep, dirs := range leaves {
			for dir, leaf := range dirs {
				if !under(p.ImportPath, dir) || p.ImportPath == module+"/"+leaf {
					continue
				}
				for _, imp := range p.Imports {
					if imp == dep || strings.HasPrefix(imp, dep+"/") {
						t.Errorf("%s imports %s: under %s/ only %s does", p.ImportPath, imp, dir, leaf)
					}
				}
			}
		}
	}
}
