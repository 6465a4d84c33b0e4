package main_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portico-gw/portico/testing/gobuild"
	"github.com/portico-gw/portico/testing/logbuf"
)

// TestREADME runs the README's shell blocks, in order, as a newcomer
// would paste them: the first command (`go run ./cmd/portico dev`) in the
// background, the blocks that call it in one shell with the banner's
// export line, then `portico dev` stopped and the control plane block in a
// fresh directory. It fails if a command fails or a `curl -i` answers
// another status than the one its comment gives (`# 401 ...`; without
// one, 2xx).
//
// The test changes only what must differ on a test machine: ports (free
// ones, where the README says 8080, 8443, 7000 and 9000), HOME (a temp
// directory, for dev's data), and `go run`, `go build` and `go tool ...
// buf` of this module, which run the binaries built once for the test.
func TestREADME(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("curl is not installed (testing/test.sh installs it)")
		}
		t.Skip("curl is not installed")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := shellBlocks(string(readme))
	if len(blocks) < 3 || blocks[0] != "go run ./cmd/portico dev" || blocks[1] != "./testing/test.sh" {
		t.Fatalf("the README does not start with its two commands (go run ./cmd/portico dev, ./testing/test.sh): %q", blocks[:min(2, len(blocks))])
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil || !strings.Contains(string(ci), "exec ./testing/test.sh") {
		t.Errorf(".ci/run does not run the README's test command: %v\n%s", err, ci)
	}

	bin := readmeBinaries(t)
	ports := map[string]string{}
	for _, p := range []string{"8080", "8443", "7000", "9000"} {
		_, ports[p], _ = net.SplitHostPort(freeAddr(t))
	}
	home := t.TempDir()
	rewrites := []struct{ from, to string }{
		{"go run ./cmd/portico dev", "portico dev"},
		{"go run ./cmd/portico ", "portico "},
		{"go run ./cmd/porticoctl ", "porticoctl "},
		{"go tool -modfile=tools/go.mod buf ", "buf "},
		{"~/.cache/", home + "/.cache/"},
		{"go build -o .portico/bin/ ./cmd/portico ./cmd/porticoctl ./docs/examples/backend",
			"mkdir -p .portico/bin && cp " + bin + "/portico " + bin + "/porticoctl " + bin + "/backend .portico/bin/"},
	}
	rewrite := func(s string) string {
		for _, r := range rewrites {
			s = strings.ReplaceAll(s, r.from, r.to)
		}
		for from, to := range ports {
			s = regexp.MustCompile(`\b(127\.0\.0\.1|localhost)((/32)?):`+from+`\b`).ReplaceAllString(s, "${1}${2}:"+to)
		}
		return s
	}
	env := append(os.Environ(), "HOME="+home, "XDG_CACHE_HOME=", "PATH="+bin+":"+os.Getenv("PATH"), "PORTICO_SERVER=", "PORTICO_TOKEN=")

	// The first command, in the background.
	// Its ports are its defaults in the README: the test gives them.
	dev := exec.Command("bash", "-c", "exec "+rewrite(blocks[0])+" -addr 127.0.0.1:"+ports["8080"]+" -tls-addr 127.0.0.1:"+ports["8443"]+
		" -control-addr 127.0.0.1:"+ports["7000"])
	dev.Env, dev.Dir = env, t.TempDir()
	var devOut logbuf.Buffer
	dev.Stdout, dev.Stderr = &devOut, &devOut
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	devDone := make(chan error, 1)
	go func() { devDone <- dev.Wait() }()
	stopDev := func() {
		_ = dev.Process.Signal(syscall.SIGTERM)
		select {
		case <-devDone:
		case <-time.After(30 * time.Second):
			_ = dev.Process.Kill()
			<-devDone
		}
	}
	t.Cleanup(func() {
		if dev.ProcessState == nil {
			stopDev()
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	var export string
	for export == "" {
		if m := regexp.MustCompile(`(?m)^\s*(export KEY=\S+ KEY_ID=\S+ TOKEN=\S+)\s*$`).FindStringSubmatch(devOut.String()); m != nil && strings.Contains(devOut.String(), "Ctrl-C drains") {
			export = m[1]
			break
		}
		select {
		case err := <-devDone:
			t.Fatalf("portico dev exited (%v):\n%s", err, devOut.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("portico dev printed no export line within 60 s:\n%s", devOut.String())
		}
	}

	// Every block up to the control plane's runs against dev, in one
	// shell, as pasted one after the other.
	var devBlocks, controlBlocks []string
	for _, b := range blocks[2:] {
		if strings.Contains(b, "portico control") {
			controlBlocks = append(controlBlocks, b)
		} else if len(controlBlocks) == 0 {
			devBlocks = append(devBlocks, b)
		} else {
			t.Fatalf("a block after the control plane's: %q; teach TestREADME where it runs", b)
		}
	}
	runBlocks(t, env, t.TempDir(), export, devBlocks, rewrite)
	stopDev()
	checkRaces(t, "portico dev", devOut.String())

	// The control plane's block, in a directory of its own: it makes
	// .portico/ there, and applies the example team's directory, copied
	// with the backend's port.
	dir := t.TempDir()
	err = filepath.WalkDir("../../docs/examples/teams", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel("../..", path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), []byte(rewrite(string(b))), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	runBlocks(t, env, dir, "", controlBlocks, rewrite)
	if _, err := os.Stat(filepath.Join(dir, ".portico", "platform.token")); err != nil {
		t.Errorf("the control plane block keeps its files under .portico/: %v", err)
	}
	gitignore, err := os.ReadFile("../../.gitignore")
	if err != nil || !regexp.MustCompile(`(?m)^/\.portico/$`).Match(gitignore) {
		t.Errorf(".gitignore does not cover .portico/: %v", err)
	}
}

// shellBlocks returns the README's ```sh blocks, in order.
func shellBlocks(md string) []string {
	var out []string
	var cur []string
	in := false
	for _, l := range strings.Split(md, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```sh":
			in, cur = true, nil
		case in && strings.TrimSpace(l) == "```":
			in = false
			out = append(out, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, l)
		}
	}
	return out
}

// runBlocks runs blocks in one bash in dir, after export (if any), and
// checks each block's exit and its curl -i statuses.
func runBlocks(t *testing.T, env []string, dir, export string, blocks []string, rewrite func(string) string) {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -euo pipefail\n" + export + "\n")
	for i, b := range blocks {
		fmt.Fprintf(&script, "echo '@@block %d'\n%s\necho '@@done %d'\n", i, rewrite(b), i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Env, cmd.Dir = env, dir
	// Its own process group: what a block starts in the background dies
	// with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A block that fails leaves what it started in the background holding
	// the output: do not wait for them.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	checkRaces(t, "the README blocks", string(out))
	outs := map[int]string{}
	for i := range blocks {
		s := string(out)
		start := strings.Index(s, fmt.Sprintf("@@block %d\n", i))
		end := strings.Index(s, fmt.Sprintf("@@done %d\n", i))
		if start < 0 {
			break
		}
		if end < 0 {
			t.Fatalf("README block %d failed (%v):\n%s\n--- its output:\n%s", i, err, blocks[i], s[start:])
		}
		outs[i] = s[start:end]
	}
	if err != nil {
		t.Fatalf("the README blocks failed: %v\n%s", err, out)
	}
	for i, b := range blocks {
		want := wantStatuses(b)
		got := regexp.MustCompile(`(?m)^HTTP/[0-9.]+ ([0-9]{3})`).FindAllStringSubmatch(outs[i], -1)
		var codes []string
		for _, g := range got {
			codes = append(codes, g[1])
		}
		ok := len(codes) == len(want)
		for j := 0; ok && j < len(want); j++ {
			ok = want[j] == codes[j] || want[j] == "2xx" && strings.HasPrefix(codes[j], "2")
		}
		if !ok {
			t.Errorf("README block %d answered %v, want %v:\n%s\n--- its output:\n%s", i, codes, want, b, outs[i])
		}
	}
}

// wantStatuses is what each `curl -i` of a block must answer: the status
// its comment starts with, or 2xx.
func wantStatuses(block string) []string {
	var want []string
	sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(block, "\\\n", " ")))
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(strings.TrimSpace(l), "curl -i ") {
			continue
		}
		if m := regexp.MustCompile(`#\s*([0-9]{3})\b`).FindStringSubmatch(l); m != nil {
			want = append(want, m[1])
		} else {
			want = append(want, "2xx")
		}
	}
	return want
}

// readmeBinaries builds what the README runs: portico (the binary the
// other tests of this package use), porticoctl, the example backend and
// buf (pinned in tools/go.mod).
func readmeBinaries(t *testing.T) string {
	t.Helper()
	dir := filepath.Dir(portico(t))
	for name, pkg := range map[string]string{"porticoctl": "./cmd/porticoctl", "backend": "./docs/examples/backend"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			continue
		}
		if out, err := gobuild.Command(context.Background(), "../..", "-o", filepath.Join(dir, name), pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "buf")); err != nil {
		if err := gobuild.BufBinary("../..", filepath.Join(dir, "buf")); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
