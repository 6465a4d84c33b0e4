package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
	"github.com/portico-gw/portico/gen/portico/quota/v1/quotav1connect"
	"github.com/portico-gw/portico/internal/buildinfo"
	"github.com/portico-gw/portico/internal/svcauth"
)

// callTimeout bounds a control plane call.
const callTimeout = 2 * time.Minute

// keysCallTimeout bounds a key service call: one that waits for every
// node (CreateKey, RotateKey) may wait up to maxWait before it answers,
// and the answer (or the nodes that lack the key) must not be cut off.
const keysCallTimeout = callTimeout + maxWait

func init() {
	// The help lists commands in the order a team meets them (apply
	// before versions before rollback), not alphabetically.
	cobra.EnableCommandSorting = false
}

// cli is one invocation: its global flags, and the clients they make.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string

	server, tokenFile           string
	keysServer, keysTokenFile   string
	quotaServer, quotaTokenFile string
	output                      format

	// Set by dial, before a command that calls a server runs.
	admin  adminv1connect.AdminServiceClient
	keys   keysv1connect.KeyServiceClient
	tokens keysv1connect.TokenServiceClient
	quota  quotav1connect.QuotaServiceClient
	// quotaToken is the token quota calls carry; empty, none.
	quotaToken string
}

// run runs porticoctl with args (without the program's name), printing
// to stdout and stderr and reading the environment through getenv, and
// returns its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	c := &cli{stdout: stdout, stderr: stderr, getenv: getenv, output: formatText}
	root := c.root()
	// Never nil: cobra reads os.Args when it is.
	root.SetArgs(append([]string{}, legacyFlags(root, args)...))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	var u *usageError
	switch {
	case errors.As(err, &u) && u.msg == "":
		fmt.Fprint(stderr, cmd.UsageString())
	case code == exitUsage:
		report(stderr, cmd.CommandPath(), err)
		fmt.Fprintf(stderr, "See '%s --help'.\n", cmd.CommandPath())
	default:
		report(stderr, cmd.CommandPath(), err)
	}
	return code
}

