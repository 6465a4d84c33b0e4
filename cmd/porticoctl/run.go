package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	"github.com/portico-gw/portico/gen/portico/admin/v1/adminv1connect"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
	"github.com/portico-gw/portico/internal/svcauth"
)

const usage = `usage: porticoctl [global flags] <command> [flags]

commands:
  apply -f DIR [-m MESSAGE]   replace the team's routes, clusters and services with DIR's
  diff -f DIR                 what apply would change, without changing it
  versions [-limit N]         the newest versions
  rollback N [-m MESSAGE]     a new version equal to version N (platform admins)
  team put NAME -own [HOST]/PREFIX ... -upstream ADDRESS[:PORTS] ...
                              declare a team, the space it owns and the backends it
                              may use: a host, *.domain or CIDR, with optional ports
                              (-upstream '*.orders.internal' -upstream
                              10.20.0.0/16:443,8000-8099) (platform admins)
  platform get                the platform's objects, as YAML-ready JSON
  platform put -f FILE [-m MESSAGE]
                              replace the platform's objects (products, plans, scopes,
                              issuers, rate limiting, upstream identities) with FILE's
                              (YAML or JSON) (platform admins)
  route put -team T -f FILE [-m MESSAGE]
                              create or replace one route of a team (YAML or JSON)
  route delete -team T ID [-m MESSAGE]
                              delete one route of a team
  rollout status|pause|resume|abort
                              the newest rollout; steer it (platform admins)
  nodes                       the connected nodes and what each runs

API keys (the key service):
  keys create -app APP -tenant T -plan P [-scope S]... [-env live|test]
              [-priority sheddable|free|paid|partner] [-not-after TIME] [-wait 10s]
                              issue a key once every node has it; prints the key
                              this one time only
  keys rotate KEY_ID [-overlap 24h] [-wait 10s]
                              issue a successor; the old key stops after the overlap
  keys revoke KEY_ID [-reason TEXT] [-wait 10s]
  keys revoke -app APP [-reason TEXT] [-wait 10s]
                              stop a key, or every active key of an app, on every node;
                              waits until every node has it (-wait 0: not at all)
  keys list [-app APP] [-tenant T] [-all]
                              keys that work (-all: revoked and expired ones too)
  keys get KEY_ID             one key's metadata

access tokens (the key service's token service):
  deny add (-jti ID [-token-expires EXP] | -subject SUB -issued-before TIME |
            -client-id ID -issued-before TIME) [-issuer NAME] [-expires TIME | -ttl DURATION]
                              deny one token, or a subject's or client's tokens issued
                              before TIME; the entry asks to lapse at -expires, or -ttl
                              from now, by default 15m after -issued-before, or after
                              now for -jti (or at the token's exp, EXP, if later); nodes
                              keep it until every token it covers has expired, for the
                              issuer's max_token_lifetime
  deny list                   the deny entries

  TIME is RFC 3339 (2026-11-29T18:00:00Z); -issued-before also takes "now", EXP
  Unix seconds (a token's exp claim).

global flags:
  -server URL        the control plane (default $PORTICO_SERVER, else http://localhost:7000)
  -token-file FILE   the admin token (default $PORTICO_TOKEN)
  -keys-server URL   the key service (default $PORTICO_KEYS_SERVER, else -server's)
  -keys-token-file FILE
                     the key service's token (default $PORTICO_KEYS_TOKEN, else the
                     admin token)
  -output text|json  how to print answers (default text)
`

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	callTimeout = 2 * time.Minute
)

// keysCallTimeout bounds a key service call: one that waits for every
// node (CreateKey, RotateKey) may wait up to maxWait before it answers,
// and the answer (or the nodes that lack the key) must not be cut off.
const keysCallTimeout = callTimeout + maxWait

