package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
	"github.com/portico-gw/portico/internal/buildinfo"
)

// commandPaths returns the path of every command porticoctl has, the
// root's (empty) first, hidden ones left out.
func commandPaths(t *testing.T) [][]string {
	t.Helper()
	var paths [][]string
	var visit func(cmd *cobra.Command, path []string)
	visit = func(cmd *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range cmd.Commands() {
			if !sub.Hidden {
				visit(sub, append(slices.Clip(path), sub.Name()))
			}
		}
	}
	visit((&cli{stdout: io.Discard, stderr: io.Discard, getenv: os.Getenv}).root(), nil)
	if len(paths) < 30 {
		t.Fatalf("only %d commands: %q", len(paths), paths)
	}
	return paths
}

// TestHelpEveryCommand: help, -h, --help and -help print a command's help
// and exit 0 on every command, sending nothing (team put -h once sent a
// team named -h).
func TestHelpEveryCommand(t *testing.T) {
	t.Parallel()
	f, url := keyService(t)
	env := map[string]string{"PORTICO_SERVER": url, "PORTICO_KEYS_SERVER": url}
	root := (&cli{stdout: io.Discard, stderr: io.Discard, getenv: os.Getenv}).root()
	for _, path := range commandPaths(t) {
		cmd, _, err := root.Find(path)
		if err != nil {
			t.Fatalf("Find(%q): %v", path, err)
		}
		if cmd.Short == "" {
			t.Errorf("porticoctl %s has no Short", strings.Join(path, " "))
		}
		forms := [][]string{
			append(slices.Clip(path), "-h"),
			append(slices.Clip(path), "--help"),
			append(slices.Clip(path), "-help"),
			append([]string{"help"}, path...),
		}
		if cmd.HasSubCommands() {
			forms = append(forms, append(slices.Clip(path), "help"))
		}
		for _, args := range forms {
			code, out, errOut := ctl(t, env, args...)
			if code != 0 || errOut != "" || !strings.Contains(out, "Usage:\n  "+cmd.CommandPath()) {
				t.Errorf("porticoctl %s = %d %q %q, want 0 and the help of %s", strings.Join(args, " "), code, out, errOut, cmd.CommandPath())
			}
		}
	}
	if calls := f.requests(); len(calls) != 0 {
		t.Errorf("help called %v", calls)
	}
	// Help of a command that is not there is bad usage.
	for _, args := range [][]string{{"help", "frobnicate"}, {"help", "keys", "make"}, {"keys", "help", "make"}} {
		if code, out, errOut := ctl(t, env, args...); code != 2 || out != "" || !strings.Contains(errOut, `"make"`) && !strings.Contains(errOut, `"frobnicate"`) {
			t.Errorf("porticoctl %s = %d %q %q, want 2", strings.Join(args, " "), code, out, errOut)
		}
	}
}

// TestGlobalFlagsAnywhere: the global flags go before the command, after
// it, or between a group and its subcommand.
func TestGlobalFlagsAnywhere(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "keys.token")
	if err := os.WriteFile(tokenFile, []byte(keysToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--keys-server", "URL", "--keys-token-file", tokenFile, "-o", "json", "keys", "list"},
		{"keys", "list", "--keys-server", "URL", "--keys-token-file", tokenFile, "--output", "json"},
		{"keys", "--keys-server=URL", "list", "--keys-token-file=" + tokenFile, "-o=json"},
		{"keys", "list", "-ojson", "--keys-server", "URL", "--keys-token-file", tokenFile},
		{"-keys-server", "URL", "keys", "list", "-keys-token-file", tokenFile, "-output", "json"},
	} {
		f, url := keyService(t)
		args = slices.Clone(args)
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "URL", url)
		}
		code, out, errOut := ctl(t, map[string]string{"PORTICO_SERVER": "http://127.0.0.1:1"}, args...)
		var js map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &js) != nil {
			t.Errorf("porticoctl %s = %d %q %q, want 0 and JSON", strings.Join(args, " "), code, out, errOut)
			continue
		}
		only[*keysv1.ListKeysRequest](t, f, keysv1connect.KeyServiceListKeysProcedure)
	}
}

// TestVersion: --version and version print the build, as
// internal/buildinfo reads it.
func TestVersion(t *testing.T) {
	t.Parallel()
	want := "porticoctl " + buildinfo.Read().String() + "\n"
	for _, args := range [][]string{{"--version"}, {"-v"}, {"-version"}, {"version"}} {
		if code, out, errOut := ctl(t, nil, args...); code != 0 || out != want || errOut != "" {
			t.Errorf("porticoctl %s = %d %q %q, want 0 and %q", args[0], code, out, errOut, want)
		}
	}
	if code, _, _ := ctl(t, nil, "version", "extra"); code != 2 {
		t.Errorf("porticoctl version extra = %d, want 2", code)
	}
}

// TestCompletion: cobra's completion scripts, and the completions they
// ask porticoctl for.
func TestCompletion(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{
		"bash":       "__start_porticoctl",
		"zsh":        "#compdef porticoctl",
		"fish":       "complete -c porticoctl",
		"powershell": "Register-ArgumentCompleter",
	} {
		if code, out, errOut := ctl(t, nil, "completion", shell); code != 0 || !strings.Contains(out, want) || errOut != "" {
			t.Errorf("porticoctl completion %s = %d, %d bytes %q, want 0 and a script with %q", shell, code, len(out), errOut, want)
		}
	}
	if code, _, _ := ctl(t, nil, "completion", "tcsh"); code != 2 {
		t.Errorf("porticoctl completion tcsh = %d, want 2", code)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"keys", ""}, []string{"create", "rotate", "revoke", "list", "get"}},
		{[]string{"-o", ""}, []string{"text", "json", "yaml"}},
		{[]string{"keys", "create", "--env", ""}, []string{"live", "test"}},
		{[]string{"keys", "create", "--pri"}, []string{"--priority"}},
		{[]string{"help", "rollout", ""}, []string{"status", "pause", "resume", "abort"}},
	} {
		code, out, _ := ctl(t, nil, append([]string{cobra.ShellCompNoDescRequestCmd}, tc.args...)...)
		got := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(got) == 0 || !slices.Equal(got[:len(got)-1], tc.want) {
			t.Errorf("completions of %q = %d %q, want %q", tc.args, code, out, tc.want)
		}
	}
}
