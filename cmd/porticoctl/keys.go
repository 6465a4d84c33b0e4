package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
)

// Limits of the key service's requests, checked here too so a mistake is
// a usage error with the flag's name rather than a refusal.
const (
	maxWait    = 2 * time.Minute
	maxOverlap = 30 * 24 * time.Hour
)

// rawKeyLabel heads the one printing of a raw key. The key service keeps
// only the key's hash, so whoever misses this line has lost the key.
const rawKeyLabel = "API key (store it now; it cannot be shown again):"

// keysCmd is porticoctl keys: the API keys of the key service. A raw key
// is printed only by create and rotate, once; nothing prints a hash (the
// service never answers one).
func (c *cli) keysCmd() *cobra.Command {
	return group(&cobra.Command{
		Use:   "keys",
		Short: "Issue, rotate, revoke and list API keys",
		Long: `Keys manages the key service's API keys. The service keeps only a key's hash:
create and rotate print the raw key once, and nothing can print it again.`,
	}, c.remote(c.createKeyCmd()), c.remote(c.rotateKeyCmd()), c.remote(c.revokeKeyCmd()), c.remote(c.listKeysCmd()), c.remote(c.getKeyCmd()))
}

// waitFlag adds --wait, how long a change waits for every node, to cmd.
func waitFlag(cmd *cobra.Command, wait *time.Duration, usage string) {
	cmd.Flags().DurationVar(wait, "wait", 10*time.Second, usage)
}

