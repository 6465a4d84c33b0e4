package compile_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/portico-gw/portico/control/compile"
	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.golden from what Compile does now")

// TestGolden compiles each testdata/golden/*.yaml (an admin Config: teams,
// their objects, the platform's) and compares what came out, the compiled
// routes and clusters with their teams or every problem located in a
// team's config, with the file's .golden. After a change the compiler
// should make, review the diff of `go test ./control/compile -run
// TestGolden -update`.
func TestGolden(t *testing.T) {
	t.Parallel()
	inputs, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		t.Run(strings.TrimSuffix(filepath.Base(in), ".yaml"), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			js, err := yaml.YAMLToJSON(data)
			if err != nil {
				t.Fatal(err)
			}
			cfg := &adminv1.Config{}
			if err := protojson.Unmarshal(js, cfg); err != nil {
				t.Fatal(err)
			}
			got := summary(compile.Compile(cfg, "golden"))
			golden := strings.TrimSuffix(in, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("Compile(%s) changed (run with -update and review the diff):\n--- got\n%s--- want\n%s", in, got, want)
			}
		})
	}
}

func summary(r *compile.Result, err error) string {
	var b strings.Builder
	var ce *compile.Error
	if errors.As(err, &ce) {
		b.WriteString("refused:\n")
		for _, v := range ce.Violations {
			fmt.Fprintf(&b, "  %s\n", v)
		}
		return b.String()
	}
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	fmt.Fprintf(&b, "sha256 %s\n", r.SHA256)
	for _, c := range r.Snapshot.GetClusters() {
		var eps []string
		for _, e := range c.GetEndpoints() {
			ep := e.GetAddress()
			if len(e.GetNetworks()) > 0 {
				ep += fmt.Sprintf(" (networks %v)", e.GetNetworks())
			}
			eps = append(eps, ep)
		}
		fmt.Fprintf(&b, "cluster %s %s: %s\n", c.GetName(), c.GetProtocol(), strings.Join(eps, ", "))
	}
	for _, rt := range r.Compiled.Routes {
		fmt.Fprintf(&b, "route %s team=%s path=%s cluster=%s public=%v product=%q\n", rt.ID, rt.Team, rt.Path, rt.Cluster, rt.Auth.Public, rt.Auth.Product)
	}
	return b.String()
}