// cli is one invocation.
type cli struct {
	stdout, stderr io.Writer
	admin          adminv1connect.AdminServiceClient
	keys           keysv1connect.KeyServiceClient
	tokens         keysv1connect.TokenServiceClient
	json           bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("porticoctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	server := fs.String("server", "", "")
	tokenFile := fs.String("token-file", "", "")
	keysServer := fs.String("keys-server", "", "")
	keysTokenFile := fs.String("keys-token-file", "", "")
	output := fs.String("output", "text", "")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "porticoctl: -output is text or json, not %q\n", *output)
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	*server = cmp.Or(*server, getenv("PORTICO_SERVER"), "http://localhost:7000")
	token, err := tokenFrom("-token-file", *tokenFile, getenv("PORTICO_TOKEN"))
	if err != nil {
		fmt.Fprintf(stderr, "porticoctl: %v\n", err)
		return exitUsage
	}
	// The key service is its own server (portico keys), or the control
	// plane's address in portico dev: without a flag or variable of its
	// own, it is -server, with the admin token.
	*keysServer = cmp.Or(*keysServer, getenv("PORTICO_KEYS_SERVER"), *server)
	keysToken, err := tokenFrom("-keys-token-file", *keysTokenFile, getenv("PORTICO_KEYS_TOKEN"))
	if err != nil {
		fmt.Fprintf(stderr, "porticoctl: %v\n", err)
		return exitUsage
	}
	keysToken = cmp.Or(keysToken, token)
	keysHTTP := &http.Client{Transport: svcauth.Transport(keysToken, nil), Timeout: keysCallTimeout}
	c := &cli{stdout: stdout, stderr: stderr, json: *output == "json",
		admin:  adminv1connect.NewAdminServiceClient(&http.Client{Transport: svcauth.Transport(token, nil), Timeout: callTimeout}, strings.TrimRight(*server, "/")),
		keys:   keysv1connect.NewKeyServiceClient(keysHTTP, strings.TrimRight(*keysServer, "/")),
		tokens: keysv1connect.NewTokenServiceClient(keysHTTP, strings.TrimRight(*keysServer, "/")),
	}

	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "apply", "diff":
		return c.apply(ctx, cmd, rest)
	case "versions":
		return c.versions(ctx, rest)
	case "rollback":
		return c.rollback(ctx, rest)
	case "team":
		return c.team(ctx, rest)
	case "platform":
		return c.platform(ctx, rest)
	case "rollout":
		return c.rollout(ctx, rest)
	case "route":
		return c.route(ctx, rest)
	case "nodes":
		return c.nodes(ctx)
	case "keys":
		return c.keyCmd(ctx, rest)
	case "deny":
		return c.deny(ctx, rest)
	default:
		fmt.Fprintf(stderr, "porticoctl: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
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

// flags returns the flag set of porticoctl's command cmd, printing to
// stderr.
func (c *cli) flags(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet("porticoctl "+cmd, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	return fs
}

// subcommand is one of a command's subcommands.
type subcommand struct {
	name string
	run  func(context.Context, []string) int
}

// dispatch runs the subcommand of cmd that args name.
func (c *cli) dispatch(ctx context.Context, cmd string, args []string, subs ...subcommand) int {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	list := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	if len(args) == 0 {
		fmt.Fprintf(c.stderr, "porticoctl %s: %s\n", cmd, list)
		return exitUsage
	}
	for _, s := range subs {
		if s.name == args[0] {
			return s.run(ctx, args[1:])
		}
	}
	fmt.Fprintf(c.stderr, "porticoctl %s: %q is not %s\n", cmd, args[0], list)
	return exitUsage
}

func (c *cli) apply(ctx context.Context, cmd string, args []string) int {
	fs := c.flags(cmd)
	dir := fs.String("f", "", "the team's directory")
	msg := fs.String("m", "", "why, for the version list")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *dir == "" || fs.NArg() > 0 {
		fmt.Fprintf(c.stderr, "porticoctl %s: -f DIR is required, and nothing else\n", cmd)
		return exitUsage
	}
	tc, err := loadTeamDir(*dir)
	if err != nil {
		fmt.Fprintf(c.stderr, "porticoctl %s: %v\n", cmd, err)
		return exitFailed
	}
	resp, err := c.admin.ApplyTeam(ctx, connect.NewRequest(&adminv1.ApplyTeamRequest{Config: tc, Message: *msg, DryRun: cmd == "diff"}))
	if err != nil {
		return c.failed(cmd, err)
	}
	ch := resp.Msg.GetChange()
	if c.json {
		return c.printJSON(resp.Msg)
	}
	switch {
	case ch.GetDiff() == "":
		fmt.Fprintf(c.stdout, "no change for team %s\n", tc.GetTeam())
	case cmd == "diff":
		fmt.Fprintln(c.stdout, ch.GetDiff())
	default:
		fmt.Fprintf(c.stdout, "version %d (sha256 %s)\n%s\n", ch.GetVersion().GetNumber(), ch.GetVersion().GetSha256(), ch.GetDiff())
	}
	return exitOK
}

func (c *cli) versions(ctx context.Context, args []string) int {
	fs := c.flags("versions")
	limit := fs.Int("limit", 20, "how many")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	resp, err := c.admin.ListVersions(ctx, connect.NewRequest(&adminv1.ListVersionsRequest{Limit: int32(min(max(*limit, 0), 1000))}))
	if err != nil {
		return c.failed("versions", err)
	}
	if c.json {
		return c.printJSON(resp.Msg)
	}
	for _, v := range resp.Msg.GetVersions() {
		sha := v.GetSha256()
		if len(sha) > 12 {
			sha = sha[:12]
		}
		line := fmt.Sprintf("%d\t%s\t%s\t%s\t%s", v.GetNumber(), v.GetCreatedAt().AsTime().Format(time.RFC3339), v.GetCreatedBy(), sha, v.GetMessage())
		fmt.Fprintln(c.stdout, strings.TrimRight(line, "\t"))
	}
	return exitOK
}

func (c *cli) rollback(ctx context.Context, args []string) int {
	fs := c.flags("rollback")
	msg := fs.String("m", "", "why")
	if len(args) == 0 {
		fmt.Fprintln(c.stderr, "porticoctl rollback: which version? porticoctl rollback N [-m MESSAGE]")
		return exitUsage
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n <= 0 {
		fmt.Fprintf(c.stderr, "porticoctl rollback: %q is not a version number\n", args[0])
		return exitUsage
	}
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	resp, err := c.admin.Rollback(ctx, connect.NewRequest(&adminv1.RollbackRequest{To: n, Message: *msg}))
	if err != nil {
		return c.failed("rollback", err)
	}
	if c.json {
		return c.printJSON(resp.Msg)
	}
	ch := resp.Msg.GetChange()
	if !ch.GetChanged() {
		fmt.Fprintf(c.stdout, "version %d already runs version %d's snapshot\n", ch.GetVersion().GetNumber(), n)
		return exitOK
	}
	fmt.Fprintf(c.stdout, "version %d = version %d\n%s\n", ch.GetVersion().GetNumber(), n, ch.GetDiff())
	return exitOK
}

// team declares a team: porticoctl team put NAME -own api.example.com/v1/orders -own /internal/orders
// -upstream '*.orders.internal' -upstream 10.20.0.0/16:443,8000-8099.
func (c *cli) team(ctx context.Context, args []string) int {
	if len(args) < 2 || args[0] != "put" {
		fmt.Fprintln(c.stderr, "porticoctl team: porticoctl team put NAME -own [HOST]/PREFIX ... -upstream ADDRESS[:PORTS] ... [-m MESSAGE]")
		return exitUsage
	}
	name := args[1]
	fs := c.flags("team put")
	var owns []*adminv1.Ownership
	fs.Func("own", "HOST/PREFIX the team owns, or /PREFIX on every host (repeatable)", func(v string) error {
		i := strings.IndexByte(v, '/')
		if i < 0 {
			return fmt.Errorf("%q: want HOST/PREFIX or /PREFIX", v)
		}
		owns = append(owns, &adminv1.Ownership{Host: v[:i], PathPrefix: v[i:]})
		return nil
	})
	var ups []*adminv1.Upstream
	fs.Func("upstream", "backend addresses the team's clusters may use: HOST, *.DOMAIN or CIDR, each with optional :PORTS (443,8000-8099) (repeatable)", func(v string) error {
		u, err := parseUpstream(v)
		if err == nil {
			ups = append(ups, u)
		}
		return err
	})
	msg := fs.String("m", "", "why")
	if err := fs.Parse(args[2:]); err != nil {
		return exitUsage
	}
	resp, err := c.admin.PutTeam(ctx, connect.NewRequest(&adminv1.PutTeamRequest{Team: &adminv1.Team{Name: name, Owns: owns, Upstreams: ups}, Message: *msg}))
	if err != nil {
		return c.failed("team put", err)
	}
	if c.json {
		return c.printJSON(resp.Msg)
	}
	return c.printChange(resp.Msg.GetChange(), "team "+name)
}

// printChange prints what a write did to what.
func (c *cli) printChange(ch *adminv1.Change, what string) int {
	if !ch.GetChanged() {
		fmt.Fprintf(c.stdout, "no change for %s\n", what)
		return exitOK
	}
	fmt.Fprintf(c.stdout, "version %d\n%s\n", ch.GetVersion().GetNumber(), ch.GetDiff())
	return exitOK
}

// route puts or deletes one route of a team.
func (c *cli) route(ctx context.Context, args []string) int {
	if len(args) == 0 || (args[0] != "put" && args[0] != "delete") {
		fmt.Fprintln(c.stderr, "porticoctl route: put -team T -f FILE, or delete -team T ID")
		return exitUsage
	}
	verb := args[0]
	fs := c.flags("route " + verb)
	team := fs.String("team", "", "the route's team")
	file := fs.String("f", "", "the route, YAML or JSON (put)")
	msg := fs.String("m", "", "why")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	var change *adminv1.Change
	switch {
	case *team == "":
		fmt.Fprintf(c.stderr, "porticoctl route %s: -team is required\n", verb)
		return exitUsage
	case verb == "put":
		if *file == "" || fs.NArg() > 0 {
			fmt.Fprintln(c.stderr, "porticoctl route put: -f FILE is required, and nothing else")
			return exitUsage
		}
		r := &configv1.Route{}
		if err := readConfigFile(*file, r); err != nil {
			fmt.Fprintf(c.stderr, "porticoctl route put: %v\n", err)
			return exitFailed
		}
		resp, err := c.admin.PutRoute(ctx, connect.NewRequest(&adminv1.PutRouteRequest{Team: *team, Route: r, Message: *msg}))
		if err != nil {
			return c.failed("route put", err)
		}
		change = resp.Msg.GetChange()
	default:
		if fs.NArg() != 1 {
			fmt.Fprintln(c.stderr, "porticoctl route delete: which route? porticoctl route delete -team T ID")
			return exitUsage
		}
		resp, err := c.admin.DeleteRoute(ctx, connect.NewRequest(&adminv1.DeleteRouteRequest{Team: *team, Id: fs.Arg(0), Message: *msg}))
		if err != nil {
			return c.failed("route delete", err)
		}
		change = resp.Msg.GetChange()
	}
	if c.json {
		return c.printJSON(change)
	}
	if !change.GetChanged() {
		fmt.Fprintln(c.stdout, "no change")
		return exitOK
	}
	fmt.Fprintf(c.stdout, "version %d\n%s\n", change.GetVersion().GetNumber(), change.GetDiff())
	return exitOK
}

func (c *cli) rollout(ctx context.Context, args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(c.stderr, "porticoctl rollout: status, pause, resume or abort")
		return exitUsage
	}
	var ro *adminv1.Rollout
	var msg proto.Message
	switch args[0] {
	case "status":
		resp, err := c.admin.GetRollout(ctx, connect.NewRequest(&adminv1.GetRolloutRequest{}))
		if err != nil {
			return c.failed("rollout status", err)
		}
		if c.json {
			return c.printJSON(resp.Msg)
		}
		fmt.Fprintf(c.stdout, "target version %d\n", resp.Msg.GetTargetVersion())
		if h := resp.Msg.GetHalted(); h != nil {
			fmt.Fprintf(c.stdout, "halted: node %s refused version %d: %s\n", h.GetNode(), h.GetVersion(), h.GetError())
			for _, o := range h.GetObjects() {
				fmt.Fprintf(c.stdout, "  %s\n", objectLine(o))
			}
		}
		ro = resp.Msg.GetRollout()
	case "pause":
		resp, err := c.admin.PauseRollout(ctx, connect.NewRequest(&adminv1.PauseRolloutRequest{}))
		if err != nil {
			return c.failed("rollout pause", err)
		}
		ro, msg = resp.Msg.GetRollout(), resp.Msg
	case "resume":
		resp, err := c.admin.ResumeRollout(ctx, connect.NewRequest(&adminv1.ResumeRolloutRequest{}))
		if err != nil {
			return c.failed("rollout resume", err)
		}
		ro, msg = resp.Msg.GetRollout(), resp.Msg
	case "abort":
		resp, err := c.admin.AbortRollout(ctx, connect.NewRequest(&adminv1.AbortRolloutRequest{}))
		if err != nil {
			return c.failed("rollout abort", err)
		}
		ro, msg = resp.Msg.GetRollout(), resp.Msg
	default:
		fmt.Fprintf(c.stderr, "porticoctl rollout: %q is not status, pause, resume or abort\n", args[0])
		return exitUsage
	}
	if c.json && msg != nil {
		return c.printJSON(msg)
	}
	if ro == nil {
		fmt.Fprintln(c.stdout, "no staged rollout yet")
		return exitOK
	}
	fmt.Fprintf(c.stdout, "version %d (from %d): %s at stage %s, %d nodes\n", ro.GetVersion(), ro.GetPrevious(), ro.GetState(), ro.GetStage(), ro.GetReached())
	if ro.GetEvidence() != "" {
		fmt.Fprintln(c.stdout, "  "+ro.GetEvidence())
	}
	return exitOK
}

func (c *cli) nodes(ctx context.Context) int {
	resp, err := c.admin.GetRollout(ctx, connect.NewRequest(&adminv1.GetRolloutRequest{}))
	if err != nil {
		return c.failed("nodes", err)
	}
	if c.json {
		return c.printJSON(&adminv1.GetRolloutResponse{Nodes: resp.Msg.GetNodes()})
	}
	for _, n := range resp.Msg.GetNodes() {
		line := fmt.Sprintf("%s\t%s\t%s\tversion %d\tfast lane %d", n.GetId(), n.GetPool(), n.GetRegion(), n.GetVersion(), n.GetFastLaneVersion())
		if ids := n.GetUpstreamIdentities(); len(ids) > 0 {
			line += "\tidentities " + strings.Join(ids, ",")
		}
		if nk := n.GetLastNack(); nk != nil {
			line += fmt.Sprintf("\tNACK version %d: %s", nk.GetVersion(), nk.GetError())
			for _, o := range nk.GetObjects() {
				line += "\n  " + objectLine(o)
			}
		}
		if e := n.GetFastLaneError(); e != "" {
			line += "\tfast lane refused: " + e
		}
		if u := n.GetUnhealthyEndpoints(); len(u) > 0 {
			line += "\tunhealthy " + strings.Join(u, ",")
		}
		fmt.Fprintln(c.stdout, line)
	}
	return exitOK
}

// objectLine names a refused object and why: "team orders cluster pay:
// ...", "platform issuer idp: ...".
func objectLine(o *adminv1.NackObject) string {
	owner := "platform"
	if o.GetTeam() != "" {
		owner = "team " + o.GetTeam()
	}
	line := owner + " " + o.GetKind()
	if o.GetName() != "" {
		line += " " + o.GetName()
	}
	if o.GetError() != "" {
		line += ": " + o.GetError()
	}
	return line
}

// failed prints a refused or failed call: its code and message, and each
// problem with its field path.
func (c *cli) failed(cmd string, err error) int {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		fmt.Fprintf(c.stderr, "porticoctl %s: %v\n", cmd, err)
		return exitFailed
	}
	var problems []string
	for _, d := range ce.Details() {
		m, derr := d.Value()
		if br, ok := m.(*errdetails.BadRequest); derr == nil && ok {
			for _, v := range br.GetFieldViolations() {
				problems = append(problems, v.GetField()+": "+v.GetDescription())
			}
		}
	}
	if len(problems) > 0 {
		fmt.Fprintf(c.stderr, "porticoctl %s: refused (%s), %d problems:\n", cmd, ce.Code(), len(problems))
		for _, p := range problems {
			fmt.Fprintln(c.stderr, "  "+p)
		}
		return exitFailed
	}
	fmt.Fprintf(c.stderr, "porticoctl %s: %s: %s\n", cmd, ce.Code(), ce.Message())
	return exitFailed
}

func (c *cli) printJSON(m proto.Message) int {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		fmt.Fprintf(c.stderr, "porticoctl: %v\n", err)
		return exitFailed
	}
	fmt.Fprintln(c.stdout, string(b))
	return exitOK
}
