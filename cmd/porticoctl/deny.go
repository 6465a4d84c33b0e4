package main

import (
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
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

// denyCmd is porticoctl deny: the token service's deny list of access
// tokens.
func (c *cli) denyCmd() *cobra.Command {
	return group(&cobra.Command{
		Use:   "deny",
		Short: "Deny access tokens, and list the deny entries",
		Long: `Deny manages the deny list of the key service's token service: access tokens
that nodes refuse although their signature and times are good.`,
	}, c.remote(c.denyAddCmd()), c.remote(c.denyListCmd()))
}

func (c *cli) denyAddCmd() *cobra.Command {
	var jti, subject, clientID, issuedBefore, issuer, tokenExpires, expires string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "add (--jti ID | --subject SUB --issued-before TIME | --client-id ID --issued-before TIME) [flags]",
		Short: "Deny one token, or a subject's or client's tokens issued before a time",
		Long: `Add denies one token (--jti ID, with --token-expires EXP, the token's exp, if
it is known), or a subject's or client's tokens issued before TIME, of one
issuer (--issuer) or of every issuer.

The entry asks to lapse at --expires, or --ttl from now, by default 15m after
--issued-before, or after now for --jti (or at the token's exp, EXP, if
later); nodes keep it until every token it covers has expired, for the
issuer's max_token_lifetime.

TIME is RFC 3339 (2026-11-29T18:00:00Z); --issued-before also takes "now".
EXP is RFC 3339 or Unix seconds (a token's exp claim).`,
		Example: `  porticoctl deny add --jti b7c1 --token-expires 1764440100
  porticoctl deny add --subject user-42 --issued-before now --issuer login
  porticoctl deny add --client-id app-compromised --issued-before 2026-11-29T18:00:00Z --ttl 1h`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ttlSet := cmd.Flags().Changed("ttl")
			now := time.Now()
			e, base, problem := denyEntry(now, jti, subject, clientID, issuedBefore)
			var lapse time.Time
			if problem == "" && tokenExpires != "" {
				problem = tokenExp(e, tokenExpires)
			}
			switch {
			case problem != "":
			case expires != "" && ttlSet:
				problem = "--expires or --ttl, not both"
			case expires != "":
				var err error
				if lapse, err = time.Parse(time.RFC3339, expires); err != nil {
					problem = fmt.Sprintf("--expires %q is not an RFC 3339 time", expires)
				}
			case ttlSet:
				if ttl <= 0 {
					problem = fmt.Sprintf("--ttl is more than 0, not %s", ttl)
				}
				lapse = now.Add(ttl)
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
				return usagef("%s", problem)
			}
			e.Issuer = issuer
			e.Expires = timestamppb.New(lapse)
			resp, err := c.tokens.Deny(cmd.Context(), connect.NewRequest(&keysv1.DenyRequest{Entry: e}))
			if err != nil {
				return failed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			fmt.Fprintf(c.stdout, "denied %s (%s) until %s\n", denyMatch(e), denyIssuer(e), formatTime(e.GetExpires()))
			c.printLane(cmd.CommandPath(), resp.Msg.GetVersion())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&jti, "jti", "", "deny the one token whose jti is `ID`")
	f.StringVar(&subject, "subject", "", "deny the subject `SUB`'s tokens issued before --issued-before")
	f.StringVar(&clientID, "client-id", "", "deny the client `ID`'s tokens issued before --issued-before")
	f.StringVar(&issuedBefore, "issued-before", "", "with --subject or --client-id: RFC 3339 `TIME`, or \"now\"")
	f.StringVar(&issuer, "issuer", "", "only the tokens of the issuer `NAME` (default every issuer's)")
	f.StringVar(&tokenExpires, "token-expires", "", "with --jti: the token's exp `EXP`, RFC 3339 or Unix seconds, so that the entry lasts until then even for a token without iat")
	f.StringVar(&expires, "expires", "", "when the entry asks to lapse, RFC 3339 `TIME`; nodes keep it until every token it covers has expired")
	f.DurationVar(&ttl, "ttl", 0, "the entry asks to lapse this long from now (default 15m after --issued-before, or after now for --jti)")
	return cmd
}

// tokenExp sets a jti entry's token_expires from v, an RFC 3339 time or
// Unix seconds (a token's exp as it is), and says what is wrong if
// anything is.
func tokenExp(e *configv1.DenyEntry, v string) (problem string) {
	if e.GetJti() == "" {
		return "--token-expires goes with --jti: it is one token's exp"
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		secs, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || secs <= 0 {
			return fmt.Sprintf("--token-expires %q is neither an RFC 3339 time nor Unix seconds", v)
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
		return nil, now, "one of --jti ID, --subject SUB or --client-id ID"
	case jti != "":
		if issuedBefore != "" {
			return nil, now, "--issued-before goes with --subject or --client-id; --jti names one token"
		}
		e.Match = &configv1.DenyEntry_Jti{Jti: jti}
		return e, now, ""
	case issuedBefore == "":
		return nil, now, `--subject and --client-id need --issued-before TIME (RFC 3339, or "now")`
	case subject != "":
		e.Match = &configv1.DenyEntry_Subject{Subject: subject}
	default:
		e.Match = &configv1.DenyEntry_ClientId{ClientId: clientID}
	}
	base = now
	if issuedBefore != "now" {
		t, err := time.Parse(time.RFC3339, issuedBefore)
		if err != nil {
			return nil, now, fmt.Sprintf(`--issued-before %q is neither an RFC 3339 time nor "now"`, issuedBefore)
		}
		base = t
	}
	e.IssuedBefore = timestamppb.New(base)
	return e, base, ""
}

func (c *cli) denyListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the deny entries",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := c.tokens.ListDenyEntries(cmd.Context(), connect.NewRequest(&keysv1.ListDenyEntriesRequest{}))
			if err != nil {
				return failed(err)
			}
			if c.structured() {
				return c.printMessage(resp.Msg)
			}
			t := newTable(c.stdout, "MATCH", "ISSUER", "ISSUED BEFORE", "EXPIRES")
			for _, e := range resp.Msg.GetEntries() {
				t.row(denyMatchShort(e), e.GetIssuer(), formatTime(e.GetIssuedBefore()), formatTime(e.GetExpires()))
			}
			return t.flush()
		},
	}
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