// root is porticoctl's command tree, every command with its help flag.
func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "porticoctl",
		Short: "The admin CLI of Portico",
		Long: `porticoctl is the admin CLI of Portico, a client of the control plane's admin
API, of the key service and of the quota service. A team keeps its routes,
clusters and services in a directory and applies it; platform admins declare
teams, the platform's objects and steer rollouts; API keys and the
access-token deny list are the key service's; usage totals and the billing
export are the quota service's.

The control plane is --server (default $PORTICO_SERVER, else
http://localhost:7000), with the admin token in --token-file (default
$PORTICO_TOKEN). The key service is --keys-server (default
$PORTICO_KEYS_SERVER, else the control plane's address: portico dev serves
both on one), with --keys-token-file (default $PORTICO_KEYS_TOKEN, else the
admin token). The quota service is --quota-server (default
$PORTICO_QUOTA_SERVER, else the control plane's address, as portico dev
serves it), with --quota-token-file (default $PORTICO_QUOTA_TOKEN, else the
admin token). Global flags go before or after the command.

Exit status: 0 done, 1 refused or failed (problems listed with their field
paths), 2 bad usage; a team's CI can gate on it. -o json and -o yaml print
the answers as JSON or YAML, for scripts.

Flags are spelled --name VALUE or --name=VALUE (-f, -m and -o are short for
--file, --message and --output); the single-dash long flags of earlier
releases (-team demo) still work.`,
		Example: `  porticoctl diff -f teams/orders/        # what would change
  porticoctl apply -f teams/orders/ -m "export route"
  porticoctl versions                     # the newest versions
  porticoctl rollback 41                  # a new version equal to 41
  porticoctl keys create --app shop --tenant acme --plan gold
  porticoctl deny add --subject user-42 --issued-before now
  porticoctl usage list --period 2026-11
  source <(porticoctl completion bash)    # completion in this shell`,
		Version:       buildinfo.Read().String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Reached with no command only: cobra refuses an unknown one.
			return &usageError{}
		},
	}
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	// A command of subcommands runs only to refuse what it was given:
	// its usage shows the subcommands, not a line that runs it.
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "{{if .Runnable}}", "{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))

	pf := root.PersistentFlags()
	pf.StringVar(&c.server, "server", "", "the control plane's `URL` (default $PORTICO_SERVER, else http://localhost:7000)")
	pf.StringVar(&c.tokenFile, "token-file", "", "the admin token's `FILE` (default $PORTICO_TOKEN)")
	pf.StringVar(&c.keysServer, "keys-server", "", "the key service's `URL` (default $PORTICO_KEYS_SERVER, else --server's)")
	pf.StringVar(&c.keysTokenFile, "keys-token-file", "", "the key service's token `FILE` (default $PORTICO_KEYS_TOKEN, else the admin token)")
	pf.StringVar(&c.quotaServer, "quota-server", "", "the quota service's `URL` (default $PORTICO_QUOTA_SERVER, else --server's)")
	pf.StringVar(&c.quotaTokenFile, "quota-token-file", "", "the quota service's token `FILE` (default $PORTICO_QUOTA_TOKEN, else the admin token)")
	pf.VarP(&c.output, "output", "o", "how to print answers: text for people, json or yaml for scripts")
	must(root.MarkPersistentFlagFilename("token-file"))
	must(root.MarkPersistentFlagFilename("keys-token-file"))
	must(root.MarkPersistentFlagFilename("quota-token-file"))
	must(root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp)))

	root.AddGroup(
		&cobra.Group{ID: "config", Title: "Routes, teams and rollouts (the control plane):"},
		&cobra.Group{ID: "keys", Title: "API keys and access tokens (the key service):"},
		&cobra.Group{ID: "usage", Title: "Usage and billing (the quota service):"},
	)
	for _, cmd := range []*cobra.Command{
		c.applyCmd("apply"), c.applyCmd("diff"), c.versionsCmd(), c.rollbackCmd(), c.teamCmd(),
		c.platformCmd(), c.routeCmd(), c.rolloutCmd(), c.nodesCmd(),
	} {
		cmd.GroupID = "config"
		root.AddCommand(cmd)
	}
	for _, cmd := range []*cobra.Command{c.keysCmd(), c.denyCmd()} {
		cmd.GroupID = "keys"
		root.AddCommand(cmd)
	}
	usage := c.usageCmd()
	usage.GroupID = "usage"
	root.AddCommand(usage)
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print porticoctl's version, as --version does",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", cmd.Root().Name(), cmd.Root().Version)
			return err
		},
	})
	// Unlike cobra's, this help command refuses a topic that is no
	// command.
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [COMMAND]...",
		Short: "Help about any command",
		Long:  "Help prints the help of a command: porticoctl help keys create.",
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var names []cobra.Completion
			if parent, rest, err := cmd.Root().Find(args); err == nil && len(rest) == 0 {
				for _, sub := range parent.Commands() {
					if sub.IsAvailableCommand() {
						names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
					}
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error { return help(cmd.Root(), args) },
	})
	// Cobra adds these as it runs; added now, they are part of the tree
	// that legacyFlags reads and the help test walks.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	if completion, _, err := root.Find([]string{"completion"}); err == nil {
		group(completion) // completion tcsh is bad usage, not help
	}
	root.InitDefaultVersionFlag()
	walk(root, (*cobra.Command).InitDefaultHelpFlag)
	return root
}

// walk calls f for cmd and every command under it.
func walk(cmd *cobra.Command, f func(*cobra.Command)) {
	f(cmd)
	for _, sub := range cmd.Commands() {
		walk(sub, f)
	}
}

