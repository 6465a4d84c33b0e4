package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/portico-gw/portico/gen/portico/admin/v1"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// messageFlag adds -m/--message, why a change is made, to cmd.
func messageFlag(cmd *cobra.Command, msg *string) {
	cmd.Flags().StringVarP(msg, "message", "m", "", "why: the `TEXT` the version list shows")
}

// applyCmd is apply, or diff: what apply would change.
func (c *cli) applyCmd(name string) *cobra.Command {
	var dir, msg string
	cmd := &cobra.Command{
		Use:   name + " -f DIR [flags]",
		Short: "Replace the team's routes, clusters and services with DIR's",
		Long: `Apply replaces the team's routes, clusters and services with those of the
directory DIR: a new version. Every .yaml, .yml and .json file in it is a
TeamConfig document (team, routes, clusters, services) naming the same team.
A service whose descriptors list .proto sources without content gets them
from the files of those names in DIR; one with no descriptors gets
DIR/<id>.binpb, a FileDescriptorSet (from buf build -o).

A refused apply lists each problem with its field path and exits 1.`,
		Example: `  porticoctl apply -f teams/orders/ -m "the export route"`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usagef("-f DIR is required")
			}
			tc, err := loadTeamDir(dir)
			if err != nil {
				return &failure{err: err}
			}
			resp, err := c.admin.ApplyTeam(cmd.Context(), connect.NewRequest(&adminv1.ApplyTeamRequest{Config: tc, Message: msg, DryRun: name == "diff"}))
			if err != nil {
				return failed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			ch := resp.Msg.GetChange()
			switch {
			case ch.GetDiff() == "":
				fmt.Fprintf(c.stdout, "no change for team %s\n", tc.GetTeam())
			case name == "diff":
				fmt.Fprintln(c.stdout, ch.GetDiff())
			default:
				fmt.Fprintf(c.stdout, "version %d (sha256 %s)\n%s\n", ch.GetVersion().GetNumber(), ch.GetVersion().GetSha256(), ch.GetDiff())
			}
			return nil
		},
	}
	if name == "diff" {
		cmd.Short = "Show what apply -f DIR would change, without changing it"
		cmd.Long = "Diff shows what apply would change: the objects it would add (+), change (~)\nand delete (-). It changes nothing; a refusal exits 1 as apply's would."
		cmd.Example = `  porticoctl diff -f teams/orders/`
	}
	cmd.Flags().StringVarP(&dir, "file", "f", "", "the team's directory `DIR`")
	must(cmd.MarkFlagDirname("file"))
	messageFlag(cmd, &msg)
	return c.remote(cmd)
}

func (c *cli) versionsCmd() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "versions",
		Short: "List the newest versions",
		Long: `Versions lists the newest versions, newest first: number, when, by whom, the
sha256 of its snapshot and its message. A team admin sees the versions that
changed the team's objects, a platform admin every version.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := c.admin.ListVersions(cmd.Context(), connect.NewRequest(&adminv1.ListVersionsRequest{Limit: int32(min(max(limit, 0), 1000))}))
			if err != nil {
				return failed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			t := newTable(c.stdout, "VERSION", "CREATED", "AUTHOR", "SHA256", "MESSAGE")
			for _, v := range resp.Msg.GetVersions() {
				sha := v.GetSha256()
				if len(sha) > 12 {
					sha = sha[:12]
				}
				t.row(strconv.FormatInt(v.GetNumber(), 10), v.GetCreatedAt().AsTime().Format(time.RFC3339), v.GetCreatedBy(), sha, v.GetMessage())
			}
			return t.flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "list the newest `N` versions (at most 1000)")
	return c.remote(cmd)
}

func (c *cli) rollbackCmd() *cobra.Command {
	var msg string
	cmd := &cobra.Command{
		Use:   "rollback N [flags]",
		Short: "Make a new version equal to version N (platform admins)",
		Long: `Rollback makes a new version whose snapshot is version N's, and rolls it out
