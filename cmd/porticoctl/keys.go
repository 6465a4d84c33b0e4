package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
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

// keyCmd runs porticoctl keys: the API keys of the key service. A raw key
// is printed only by create and rotate, once; nothing prints a hash (the
// service never answers one).
func (c *cli) keyCmd(ctx context.Context, args []string) int {
	return c.dispatch(ctx, "keys", args,
		subcommand{"create", c.createKey}, subcommand{"rotate", c.rotateKey}, subcommand{"revoke", c.revokeKey},
		subcommand{"list", c.listKeys}, subcommand{"get", c.getKey})
}

func (c *cli) createKey(ctx context.Context, args []string) int {
	const cmd = "keys create"
	fs := c.flags(cmd)
	app := fs.String("app", "", "the app the key is for (required)")
	tenant := fs.String("tenant", "", "the tenant the key's calls count against (required)")
	plan := fs.String("plan", "", "the key's plan (required)")
	var scopes []string
	fs.Func("scope", "a scope the key grants (repeatable)", func(v string) error {
		scopes = append(scopes, v)
		return nil
	})
	env := fs.String("env", "live", "live (ak_live_ keys) or test (ak_test_ keys)")
	priority := fs.String("priority", "", "sheddable, free, paid or partner (default: the plan's)")
	notAfter := fs.String("not-after", "", "when the key stops working, RFC 3339 (default never)")
	wait := fs.Duration("wait", 10*time.Second, "how long to wait for every node to have the key (at most 2m)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	req := &keysv1.CreateKeyRequest{AppId: *app, TenantId: *tenant, Plan: *plan, Scopes: scopes}
	var problem string
	switch {
	case *app == "" || *tenant == "" || *plan == "":
		problem = "-app, -tenant and -plan are required"
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected %q: all of create's arguments are flags", fs.Arg(0))
	case *wait <= 0 || *wait > maxWait:
		problem = fmt.Sprintf("-wait is more than 0 and at most %s, not %s", maxWait, *wait)
	}
	if problem == "" {
		req.WaitTimeout = durationpb.New(*wait)
		req.Env, problem = parseEnv(*env)
	}
	if problem == "" && *priority != "" {
		req.Priority, problem = parsePriority(*priority)
	}
	if problem == "" && *notAfter != "" {
		if t, err := time.Parse(time.RFC3339, *notAfter); err != nil {
			problem = fmt.Sprintf("-not-after %q is not an RFC 3339 time", *notAfter)
		} else {
			req.NotAfter = timestamppb.New(t)
		}
	}
	if problem != "" {
		fmt.Fprintf(c.stderr, "porticoctl %s: %s\n", cmd, problem)
		return exitUsage
	}
	resp, err := c.keys.CreateKey(ctx, connect.NewRequest(req))
	if err != nil {
		code := c.failed(cmd, err)
		if cutOff(err) {
			fmt.Fprintf(c.stderr, "porticoctl %s: no answer came; a key may exist that nobody has seen: look for it with porticoctl keys list -app %s, and revoke it\n", cmd, *app)
		}
		return code
	}
	if resp.Msg.GetRawKey() == "" {
		fmt.Fprintf(c.stderr, "porticoctl %s: the answer for key %s has no key in it\n", cmd, resp.Msg.GetKey().GetKeyId())
		return exitFailed
	}
	if c.json {
		return c.printJSON(resp.Msg)
	}
	k := resp.Msg.GetKey()
	fmt.Fprintf(c.stdout, "created key %s\n", keySummary(k))
	if k.GetNotAfter() != nil {
		fmt.Fprintf(c.stdout, "it stops at %s\n", formatTime(k.GetNotAfter()))
	}
	c.printRawKey(resp.Msg.GetRawKey())
	return exitOK
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

func (c *cli) rotateKey(ctx context.Context, args []string) int {
	const cmd = "keys rotate"
	fs := c.flags(cmd)
	overlap := fs.Duration("overlap", 24*time.Hour, "how long the old key keeps working (0 stops it now, at most 720h)")
	wait := fs.Duration("wait", 10*time.Second, "how long to wait for every node to have the successor (at most 2m)")
	id, ok := c.parseWithID(cmd, fs, args, "KEY_ID [-overlap 24h]")
	if !ok {
		return exitUsage
	}
	switch {
	case *overlap < 0 || *overlap > maxOverlap:
		fmt.Fprintf(c.stderr, "porticoctl %s: -overlap is between 0 and %s, not %s\n", cmd, maxOverlap, *overlap)
		return exitUsage
	case *wait <= 0 || *wait > maxWait:
		fmt.Fprintf(c.stderr, "porticoctl %s: -wait is more than 0 and at most %s, not %s\n", cmd, maxWait, *wait)
		return exitUsage
	}
	resp, err := c.keys.RotateKey(ctx, connect.NewRequest(&keysv1.RotateKeyRequest{
		KeyId: id, Overlap: durationpb.New(*overlap), WaitTimeout: durationpb.New(*wait),
	}))
	if err != nil {
		code := c.failed(cmd, err)
		if cutOff(err) {
			fmt.Fprintf(c.stderr, "porticoctl %s: no answer came; the key may have been rotated: porticoctl keys get %s shows its successor and end\n", cmd, id)
		}
		return code
	}
	if resp.Msg.GetRawKey() == "" {
		fmt.Fprintf(c.stderr, "porticoctl %s: the answer for key %s has no key in it\n", cmd, resp.Msg.GetKey().GetKeyId())
		return exitFailed
	}
	if c.json {
		return c.printJSON(resp.Msg)
	}
	k, prev := resp.Msg.GetKey(), resp.Msg.GetPrevious()
	fmt.Fprintf(c.stdout, "created key %s\n", keySummary(k))
	if prev.GetNotAfter() != nil {
		fmt.Fprintf(c.stdout, "key %s (%s) stops at %s\n", prev.GetKeyId(), prev.GetPrefix(), formatTime(prev.GetNotAfter()))
	} else {
		fmt.Fprintf(c.stdout, "key %s (%s) has no end set\n", prev.GetKeyId(), prev.GetPrefix())
	}
	c.printRawKey(resp.Msg.GetRawKey())
	return exitOK
}

// printRawKey prints a new key: the one time anyone sees it.
func (c *cli) printRawKey(raw string) {
	fmt.Fprintf(c.stdout, "\n%s\n  %s\n", rawKeyLabel, raw)
}

func (c *cli) revokeKey(ctx context.Context, args []string) int {
	const cmd = "keys revoke"
	fs := c.flags(cmd)
	app := fs.String("app", "", "revoke every active key of this app instead of one key")
	reason := fs.String("reason", "", "why, kept with the key")
	wait := fs.Duration("wait", 10*time.Second, "how long to wait for every node to have the revocation (0: do not wait; at most 2m)")
	const forms = "KEY_ID [-reason TEXT] [-wait 10s], or -app APP [-reason TEXT] [-wait 10s]"
	id, ok := c.parseWithID(cmd, fs, args, "")
	switch {
	case !ok:
		return exitUsage
	case (id == "") == (*app == ""):
		fmt.Fprintf(c.stderr, "porticoctl %s: one key or one app: porticoctl %s %s\n", cmd, cmd, forms)
		return exitUsage
	case *wait < 0 || *wait > maxWait:
		fmt.Fprintf(c.stderr, "porticoctl %s: -wait is at least 0 and at most %s, not %s\n", cmd, maxWait, *wait)
		return exitUsage
	}
	var waitForNodes *durationpb.Duration
	if *wait > 0 {
		waitForNodes = durationpb.New(*wait)
	}
	switch {
	case id != "":
		resp, err := c.keys.RevokeKey(ctx, connect.NewRequest(&keysv1.RevokeKeyRequest{KeyId: id, Reason: *reason, WaitForNodes: waitForNodes}))
		if err != nil {
			return c.failed(cmd, err)
		}
		if c.json {
			return c.printJSON(resp.Msg)
		}
		k := resp.Msg.GetKey()
		fmt.Fprintf(c.stdout, "revoked key %s (%s) of app %s\n", k.GetKeyId(), k.GetPrefix(), k.GetAppId())
		c.printLane(cmd, resp.Msg.GetVersion())
		c.printPropagation(cmd, resp.Msg.GetVersion(), resp.Msg.GetPropagation(), *wait)
		return exitOK
	default:
		resp, err := c.keys.RevokeApp(ctx, connect.NewRequest(&keysv1.RevokeAppRequest{AppId: *app, Reason: *reason, WaitForNodes: waitForNodes}))
		if err != nil {
			return c.failed(cmd, err)
		}
		if c.json {
			return c.printJSON(resp.Msg)
		}
		keys := resp.Msg.GetKeys()
		if len(keys) == 0 {
			fmt.Fprintf(c.stdout, "app %s has no active keys\n", *app)
			return exitOK
		}
		fmt.Fprintf(c.stdout, "revoked %d keys of app %s\n", len(keys), *app)
		for _, k := range keys {
			fmt.Fprintf(c.stdout, "  %s (%s)\n", k.GetKeyId(), k.GetPrefix())
		}
		c.printLane(cmd, resp.Msg.GetVersion())
		c.printPropagation(cmd, resp.Msg.GetVersion(), resp.Msg.GetPropagation(), *wait)
		return exitOK
	}
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
		fmt.Fprintf(c.stderr, "porticoctl %s: %d of %d nodes did not have it after %s: %s; the change is committed and reaches them when they catch up\n",
			cmd, len(behind), p.GetNodes(), wait, strings.Join(behind, ", "))
	case keysv1.Propagation_STATE_NO_FAST_LANE:
		fmt.Fprintf(c.stderr, "porticoctl %s: the key service runs without a control plane; nodes get the change with the next signed snapshot\n", cmd)
	default: // unreached
		if version != 0 { // printLane has said so already otherwise
			fmt.Fprintf(c.stderr, "porticoctl %s: the control plane could not say which nodes have it; the change is committed\n", cmd)
		}
	}
}

// printLane says how a committed change reaches the nodes: as a version of
// the control plane's fast lane, or, when the key service could not reach
// the control plane (version 0), with the next signed snapshot.
func (c *cli) printLane(cmd string, version uint64) {
	if version == 0 {
		fmt.Fprintf(c.stderr, "porticoctl %s: the key service did not reach the control plane; the change is committed and reaches the nodes with the next snapshot\n", cmd)
		return
	}
	fmt.Fprintf(c.stdout, "on the fast lane as version %d\n", version)
}

// listPageSize is the most ListKeys answers at once.
const listPageSize = 1000

func (c *cli) listKeys(ctx context.Context, args []string) int {
	const cmd = "keys list"
	fs := c.flags(cmd)
	app := fs.String("app", "", "only this app's keys")
	tenant := fs.String("tenant", "", "only this tenant's keys")
	all := fs.Bool("all", false, "revoked and expired keys too")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(c.stderr, "porticoctl %s: unexpected %q: porticoctl %s [-app APP] [-tenant T] [-all]\n", cmd, fs.Arg(0), cmd)
		return exitUsage
	}
	now := time.Now()
	var keys []*keysv1.Key
	req := &keysv1.ListKeysRequest{AppId: *app, TenantId: *tenant, PageSize: listPageSize}
	for seen := map[string]bool{}; ; {
		resp, err := c.keys.ListKeys(ctx, connect.NewRequest(req))
		if err != nil {
			return c.failed(cmd, err)
		}
		for _, k := range resp.Msg.GetKeys() {
			if *all || keyStatus(k, now) == "active" {
				keys = append(keys, k)
			}
		}
		next := resp.Msg.GetNextPageToken()
		if next == "" {
			break
		}
		if seen[next] {
			fmt.Fprintf(c.stderr, "porticoctl %s: the key service answered page token %q twice\n", cmd, next)
			return exitFailed
		}
		seen[next] = true
		req.PageToken = next
	}
	if c.json {
		return c.printJSON(&keysv1.ListKeysResponse{Keys: keys})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY ID\tPREFIX\tAPP\tTENANT\tPLAN\tENV\tSTATUS\tCREATED\tNOT AFTER")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.GetKeyId(), k.GetPrefix(), k.GetAppId(), k.GetTenantId(), k.GetPlan(),
			envName(k.GetEnv()), keyStatus(k, now), formatTime(k.GetCreated()), dash(formatTime(k.GetNotAfter())))
	}
	if err := tw.Flush(); err != nil {
		fmt.Fprintf(c.stderr, "porticoctl %s: %v\n", cmd, err)
		return exitFailed
	}
	return exitOK
}

