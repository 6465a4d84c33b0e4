package main

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// legacyFlags returns args with the single-dash long flags of
// porticoctl's earlier releases, which the standard flag package parsed
// (-team demo, -limit=5, -own /v1/orders), spelled as cobra takes them:
// --team demo, --limit=5, --own /v1/orders. The README, portico dev's
// banner and teams' scripts use that spelling.
//
// Only an argument -NAME or -NAME=VALUE whose NAME, more than one
// letter, is a long flag of the command the arguments run (or a global
// flag) is rewritten. Everything else is left to cobra as it is: -f and
// other short flags, a negative number or duration, a flag's value
// (--reason -app stays a reason), and everything after "--". So an
// unknown -NAME still fails as cobra fails it.
func legacyFlags(root *cobra.Command, args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		// Completion asks about the words as typed.
		return out
	}
	cmd, positional := root, false
	for i := 0; i < len(out); i++ {
		a := out[i]
		var f *pflag.Flag
		switch {
		case a == "--":
			return out
		case strings.HasPrefix(a, "--"):
			f = longFlag(cmd, a[2:])
		case len(a) > 2 && a[0] == '-':
			if f = longFlag(cmd, a[1:]); f != nil {
				out[i] = "-" + a
			}
		case len(a) == 2 && a[0] == '-':
			f = shortFlag(cmd, a[1:])
		case !positional:
			// A command's name, or its first argument: cobra takes the
			// first word that is not a flag for a subcommand's name, if
			// it is one.
			if sub := subcommand(cmd, a); sub != nil {
				cmd = sub
			} else {
				positional = true
			}
		}
		if f != nil && f.NoOptDefVal == "" && !strings.Contains(a, "=") {
			i++ // the flag's value, whatever it looks like
		}
	}
	return out
}

// longFlag is cmd's flag, or the global flag, named by arg (NAME or
// NAME=VALUE), or nil if there is none of that name.
func longFlag(cmd *cobra.Command, arg string) *pflag.Flag {
	name, _, _ := strings.Cut(arg, "=")
	if len(name) < 2 {
		return nil
	}
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags(), cmd.InheritedFlags()} {
		if f := fs.Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

// shortFlag is cmd's flag, or the global flag, of the one-letter name, or
// nil.
func shortFlag(cmd *cobra.Command, name string) *pflag.Flag {
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags(), cmd.InheritedFlags()} {
		if f := fs.ShorthandLookup(name); f != nil {
			return f
		}
	}
	return nil
}

// subcommand is cmd's subcommand called name, or nil.
func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, sub := range cmd.Commands() {
		if sub.Name() == name || sub.HasAlias(name) {
			return sub
		}
	}
	return nil
}
