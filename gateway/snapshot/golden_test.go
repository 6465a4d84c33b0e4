package snapshot_test

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/configfile"
	"github.com/portico-gw/portico/gateway/snapshot"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.golden from what Compile does now")

// TestGolden compiles each testdata/golden/*.yaml and compares what came
// out, a summary of the compiled snapshot or its list of problems, with
// the file's .golden. After a change the compiler should make, review
// the diff of `go test ./gateway/snapshot -run TestGolden -update`.
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
			cfg, err := configfile.Parse(data, configfile.YAML)
			if err != nil {
				t.Fatal(err)
			}
			got := summary(snapshot.Compile(cfg))
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

// summary is what a reviewer needs to see of a compiled snapshot: its
// digest, every route (derived ones too) with what serving reads of it,
// and the clusters; or, refused, every problem with its path.
func summary(s *snapshot.Snapshot, err error) string {
	var b strings.Builder
	var se *snapshot.Error
	if errors.As(err, &se) {
		b.WriteString("refused:\n")
		for _, v := range se.Violations {
			fmt.Fprintf(&b, "  %s\n", v)
		}
		return b.String()
	}
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	fmt.Fprintf(&b, "version %s sha256 %s\n", s.Version, s.SHA256)
	for _, c := range s.ClusterNames {
		fmt.Fprintf(&b, "cluster %s\n", c)
	}
	for _, r := range s.Routes {
		fmt.Fprintf(&b, "route %s team=%s path=%s cluster=%s timeout=%s max_request_bytes=%d priority=%s\n",
			r.ID, r.Team, r.Path, r.Cluster, r.Timeout, r.MaxRequestBytes, r.Priority)
		a := r.Auth
		if a.Public {
			b.WriteString("  auth public\n")
		} else {
			fmt.Fprintf(&b, "  auth scopes=%v method_scopes=%v product=%q query_key=%q issuers=%v\n", a.Scopes, a.MethodScopes, a.Product, a.QueryKey, a.Issuers)
		}
		for _, l := range r.RateLimits {
			fmt.Fprintf(&b, "  limit %s %s %g/s burst %g\n", l.ID, l.Scope, l.Rate, l.Burst)
		}
		if r.RPC != nil {
			fmt.Fprintf(&b, "  rpc %s rest=%v\n", r.RPC.Path, r.RPC.REST())
		}
		if r.Rewrite != nil {
			b.WriteString("  rewrites the path\n")
		}
		if r.RequestHeaders != nil || r.ResponseHeaders != nil {
			fmt.Fprintf(&b, "  header edits: request %v, response %v\n", r.RequestHeaders != nil, r.ResponseHeaders != nil)
		}
		if p := r.Probe; p != nil {
			fmt.Fprintf(&b, "  probe %s %s%s", p.Method, p.Host, p.Target())
			for _, k := range slices.Sorted(maps.Keys(p.Header)) {
				fmt.Fprintf(&b, " %s=%q", k, p.Header[k])
			}
			if p.ContentType != "" {
				fmt.Fprintf(&b, " content-type=%q body=%dB", p.ContentType, len(p.Body))
			}
			fmt.Fprintf(&b, " grpc=%v expect=%s explicit=%v pool=%q\n", p.GRPC, p.Expect, p.Explicit, p.Pool)
		} else {
			b.WriteString("  no probe\n")
		}
	}
	return b.String()
}