func (c *cli) getKey(ctx context.Context, args []string) int {
	const cmd = "keys get"
	fs := c.flags(cmd)
	id, ok := c.parseWithID(cmd, fs, args, "KEY_ID")
	if !ok {
		return exitUsage
	}
	resp, err := c.keys.GetKey(ctx, connect.NewRequest(&keysv1.GetKeyRequest{KeyId: id}))
	if err != nil {
		return c.failed(cmd, err)
	}
	if c.json {
		return c.printJSON(resp.Msg)
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
		fmt.Fprintf(c.stderr, "porticoctl %s: %v\n", cmd, err)
		return exitFailed
	}
	return exitOK
}

// parseWithID parses a command's flags and its one positional argument, a
// key id, which may come before the flags, after them or between them.
// want is the rest of the command line for the message when the id is
// missing; with want empty the id is optional, its absence the caller's
// to judge.
func (c *cli) parseWithID(cmd string, fs *flag.FlagSet, args []string, want string) (string, bool) {
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	rest := fs.Args()
	if id == "" && len(rest) > 0 {
		id = rest[0]
		if err := fs.Parse(rest[1:]); err != nil {
			return "", false
		}
		rest = fs.Args()
	}
	switch {
	case len(rest) > 0:
		fmt.Fprintf(c.stderr, "porticoctl %s: unexpected %q: one key id only\n", cmd, rest[0])
		return "", false
	case id == "" && want != "":
		fmt.Fprintf(c.stderr, "porticoctl %s: which key? porticoctl %s %s\n", cmd, cmd, want)
		return "", false
	}
	return id, true
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
	return 0, fmt.Sprintf("-env is live or test, not %q", s)
}

func envName(e keysv1.Environment) string {
	return enumName(e.String(), "ENVIRONMENT_")
}

func parsePriority(s string) (configv1.Priority, string) {
	if v, ok := configv1.Priority_value["PRIORITY_"+strings.ToUpper(s)]; ok && v != 0 {
		return configv1.Priority(v), ""
	}
	return 0, fmt.Sprintf("-priority is sheddable, free, paid or partner, not %q", s)
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

// dash stands in for an empty table cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