func (c *cli) createKeyCmd() *cobra.Command {
	var (
		app, tenant, plan, env, priority, notAfter string
		scopes                                     []string
		wait                                       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create --app APP --tenant T --plan P [flags]",
		Short: "Issue a key once every node has it, and print it this one time",
		Long: `Create issues an API key for the app APP, counted against the tenant T, on the
plan P, and answers once every node has it (or names the nodes that lack it
after --wait, and withdraws the key). It prints the raw key this one time only:
store it now.

TIME is RFC 3339 (2026-11-29T18:00:00Z).`,
		Example: `  porticoctl keys create --app shop --tenant acme --plan gold --scope orders:read --scope orders:write
  porticoctl keys create --app shop --tenant acme --plan gold --env test --not-after 2027-01-01T00:00:00Z`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &keysv1.CreateKeyRequest{AppId: app, TenantId: tenant, Plan: plan, Scopes: scopes}
			var problem string
			switch {
			case app == "" || tenant == "" || plan == "":
				problem = "--app, --tenant and --plan are required"
			case wait <= 0 || wait > maxWait:
				problem = fmt.Sprintf("--wait is more than 0 and at most %s, not %s", maxWait, wait)
			}
			if problem == "" {
				req.WaitTimeout = durationpb.New(wait)
				req.Env, problem = parseEnv(env)
			}
			if problem == "" && priority != "" {
				req.Priority, problem = parsePriority(priority)
			}
			if problem == "" && notAfter != "" {
				if t, err := time.Parse(time.RFC3339, notAfter); err != nil {
					problem = fmt.Sprintf("--not-after %q is not an RFC 3339 time", notAfter)
				} else {
					req.NotAfter = timestamppb.New(t)
				}
			}
			if problem != "" {
				return usagef("%s", problem)
			}
			resp, err := c.keys.CreateKey(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				if cutOff(err) {
					return errors.Join(failed(err), failf("no answer came; a key may exist that nobody has seen: look for it with porticoctl keys list --app %s, and revoke it", app))
				}
				return failed(err)
			}
			if resp.Msg.GetRawKey() == "" {
				return failf("the answer for key %s has no key in it", resp.Msg.GetKey().GetKeyId())
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			k := resp.Msg.GetKey()
			fmt.Fprintf(c.stdout, "created key %s\n", keySummary(k))
			if k.GetNotAfter() != nil {
				fmt.Fprintf(c.stdout, "it stops at %s\n", formatTime(k.GetNotAfter()))
			}
			c.printRawKey(resp.Msg.GetRawKey())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&app, "app", "", "the `APP` the key is for (required)")
	f.StringVar(&tenant, "tenant", "", "the tenant `T` the key's calls count against (required)")
	f.StringVar(&plan, "plan", "", "the key's plan `P` (required)")
	f.StringArrayVar(&scopes, "scope", nil, "a `SCOPE` the key grants (repeatable)")
	f.StringVar(&env, "env", "live", "the key's environment `ENV`: live (ak_live_ keys) or test (ak_test_ keys)")
	f.StringVar(&priority, "priority", "", "the key's `PRIORITY`: sheddable, free, paid or partner (default the plan's)")
	f.StringVar(&notAfter, "not-after", "", "when the key stops working, RFC 3339 `TIME` (default never)")
	waitFlag(cmd, &wait, "how long to wait for every node to have the key (at most 2m)")
	must(cmd.RegisterFlagCompletionFunc("env", cobra.FixedCompletions([]string{"live", "test"}, cobra.ShellCompDirectiveNoFileComp)))
	must(cmd.RegisterFlagCompletionFunc("priority", cobra.FixedCompletions([]string{"sheddable", "free", "paid", "partner"}, cobra.ShellCompDirectiveNoFileComp)))
	return cmd
}

// cutOff reports whether a call failed with no answer after it may have
// reached the service: this side's timeout, an interrupt, a connection
// lost mid-call. The call may then have done its work unseen. An error
// the service answered says itself what happened (CreateKey's names the
// nodes that lack the key), and a call that could not connect did
// nothing.
func cutOff(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return false
	}
	// A timeout is a *url.Error, a lost connection a *net.OpError or an
	// unexpected EOF.
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func (c *cli) rotateKeyCmd() *cobra.Command {
	var overlap, wait time.Duration
	cmd := &cobra.Command{
		Use:   "rotate KEY_ID [flags]",
		Short: "Issue a successor of a key; the old key stops after the overlap",
		Long: `Rotate issues a successor of the key KEY_ID, with the same app, tenant, plan
and scopes, once every node has it, and prints it this one time only. The old
key keeps working for --overlap, so that its users can switch.`,
		Example: `  porticoctl keys rotate key_01 --overlap 24h`,
		Args:    oneArg("key"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			switch {
			case overlap < 0 || overlap > maxOverlap:
				return usagef("--overlap is between 0 and %s, not %s", maxOverlap, overlap)
			case wait <= 0 || wait > maxWait:
				return usagef("--wait is more than 0 and at most %s, not %s", maxWait, wait)
			}
			resp, err := c.keys.RotateKey(cmd.Context(), connect.NewRequest(&keysv1.RotateKeyRequest{
				KeyId: id, Overlap: durationpb.New(overlap), WaitTimeout: durationpb.New(wait),
			}))
			if err != nil {
				if cutOff(err) {
					return errors.Join(failed(err), failf("no answer came; the key may have been rotated: porticoctl keys get %s shows its successor and end", id))
				}
				return failed(err)
			}
			if resp.Msg.GetRawKey() == "" {
				return failf("the answer for key %s has no key in it", resp.Msg.GetKey().GetKeyId())
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			k, prev := resp.Msg.GetKey(), resp.Msg.GetPrevious()
			fmt.Fprintf(c.stdout, "created key %s\n", keySummary(k))
			if prev.GetNotAfter() != nil {
				fmt.Fprintf(c.stdout, "key %s (%s) stops at %s\n", prev.GetKeyId(), prev.GetPrefix(), formatTime(prev.GetNotAfter()))
			} else {
				fmt.Fprintf(c.stdout, "key %s (%s) has no end set\n", prev.GetKeyId(), prev.GetPrefix())
			}
			c.printRawKey(resp.Msg.GetRawKey())
			return nil
		},
	}
	cmd.Flags().DurationVar(&overlap, "overlap", 24*time.Hour, "how long the old key keeps working (0 stops it now, at most 720h)")
	waitFlag(cmd, &wait, "how long to wait for every node to have the successor (at most 2m)")
	return cmd
}

// printRawKey prints a new key: the one time anyone sees it.
func (c *cli) printRawKey(raw string) {
	fmt.Fprintf(c.stdout, "\n%s\n  %s\n", rawKeyLabel, raw)
}

func (c *cli) revokeKeyCmd() *cobra.Command {
	var app, reason string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "revoke (KEY_ID | --app APP) [flags]",
		Short: "Stop a key, or every active key of an app, on every node",
		Long: `Revoke stops the key KEY_ID, or with --app every active key of the app APP,
and waits until every node has the revocation (--wait 0: not at all). The
revocation is committed either way: nodes that lag get it when they catch up,
or with the next signed snapshot.`,
		Example: `  porticoctl keys revoke key_01 --reason "leaked in a log"
  porticoctl keys revoke --app shop --reason "app retired"`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("unexpected %q: one key id only", args[1])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var id string
			if len(args) == 1 {
				id = args[0]
			}
			switch {
			case (id == "") == (app == ""):
				return usagef("one key or one app: %s", cmd.UseLine())
			case wait < 0 || wait > maxWait:
				return usagef("--wait is at least 0 and at most %s, not %s", maxWait, wait)
			}
			var waitForNodes *durationpb.Duration
			if wait > 0 {
				waitForNodes = durationpb.New(wait)
			}
			name := cmd.CommandPath()
			if id != "" {
				resp, err := c.keys.RevokeKey(cmd.Context(), connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: id, Reason: reason, WaitForNodes: waitForNodes}))
				if err != nil {
					return failed(err)
				}
				if c.structured() {
					return c.printMessage(resp.Msg)
				}
				k := resp.Msg.GetKey()
				fmt.Fprintf(c.stdout, "revoked key %s (%s) of app %s\n", k.GetKeyId(), k.GetPrefix(), k.GetAppId())
				c.printLane(name, resp.Msg.GetVersion())
				c.printPropagation(name, resp.Msg.GetVersion(), resp.Msg.GetPropagation(), wait)
				return nil
			}
			resp, err := c.keys.RevokeApp(cmd.Context(), connect.NewRequest(&keysv1.RevokeAppRequest{AppId: app, Reason: reason, WaitForNodes: waitForNodes}))
			if err != nil {
				return failed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			keys := resp.Msg.GetKeys()
			if len(keys) == 0 {
				fmt.Fprintf(c.stdout, "app %s has no active keys\n", app)
				return nil
			}
			fmt.Fprintf(c.stdout, "revoked %d keys of app %s\n", len(keys), app)
			for _, k := range keys {
				fmt.Fprintf(c.stdout, "  %s (%s)\n", k.GetKeyId(), k.GetPrefix())
			}
			c.printLane(name, resp.Msg.GetVersion())
			c.printPropagation(name, resp.Msg.GetVersion(), resp.Msg.GetPropagation(), wait)
			return nil
		},
	}
	cmd.Flags().StringVar(&app, "app", "", "revoke every active key of this `APP` instead of one key")
	cmd.Flags().StringVar(&reason, "reason", "", "why: the `TEXT` kept with the key")
	waitFlag(cmd, &wait, "how long to wait for every node to have the revocation (0: do not wait; at most 2m)")
	return cmd
}