as any other version. Only platform admins may.`,
		Example: `  porticoctl rollback 41 -m "41 was the last good one"`,
		Args:    oneArg("version"),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || n <= 0 {
				return usagef("%q is not a version number", args[0])
			}
			resp, err := c.admin.Rollback(cmd.Context(), connect.NewRequest(&adminv1.RollbackRequest{To: n, Message: msg}))
			if err != nil {
				return failed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			ch := resp.Msg.GetChange()
			if !ch.GetChanged() {
				fmt.Fprintf(c.stdout, "version %d already runs version %d's snapshot\n", ch.GetVersion().GetNumber(), n)
				return nil
			}
			fmt.Fprintf(c.stdout, "version %d = version %d\n%s\n", ch.GetVersion().GetNumber(), n, ch.GetDiff())
			return nil
		},
	}
	messageFlag(cmd, &msg)
	return c.remote(cmd)
}

// ownerships is the value of team put's repeatable --own.
type ownerships []*adminv1.Ownership

func (o *ownerships) String() string { return "" }
func (o *ownerships) Type() string   { return "[HOST]/PREFIX" }

func (o *ownerships) Set(v string) error {
	i := strings.IndexByte(v, '/')
	if i < 0 {
		return fmt.Errorf("%q: want HOST/PREFIX or /PREFIX", v)
	}
	*o = append(*o, &adminv1.Ownership{Host: v[:i], PathPrefix: v[i:]})
	return nil
}

// upstreams is the value of team put's repeatable --upstream.
type upstreams []*adminv1.Upstream

func (u *upstreams) String() string { return "" }
func (u *upstreams) Type() string   { return "ADDRESS[:PORTS]" }

func (u *upstreams) Set(v string) error {
	up, err := parseUpstream(v)
	if err == nil {
		*u = append(*u, up)
	}
	return err
}

func (c *cli) teamCmd() *cobra.Command {
	var (
		owns ownerships
		ups  upstreams
		msg  string
	)
	put := &cobra.Command{
		Use:   "put NAME --own [HOST]/PREFIX... --upstream ADDRESS[:PORTS]... [flags]",
		Short: "Declare a team, the space it owns and the backends it may use (platform admins)",
		Long: `Put declares the team NAME, or replaces its declaration: the hosts and path
prefixes it owns (--own api.example.com/v1/orders, or --own /internal/orders
on every host) and the backends its clusters may send to (--upstream: a host,
*.domain or CIDR, each with optional ports). Both flags repeat. Only platform
admins may.`,
		Example: `  porticoctl team put orders --own api.example.com/v1/orders --own /internal/orders \
      --upstream '*.orders.internal' --upstream 10.20.0.0/16:443,8000-8099`,
		Args: oneArg("team"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			resp, err := c.admin.PutTeam(cmd.Context(), connect.NewRequest(&adminv1.PutTeamRequest{Team: &adminv1.Team{Name: name, Owns: owns, Upstreams: ups}, Message: msg}))
			if err != nil {
				return failed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			c.printChange(resp.Msg.GetChange(), "team "+name)
			return nil
		},
	}
	put.Flags().Var(&owns, "own", "a host and path prefix the team owns, or /PREFIX on every host (repeatable)")
	put.Flags().Var(&ups, "upstream", "backends the team's clusters may use: HOST, *.DOMAIN or CIDR, each with optional :PORTS (443,8000-8099) (repeatable)")
	messageFlag(put, &msg)
	return group(&cobra.Command{
		Use:   "team",
		Short: "Declare teams (platform admins)",
	}, c.remote(put))
}

// printChange prints what a write did to what.
func (c *cli) printChange(ch *adminv1.Change, what string) {
	if !ch.GetChanged() {
		fmt.Fprintf(c.stdout, "no change for %s\n", what)
		return
	}
	fmt.Fprintf(c.stdout, "version %d\n%s\n", ch.GetVersion().GetNumber(), ch.GetDiff())
}

// routeCmd puts or deletes one route of a team.
func (c *cli) routeCmd() *cobra.Command {
	var team, file, msg string
	show := func(ch *adminv1.Change) error {
		if c.structured() {
			return c.printMessage(ch)
		}
		if !ch.GetChanged() {
			fmt.Fprintln(c.stdout, "no change")
			return nil
		}
		fmt.Fprintf(c.stdout, "version %d\n%s\n", ch.GetVersion().GetNumber(), ch.GetDiff())
		return nil
	}
	put := &cobra.Command{
		Use:   "put --team T -f FILE [flags]",
		Short: "Create or replace one route of a team",
		Long: `Put creates or replaces one route of the team T, read from FILE (YAML, or
JSON by its .json name), without touching the team's other objects.`,
		Example: `  porticoctl route put --team orders -f route.yaml -m "try v2"`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case team == "":
				return usagef("--team is required")
			case file == "":
				return usagef("-f FILE is required")
			}
			r := &configv1.Route{}
			if err := readConfigFile(file, r); err != nil {
				return &failure{err: err}
			}
			resp, err := c.admin.PutRoute(cmd.Context(), connect.NewRequest(&adminv1.PutRouteRequest{Team: team, Route: r, Message: msg}))
			if err != nil {
				return failed(err)
			}
			return show(resp.Msg.GetChange())
		},
	}
	put.Flags().StringVar(&team, "team", "", "the team `T` whose route it is")
	put.Flags().StringVarP(&file, "file", "f", "", "the route's `FILE`, YAML or JSON")
	must(put.MarkFlagFilename("file", "yaml", "yml", "json"))
	messageFlag(put, &msg)
	del := &cobra.Command{
		Use:     "delete --team T ID [flags]",
		Short:   "Delete one route of a team",
		Example: `  porticoctl route delete --team orders orders.export`,
		Args:    oneArg("route"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if team == "" {
				return usagef("--team is required")
			}
			resp, err := c.admin.DeleteRoute(cmd.Context(), connect.NewRequest(&adminv1.DeleteRouteRequest{Team: team, Id: args[0], Message: msg}))
			if err != nil {
				return failed(err)
			}
			return show(resp.Msg.GetChange())
		},
	}
	del.Flags().StringVar(&team, "team", "", "the team `T` whose route it is")
	messageFlag(del, &msg)
	return group(&cobra.Command{
		Use:   "route",
		Short: "Put or delete one route of a team",
	}, c.remote(put), c.remote(del))
}