// must panics on an error that only a mistake in porticoctl's own
// command tree (a flag name misspelled) makes.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// group makes cmd a command of subcommands. Run alone, or with a
// subcommand it lacks, it is bad usage; "help" prints its help.
func group(cmd *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	cmd.AddCommand(subs...)
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var names []string
		for _, sub := range cmd.Commands() {
			names = append(names, sub.Name())
		}
		list := orList(names)
		switch {
		case len(args) == 0:
			return usagef("%s", list)
		case args[0] == "help":
			return help(cmd, args[1:])
		}
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			return usagef("%q is not %s; did you mean %s?", args[0], list, s[0])
		}
		return usagef("%q is not %s", args[0], list)
	}
	return cmd
}

// help prints the help of the command that path names under cmd. Unlike
// cobra's own help command it refuses, as bad usage, a path that names
// no command.
func help(cmd *cobra.Command, path []string) error {
	target, rest, err := cmd.Find(path)
	switch {
	case err != nil:
		return &usageError{msg: err.Error()}
	case len(rest) > 0:
		return usagef("no help for %q: %s has no command %q", strings.Join(path, " "), target.CommandPath(), rest[0])
	}
	return target.Help()
}

// orList joins names as a sentence does: "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// noArgs is the Args of a command that takes flags only.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected %q: the command takes flags only", args[0])
	}
	return nil
}

// oneArg is the Args of a command that takes one argument, a what (a
// version, a key id).
func oneArg(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return usagef("which %s? %s", what, cmd.UseLine())
		case len(args) > 1:
			return usagef("unexpected %q: one %s only", args[1], what)
		}
		return nil
	}
}

// remote makes cmd one that calls the control plane, the key service or
// the quota service:
// the clients are made from the global flags before it runs.
func (c *cli) remote(cmd *cobra.Command) *cobra.Command {
	cmd.PreRunE = func(*cobra.Command, []string) error { return c.dial() }
	return cmd
}

// dial makes the clients of the control plane, the key service and the
// quota service from the global flags and the environment.
func (c *cli) dial() error {
	server := cmp.Or(c.server, c.getenv("PORTICO_SERVER"), "http://localhost:7000")
	token, err := tokenFrom("--token-file", c.tokenFile, c.getenv("PORTICO_TOKEN"))
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	// The key service is its own server (portico keys), or the control
	// plane's address in portico dev: without a flag or variable of its
	// own, it is --server, with the admin token.
	keysServer := cmp.Or(c.keysServer, c.getenv("PORTICO_KEYS_SERVER"), server)
	keysToken, err := tokenFrom("--keys-token-file", c.keysTokenFile, c.getenv("PORTICO_KEYS_TOKEN"))
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	keysToken = cmp.Or(keysToken, token)
	keysHTTP := &http.Client{Transport: svcauth.Transport(keysToken, nil), Timeout: keysCallTimeout}
	c.admin = adminv1connect.NewAdminServiceClient(&http.Client{Transport: svcauth.Transport(token, nil), Timeout: callTimeout}, strings.TrimRight(server, "/"))
	c.keys = keysv1connect.NewKeyServiceClient(keysHTTP, strings.TrimRight(keysServer, "/"))
	c.tokens = keysv1connect.NewTokenServiceClient(keysHTTP, strings.TrimRight(keysServer, "/"))
	// The quota service likewise: its own server (portico quota), or the
	// control plane's address in portico dev, which takes the platform
	// token.
	quotaServer := cmp.Or(c.quotaServer, c.getenv("PORTICO_QUOTA_SERVER"), server)
	quotaToken, err := tokenFrom("--quota-token-file", c.quotaTokenFile, c.getenv("PORTICO_QUOTA_TOKEN"))
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	c.quotaToken = cmp.Or(quotaToken, token)
	c.quota = quotav1connect.NewQuotaServiceClient(&http.Client{Transport: svcauth.Transport(c.quotaToken, nil), Timeout: callTimeout}, strings.TrimRight(quotaServer, "/"))
	return nil
}

// tokenFrom is the token in file (named by flag), or env's value when no
// file is given.
func tokenFrom(flag, file, env string) (string, error) {
	if file == "" {
		return env, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	return strings.TrimSpace(string(b)), nil
}