// printPropagation says whether every node has a revocation, when the
// command waited for that. The revocation is committed either way: nodes
// that lag get it when they catch up, or with the next signed snapshot.
func (c *cli) printPropagation(cmd string, version uint64, p *keysv1.Propagation, wait time.Duration) {
	switch p.GetState() {
	case keysv1.Propagation_STATE_UNSPECIFIED: // no wait asked for
	case keysv1.Propagation_STATE_COMPLETE:
		if p.GetNodes() == 0 {
			fmt.Fprintln(c.stdout, "no node is connected to the fast lane")
			return
		}
		fmt.Fprintf(c.stdout, "every node has it (%d connected)\n", p.GetNodes())
	case keysv1.Propagation_STATE_INCOMPLETE:
		var behind []string
		for _, n := range p.GetBehind() {
			b := fmt.Sprintf("%s (at version %d", n.GetNodeId(), n.GetVersion())
			if n.GetError() != "" {
				b += ", refused: " + n.GetError()
			}
			behind = append(behind, b+")")
		}
		fmt.Fprintf(c.stderr, "%s: %d of %d nodes did not have it after %s: %s; the change is committed and reaches them when they catch up\n",
			cmd, len(behind), p.GetNodes(), wait, strings.Join(behind, ", "))
	case keysv1.Propagation_STATE_NO_FAST_LANE:
		fmt.Fprintf(c.stderr, "%s: the key service runs without a control plane; nodes get the change with the next signed snapshot\n", cmd)
	default: // unreached
		if version != 0 { // printLane has said so already otherwise
			fmt.Fprintf(c.stderr, "%s: the control plane could not say which nodes have it; the change is committed\n", cmd)
		}
	}
}

// printLane says how a committed change reaches the nodes: as a version of
// the control plane's fast lane, or, when the key service could not reach
// the control plane (version 0), with the next signed snapshot.
func (c *cli) printLane(cmd string, version uint64) {
	if version == 0 {
		fmt.Fprintf(c.stderr, "%s: the key service did not reach the control plane; the change is committed and reaches the nodes with the next snapshot\n", cmd)
		return
	}
	fmt.Fprintf(c.stdout, "on the fast lane as version %d\n", version)
}

// listPageSize is the most ListKeys answers at once.
const listPageSize = 1000