func (c *cli) rolloutCmd() *cobra.Command {
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the target version and the newest rollout",
		Long: `Status shows the version the fleet should run, the NACK that halted it if one
did (each refused object with its error), and the newest staged rollout: its
state, stage and how many nodes it reached, the evidence when it was reverted,
halted or paused, and what the stage judged last saw of each changed route:
real calls and failed calls on the nodes running the new version and on those
still on the old, and the canaries' synthetic probes as failed/sent (PROBES).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := c.admin.GetRollout(cmd.Context(), connect.NewRequest(&adminv1.GetRolloutRequest{}))
			if err != nil {
				return failed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			fmt.Fprintf(c.stdout, "target version %d\n", resp.Msg.GetTargetVersion())
			if h := resp.Msg.GetHalted(); h != nil {
				fmt.Fprintf(c.stdout, "halted: node %s refused version %d: %s\n", h.GetNode(), h.GetVersion(), h.GetError())
				for _, o := range h.GetObjects() {
					fmt.Fprintf(c.stdout, "  %s\n", objectLine(o))
				}
			}
			c.printRollout(resp.Msg.GetRollout())
			return nil
		},
	}
	// steer is one of pause, resume and abort.
	steer := func(name, short string, call func(*cobra.Command) (*adminv1.Rollout, proto.Message, error)) *cobra.Command {
		return c.remote(&cobra.Command{
			Use:   name,
			Short: short,
			Args:  noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				ro, msg, err := call(cmd)
				if err != nil {
					return failed(err)
				}
				if c.structured() {
					return c.printMessage(msg)
				}
				c.printRollout(ro)
				return nil
			},
		})
	}
	return group(&cobra.Command{
		Use:   "rollout",
		Short: "Show the newest rollout, or steer it (platform admins)",
		Long: `Rollout shows the newest staged rollout (status); platform admins steer it:
pause holds it at its stage, resume goes on, abort stops it and goes back to
the previous version, committed like a revert.`,
	},
		c.remote(status),
		steer("pause", "Hold the rollout at its stage (platform admins)", func(cmd *cobra.Command) (*adminv1.Rollout, proto.Message, error) {
			resp, err := c.admin.PauseRollout(cmd.Context(), connect.NewRequest(&adminv1.PauseRolloutRequest{}))
			if err != nil {
				return nil, nil, err
			}
			return resp.Msg.GetRollout(), resp.Msg, nil
		}),
		steer("resume", "Go on with a paused rollout (platform admins)", func(cmd *cobra.Command) (*adminv1.Rollout, proto.Message, error) {
			resp, err := c.admin.ResumeRollout(cmd.Context(), connect.NewRequest(&adminv1.ResumeRolloutRequest{}))
			if err != nil {
				return nil, nil, err
			}
			return resp.Msg.GetRollout(), resp.Msg, nil
		}),
		steer("abort", "Stop the rollout and go back to the previous version (platform admins)", func(cmd *cobra.Command) (*adminv1.Rollout, proto.Message, error) {
			resp, err := c.admin.AbortRollout(cmd.Context(), connect.NewRequest(&adminv1.AbortRolloutRequest{}))
			if err != nil {
				return nil, nil, err
			}
			return resp.Msg.GetRollout(), resp.Msg, nil
		}),
	)
}

// printRollout prints a rollout's state in a line, and its evidence.
func (c *cli) printRollout(ro *adminv1.Rollout) {
	if ro == nil {
		fmt.Fprintln(c.stdout, "no staged rollout yet")
		return
	}
	fmt.Fprintf(c.stdout, "version %d (from %d): %s at stage %s, %d nodes\n", ro.GetVersion(), ro.GetPrevious(), ro.GetState(), ro.GetStage(), ro.GetReached())
	if ro.GetEvidence() != "" {
		fmt.Fprintln(c.stdout, "  "+ro.GetEvidence())
	}
	if len(ro.GetRoutes()) > 0 {
		// The calls and probes the last judged stage saw of each changed
		// route; probes as failed/sent.
		t := newTable(c.stdout, "ROUTE", "NEW CALLS", "NEW FAILED", "NEW PROBES", "OLD CALLS", "OLD FAILED", "OLD PROBES")
		u := func(n uint64) string { return strconv.FormatUint(n, 10) }
		for _, e := range ro.GetRoutes() {
			t.row(e.GetRoute(), u(e.GetNewCalls()), u(e.GetNewFailures()), u(e.GetNewProbesFailed())+"/"+u(e.GetNewProbes()),
				u(e.GetOldCalls()), u(e.GetOldFailures()), u(e.GetOldProbesFailed())+"/"+u(e.GetOldProbes()))
		}
		_ = t.flush()
	}
}

func (c *cli) nodesCmd() *cobra.Command {
	return c.remote(&cobra.Command{
		Use:   "nodes",
		Short: "List the connected nodes and what each runs",
		Long: `Nodes lists the connected gateway nodes, a row each: pool, region, the
version and fast-lane version it runs, the upstream identities it holds and
the endpoints it cannot use. Below the table comes what each node refused: its
last NACK, with each refused object and its error, and fast-lane entries. A
team admin sees its own team's identities and endpoints.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := c.admin.GetRollout(cmd.Context(), connect.NewRequest(&adminv1.GetRolloutRequest{}))
			if err != nil {
				return failed(err)
			}
			if c.structured() {
				return c.printMessage(&adminv1.GetRolloutResponse{Nodes: resp.Msg.GetNodes()})
			}
			return printNodes(c.stdout, resp.Msg.GetNodes())
		},
	})
}

