package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
)

// defaultLifetime is how long past the newest token it covers
// (issued_before, or now for a jti) an entry asks to last by default: the
// seed's token lifetime. It is only what the entry asks for: the key
// service and the nodes keep it until every token it covers is dead,
// for the issuer's max_token_lifetime (gateway/denyentry).
const defaultLifetime = 15 * time.Minute

// deny runs porticoctl deny: the token service's deny list of access
// tokens.
func (c *cli) deny(ctx context.Context, args []string) int {
	return c.dispatch(ctx, "deny", args, subcommand{"add", c.denyAdd}, subcommand{"list", c.denyList})
}

func (c *cli) denyAdd(ctx context.Context, args []string) int {
	const cmd = "deny add"
	fs := c.flags(cmd)
	jti := fs.String("jti", "", "deny the one token with this jti")
	subject := fs.String("subject", "", "deny the subject's tokens issued before -issued-before")
	clientID := fs.String("client-id", "", "deny the client's tokens issued before -issued-before")
	issuedBefore := fs.String("issued-before", "", `with -subject or -client-id: RFC 3339, or "now"`)
	issuer := fs.String("issuer", "", "only this issuer's tokens (default every issuer's)")
	tokenExpires := fs.String("token-expires", "", "with -jti: the token's exp, RFC 3339 or Unix seconds, so that the entry lasts until then even for a token without iat")
	expires := fs.String("expires", "", "when the entry asks to lapse, RFC 3339; nodes keep it until every token it covers has expired")
	ttl := fs.Duration("ttl", 0, "the entry asks to lapse this long from now (default 15m after -issued-before, or after now for -jti)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	ttlSet := false
	fs.Visit(func(f *flag.Flag) { ttlSet = ttlSet || f.Name == "ttl" })
	now := time.Now()
	e, base, problem := denyEntry(now, *jti, *subject, *clientID, *issuedBefore)
	var lapse time.Time
	if problem == "" && *tokenExpires != "" {
		problem = tokenExp(e, *tokenExpires)
	}
	switch {
	case problem != "":
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected %q: all of deny add's arguments are flags", fs.Arg(0))
	case *expires != "" && ttlSet:
		problem = "-expires or -ttl, not both"
	case *expires != "":
		var err error
		if lapse, err = time.Parse(time.RFC3339, *expires); err != nil {
			problem = fmt.Sprintf("-expires %q is not an RFC 3339 time", *expires)
		}
	case ttlSet:
		if *ttl <= 0 {
			problem = fmt.Sprintf("-ttl is more than 0, not %s", *ttl)
		}
		lapse = now.Add(*ttl)
	default:
		lapse = base.Add(defaultLifetime)
		if te := e.GetTokenExpires(); te != nil && te.AsTime().After(lapse) {
			lapse = te.AsTime()
		}
	}
	if problem == "" && !lapse.After(now) {
		problem = fmt.Sprintf("the entry would lapse at once: %s is not in the future", lapse.Format(time.RFC3339))
	}
	if problem != "" {
		fmt.Fprintf(c.stderr, "porticoctl %s: %s\n", cmd, problem)
		return exitUsage
	}
	e.Issuer = *issuer
	e.Expires = timestamppb.New(lapse)
	resp, err := c.tokens.Deny(ctx, connect.NewRequest(&keysv1.DenyRequest{Entry: e}))
	if err != nil {
		return c.failed(cmd, err)
	}
	if c.json {
		return c.printJSON(resp.Msg)
	}
	fmt.Fprintf(c.stdout, "denied %s (%s) until %s\n", denyMatch(e), denyIssuer(e), formatTime(e.GetExpires()))
	c.printLane(cmd, resp.Msg.GetVersion())
	return exitOK
}

// tokenExp sets a jti entry's token_expires from v, an RFC 3339 time or
// Unix seconds (a token's exp as it is), and says what is wrong if
// anything is.
func tokenExp(e *configv1.DenyEntry, v string) (problem string) {
	if e.GetJti() == "" {
		return "-token-expires goes with -jti: it is one token's exp"
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		secs, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || secs <= 0 {
			return fmt.Sprintf("-token-expires %q is neither an RFC 3339 time nor Unix seconds", v)
		}
		t = time.Unix(secs, 0)
	}
	e.TokenExpires = timestamppb.New(t)
	return ""
}

// denyEntry builds a deny entry's match from the flags: exactly one of
// jti, subject and clientID, with issuedBefore for a subject or client.
// base is when the newest covered token may have been issued: issued
// before, or now for a jti.
func denyEntry(now time.Time, jti, subject, clientID, issuedBefore string) (e *configv1.DenyEntry, base time.Time, problem string) {
	e = &configv1.DenyEntry{}
	n := 0
	for _, v := range []string{jti, subject, clientID} {
		if v != "" {
			n++
		}
	}
	switch {
	case n != 1:
		return nil, now, "one of -jti ID, -subject SUB or -client-id ID"
	case jti != "":
		if issuedBefore != "" {
			return nil, now, "-issued-before goes with -subject or -client-id; -jti names one token"
		}
		e.Match = &configv1.DenyEntry_Jti{Jti: jti}
		return e, now, ""
	case issuedBefore == "":
		return nil, now, `-subject and -client-id need -issued-before TIME (RFC 3339, or "now")`
	case subject != "":
		e.Match = &configv1.DenyEntry_Subject{Subject: subject}
	default:
		e.Match = &configv1.DenyEntry_ClientId{ClientId: clientID}
	}
	base = now
	if issuedBefore != "now" {
		t, err := time.Parse(time.RFC3339, issuedBefore)
		if err != nil {
			return nil, now, fmt.Sprintf(`-issued-before %q is neither an RFC 3339 time nor "now"`, issuedBefore)
		}
		base = t
	}
	e.IssuedBefore = timestamppb.New(base)
	return e, base, ""
}

func (c *cli) denyList(ctx context.Context, args []string) int {
	const cmd = "deny list"
	if len(args) > 0 {
		fmt.Fprintf(c.stderr, "porticoctl %s: unexpected %q: deny list takes no arguments\n", cmd, args[0])
		return exitUsage
	}
	resp, err := c.tokens.ListDenyEntries(ctx, connect.NewRequest(&keysv1.ListDenyEntriesRequest{}))
	if err != nil {
		return c.failed(cmd, err)
	}
	if c.json {
		return c.printJSON(resp.Msg)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MATCH\tISSUER\tISSUED BEFORE\tEXPIRES")
	for _, e := range resp.Msg.GetEntries() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", denyMatchShort(e), dash(e.GetIssuer()), dash(formatTime(e.GetIssuedBefore())), formatTime(e.GetExpires()))
	}
	if err := tw.Flush(); err != nil {
		fmt.Fprintf(c.stderr, "porticoctl %s: %v\n", cmd, err)
		return exitFailed
	}
	return exitOK
}

// denyMatch says in words which tokens an entry denies.
func denyMatch(e *configv1.DenyEntry) string {
	switch m := e.GetMatch().(type) {
	case *configv1.DenyEntry_Jti:
		return fmt.Sprintf("the token with jti %s", m.Jti)
	case *configv1.DenyEntry_Subject:
		return fmt.Sprintf("subject %s's tokens issued before %s", m.Subject, formatTime(e.GetIssuedBefore()))
	case *configv1.DenyEntry_ClientId:
		return fmt.Sprintf("client %s's tokens issued before %s", m.ClientId, formatTime(e.GetIssuedBefore()))
	}
	return "nothing"
}

// denyMatchShort is an entry's match for a table cell: "subject user-42".
func denyMatchShort(e *configv1.DenyEntry) string {
	switch m := e.GetMatch().(type) {
	case *configv1.DenyEntry_Jti:
		return "jti " + m.Jti
	case *configv1.DenyEntry_Subject:
		return "subject " + m.Subject
	case *configv1.DenyEntry_ClientId:
		return "client " + m.ClientId
	}
	return "-"
}

func denyIssuer(e *configv1.DenyEntry) string {
	if e.GetIssuer() == "" {
		return "every issuer"
	}
	return "issuer " + e.GetIssuer()
}