func (c *cli) listKeysCmd() *cobra.Command {
	var app, tenant string
	var all bool
	cmd := &cobra.Command{
		Use:     "list [flags]",
		Short:   "List the keys that work (--all: revoked and expired ones too)",
		Example: `  porticoctl keys list --app shop --all`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := time.Now()
			var keys []*keysv1.Key
			req := &keysv1.ListKeysRequest{AppId: app, TenantId: tenant, PageSize: listPageSize}
			for seen := map[string]bool{}; ; {
				resp, err := c.keys.ListKeys(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return failed(err)
				}
				for _, k := range resp.Msg.GetKeys() {
					if all || keyStatus(k, now) == "active" {
						keys = append(keys, k)
					}
				}
				next := resp.Msg.GetNextPageToken()
				if next == "" {
					break
				}
				if seen[next] {
					return failf("the key service answered page token %q twice", next)
				}
				seen[next] = true
				req.PageToken = next
			}
			if c.structured() {
				return c.printMessage(&keysv1.ListKeysResponse{Keys: keys})
			}
			t := newTable(c.stdout, "KEY ID", "PREFIX", "APP", "TENANT", "PLAN", "ENV", "STATUS", "CREATED", "NOT AFTER")
			for _, k := range keys {
				t.row(k.GetKeyId(), k.GetPrefix(), k.GetAppId(), k.GetTenantId(), k.GetPlan(),
					envName(k.GetEnv()), keyStatus(k, now), formatTime(k.GetCreated()), formatTime(k.GetNotAfter()))
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&app, "app", "", "only this `APP`'s keys")
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant `T`'s keys")
	cmd.Flags().BoolVar(&all, "all", false, "revoked and expired keys too")
	return cmd
}

func (c *cli) getKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get KEY_ID",
		Short: "Show one key's metadata",
		Args:  oneArg("key"),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := c.keys.GetKey(cmd.Context(), connect.NewRequest(&keysv1.GetKeyRequest{KeyId: args[0]}))
			if err != nil {
				return failed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			k := resp.Msg.GetKey()
			tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			line := func(name, value string) {
				if value != "" {
					fmt.Fprintf(tw, "%s\t%s\n", name, value)
				}
			}
			line("key id", k.GetKeyId())
			line("prefix", k.GetPrefix())
			line("app", k.GetAppId())
			line("tenant", k.GetTenantId())
			line("plan", k.GetPlan())
			line("scopes", strings.Join(k.GetScopes(), " "))
			line("env", envName(k.GetEnv()))
			if k.GetPriority() != configv1.Priority_PRIORITY_UNSPECIFIED {
				line("priority", enumName(k.GetPriority().String(), "PRIORITY_"))
			}
			line("status", keyStatus(k, time.Now()))
			line("created", formatTime(k.GetCreated()))
			line("not after", formatTime(k.GetNotAfter()))
			line("predecessor", k.GetPredecessorKeyId())
			line("successor", k.GetSuccessorKeyId())
			if k.GetRevoked() != nil {
				line("revoked", formatTime(k.GetRevoked()))
				line("revoked by", k.GetRevokedBy())
				line("reason", k.GetRevokeReason())
			}
			line("rev", fmt.Sprint(k.GetRev()))
			if err := tw.Flush(); err != nil {
				return &failure{err: err}
			}
			return nil
		},
	}
}

// keySummary is a key in one line: id, prefix, app, tenant, plan, env.
func keySummary(k *keysv1.Key) string {
	return fmt.Sprintf("%s (%s): app %s, tenant %s, plan %s, env %s", k.GetKeyId(), k.GetPrefix(), k.GetAppId(), k.GetTenantId(), k.GetPlan(), envName(k.GetEnv()))
}

// keyStatus is active, revoked or expired (active, but past not_after).
func keyStatus(k *keysv1.Key, now time.Time) string {
	switch {
	case k.GetStatus() == configv1.KeyStatus_KEY_STATUS_REVOKED:
		return "revoked"
	case k.GetNotAfter() != nil && !now.Before(k.GetNotAfter().AsTime()):
		return "expired"
	default:
		return enumName(k.GetStatus().String(), "KEY_STATUS_")
	}
}

func parseEnv(s string) (keysv1.Environment, string) {
	switch s {
	case "live":
		return keysv1.Environment_ENVIRONMENT_LIVE, ""
	case "test":
		return keysv1.Environment_ENVIRONMENT_TEST, ""
	}
	return 0, fmt.Sprintf("--env is live or test, not %q", s)
}

func envName(e keysv1.Environment) string {
	return enumName(e.String(), "ENVIRONMENT_")
}

func parsePriority(s string) (configv1.Priority, string) {
	if v, ok := configv1.Priority_value["PRIORITY_"+strings.ToUpper(s)]; ok && v != 0 {
		return configv1.Priority(v), ""
	}
	return 0, fmt.Sprintf("--priority is sheddable, free, paid or partner, not %q", s)
}

// enumName is an enum value's name as the flags spell it: paid for
// PRIORITY_PAID.
func enumName(name, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}

// formatTime is a time in RFC 3339, UTC, or "" when it is unset.
func formatTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().Format(time.RFC3339)
}