// printNodes prints a table of nodes, and below it what each refused: its
// last NACK, with the objects that caused it, and fast-lane entries.
func printNodes(w io.Writer, nodes []*adminv1.Node) error {
	t := newTable(w, "NODE", "POOL", "REGION", "VERSION", "FAST LANE", "IDENTITIES", "UNHEALTHY")
	var refusals []string
	for _, n := range nodes {
		t.row(n.GetId(), n.GetPool(), n.GetRegion(), strconv.FormatInt(n.GetVersion(), 10), strconv.FormatUint(n.GetFastLaneVersion(), 10),
			strings.Join(n.GetUpstreamIdentities(), ","), strings.Join(n.GetUnhealthyEndpoints(), ","))
		if nk := n.GetLastNack(); nk != nil {
			refusals = append(refusals, fmt.Sprintf("%s refused version %d: %s", n.GetId(), nk.GetVersion(), nk.GetError()))
			for _, o := range nk.GetObjects() {
				refusals = append(refusals, "  "+objectLine(o))
			}
		}
		if e := n.GetFastLaneError(); e != "" {
			refusals = append(refusals, fmt.Sprintf("%s refused fast-lane entries: %s", n.GetId(), e))
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(refusals) > 0 {
		if _, err := fmt.Fprintf(w, "\n%s\n", strings.Join(refusals, "\n")); err != nil {
			return &failure{err: err}
		}
	}
	return nil
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
