// Package gobuild builds the module's binaries and tools for tests and
// the load harness, which build them in a subprocess.
//
// A binary a test builds is built the way the test binary itself was:
// with the race detector when the test runs under it. The subprocess then
// reads the packages go test compiled from the build cache instead of
// compiling every dependency a second time without it (on a fresh
// machine that is most of the suite's build), and reports the races it
// runs into (cmd/portico's tests read its output for them). Tools of
// tools/go.mod (buf) are built without
// it: nothing else compiles their packages, and a race-built buf would be
// several times slower.
package gobuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Race reports whether this binary was built with the race detector.
const Race = race

// Command returns `go build args...`, to be run in dir, with -race
// first when this binary was built with the race detector.
func Command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	if Race {
		args = append([]string{"-race"}, args...)
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"build"}, args...)...)
	cmd.Dir = dir
	return cmd
}

// BufEnv names a buf binary of the version tools/go.mod pins, which
// testing/test.sh fetches once so that no test builds buf from source.
const BufEnv = "PORTICO_TEST_BUF"

// Buf returns the buf command with args, to be run in root (the module's
// root): the binary BufEnv names, or `go tool -modfile=tools/go.mod buf`.
// The protoc plugins buf.gen.yaml runs (`go tool protoc-gen-go`, tools of
// the module's go.mod) are built as this binary was, with the race
// detector under it, so that they share go test's compiled protobuf.
func Buf(root string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if bin := os.Getenv(BufEnv); bin != "" {
		// go test's cache keys a pass on the files the test opened or
		// looked at; the binary is one.
		_, _ = os.Stat(bin)
		cmd = exec.Command(bin, args...)
		if Race {
			cmd.Env = append(os.Environ(), "GOFLAGS="+os.Getenv("GOFLAGS")+" -race")
		}
	} else {
		// buf is built by this go command: not with the race detector,
		// and so neither are the plugins.
		cmd = tool(append([]string{"tool", "-modfile=tools/go.mod", "buf"}, args...)...)
	}
	cmd.Dir = root
	return cmd
}

// BufBinary puts a buf binary at out: a copy of the one BufEnv names, or
// one built from tools/go.mod in root.
func BufBinary(root, out string) error {
	if bin := os.Getenv(BufEnv); bin != "" {
		b, err := os.ReadFile(bin)
		if err != nil {
			return fmt.Errorf("%s: %w", BufEnv, err)
		}
		return os.WriteFile(out, b, 0o755)
	}
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	cmd := tool("build", "-modfile=tools/go.mod", "-o", out, "github.com/bufbuild/buf/cmd/buf")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build buf: %v\n%s", err, b)
	}
	return nil
}

// tool is the go command for tools/go.mod, without the race detector
// whatever GOFLAGS says.
func tool(args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	var keep []string
	for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
		if f != "-race" && f != "-race=true" {
			keep = append(keep, f)
		}
	}
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.Join(keep, " "))
	return cmd
}
