package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
	keysv1 "github.com/portico-gw/portico/gen/portico/keys/v1"
	"github.com/portico-gw/portico/gen/portico/keys/v1/keysv1connect"
)

func TestDenyAdd(t *testing.T) {
	t.Parallel()
	// A whole second, so that RFC 3339 carries it exactly.
	ago := time.Now().Add(-5 * time.Minute).Truncate(time.Second).UTC()
	later := ago.Add(time.Hour)
	for name, tc := range map[string]struct {
		args []string
		// The entry's match and issuer, as sent.
		match  *configv1.DenyEntry
		issued string // "now", a time, or "" for none
		// expires: a time, or "now+D" for D from when porticoctl ran,
		// or "issued+D" for D after the sent issued_before.
		expires string
		// tokenExpires is the token_expires sent, RFC 3339, or "".
		tokenExpires string
		out          string
	}{
		"jti, default 15m": {
			args:    []string{"--jti", "b7c1"},
			match:   &configv1.DenyEntry{Match: &configv1.DenyEntry_Jti{Jti: "b7c1"}},
			expires: "now+15m",
			out:     "denied the token with jti b7c1 (every issuer) until ",
		},
		"jti, --ttl shorter than a token lives": {
			args:    []string{"--jti", "b7c1", "--ttl", "5m", "--issuer", "login"},
			match:   &configv1.DenyEntry{Issuer: "login", Match: &configv1.DenyEntry_Jti{Jti: "b7c1"}},
			expires: "now+5m",
			out:     "denied the token with jti b7c1 (issuer login) until ",
		},
		"subject issued before now": {
			args:    []string{"--subject", "user-42", "--issued-before", "now", "--issuer", "login"},
			match:   &configv1.DenyEntry{Issuer: "login", Match: &configv1.DenyEntry_Subject{Subject: "user-42"}},
			issued:  "now",
			expires: "issued+15m",
			out:     "denied subject user-42's tokens issued before ",
		},
		"client issued before a time": {
			args:    []string{"--issued-before", ago.Format(time.RFC3339), "--client-id", "app-compromised"},
			match:   &configv1.DenyEntry{Match: &configv1.DenyEntry_ClientId{ClientId: "app-compromised"}},
			issued:  ago.Format(time.RFC3339),
			expires: ago.Add(15 * time.Minute).Format(time.RFC3339),
			out:     "denied client app-compromised's tokens issued before " + ago.Format(time.RFC3339) + " (every issuer) until " + ago.Add(15*time.Minute).Format(time.RFC3339) + "\non the fast lane as version 42\n",
		},
		"subject, --ttl": {
			args:    []string{"--subject", "user-42", "--issued-before", "now", "--ttl", "1h"},
			match:   &configv1.DenyEntry{Match: &configv1.DenyEntry_Subject{Subject: "user-42"}},
			issued:  "now",
			expires: "now+1h",
		},
		"client, --ttl from now, not from --issued-before": {
			args:    []string{"--client-id", "app-x", "--issued-before", ago.Format(time.RFC3339), "--ttl", "20m"},
			match:   &configv1.DenyEntry{Match: &configv1.DenyEntry_ClientId{ClientId: "app-x"}},
			issued:  ago.Format(time.RFC3339),
			expires: "now+20m",
		},
		"subject, --expires": {
			args:    []string{"--subject", "user-42", "--issued-before", ago.Format(time.RFC3339), "--expires", later.Format(time.RFC3339)},
			match:   &configv1.DenyEntry{Match: &configv1.DenyEntry_Subject{Subject: "user-42"}},
			issued:  ago.Format(time.RFC3339),
			expires: later.Format(time.RFC3339),
		},
		"client, --expires too soon": {
			args:    []string{"--client-id", "app-x", "--issued-before", ago.Format(time.RFC3339), "--expires", ago.Add(10 * time.Minute).Format(time.RFC3339)},
			match:   &configv1.DenyEntry{Match: &configv1.DenyEntry_ClientId{ClientId: "app-x"}},
			issued:  ago.Format(time.RFC3339),
			expires: ago.Add(10 * time.Minute).Format(time.RFC3339),
		},
		"jti, --token-expires in Unix seconds": {
			args:         []string{"--jti", "b7c1", "--token-expires", strconv.FormatInt(later.Unix(), 10)},
			match:        &configv1.DenyEntry{Match: &configv1.DenyEntry_Jti{Jti: "b7c1"}},
			tokenExpires: later.Format(time.RFC3339),
			// The token's exp, being later than the default.
			expires: later.Format(time.RFC3339),
		},
		"jti, --token-expires soon": {
			args:         []string{"--jti", "b7c1", "--token-expires", ago.Add(10 * time.Minute).Format(time.RFC3339)},
			match:        &configv1.DenyEntry{Match: &configv1.DenyEntry_Jti{Jti: "b7c1"}},
			tokenExpires: ago.Add(10 * time.Minute).Format(time.RFC3339),
			expires:      "now+15m",
		},
	} {
		f, url := keyService(t)
		before := time.Now()
		code, out, errOut := ctl(t, keysEnv(url), append([]string{"deny", "add"}, tc.args...)...)
		after := time.Now()
		if code != 0 {
			t.Errorf("%s: deny add = %d %q %q", name, code, out, errOut)
			continue
		}
		e := only[*keysv1.DenyRequest](t, f, keysv1connect.TokenServiceDenyProcedure).GetEntry()
		if e.GetIssuer() != tc.match.GetIssuer() || e.GetJti() != tc.match.GetJti() || e.GetSubject() != tc.match.GetSubject() || e.GetClientId() != tc.match.GetClientId() {
			t.Errorf("%s: Deny(%v), want the match %v", name, e, tc.match)
		}
		issued := e.GetIssuedBefore()
		switch tc.issued {
		case "":
			if issued != nil {
				t.Errorf("%s: issued_before = %v, want none", name, issued.AsTime())
			}
		case "now":
			if issued == nil || issued.AsTime().Before(before) || issued.AsTime().After(after) {
				t.Errorf("%s: issued_before = %v, want the time porticoctl ran", name, issued)
			}
		default:
			if got := formatTime(issued); got != tc.issued || issued.AsTime().Nanosecond() != 0 {
				t.Errorf("%s: issued_before = %v, want %s", name, issued, tc.issued)
			}
		}
		exp := e.GetExpires().AsTime()
		switch {
		case strings.HasPrefix(tc.expires, "now+"):
			d, _ := time.ParseDuration(strings.TrimPrefix(tc.expires, "now+"))
			if exp.Before(before.Add(d)) || exp.After(after.Add(d)) {
				t.Errorf("%s: expires = %v, want %s after porticoctl ran (%v)", name, exp, d, before)
			}
		case strings.HasPrefix(tc.expires, "issued+"):
			d, _ := time.ParseDuration(strings.TrimPrefix(tc.expires, "issued+"))
			if !exp.Equal(issued.AsTime().Add(d)) {
				t.Errorf("%s: expires = %v, want %s after issued_before %v", name, exp, d, issued.AsTime())
			}
		default:
			if got := formatTime(e.GetExpires()); got != tc.expires {
				t.Errorf("%s: expires = %s, want %s", name, got, tc.expires)
			}
		}
		if got := formatTime(e.GetTokenExpires()); e.GetTokenExpires() != nil && got != tc.tokenExpires || e.GetTokenExpires() == nil && tc.tokenExpires != "" {
			t.Errorf("%s: token_expires = %v, want %q", name, e.GetTokenExpires(), tc.tokenExpires)
		}
		// Whatever expires it asks for, the key service and the nodes keep
		// the entry as long as a token it covers lives: nothing to warn of.
		if errOut != "" {
			t.Errorf("%s: stderr %q, want nothing", name, errOut)
		}
		if !strings.HasPrefix(out, tc.out) || !strings.HasSuffix(out, " until "+formatTime(e.GetExpires())+"\non the fast lane as version 42\n") {
			t.Errorf("%s: deny add printed %q, want it to start %q", name, out, tc.out)
		}
	}

	_, url := keyService(t)
	code, out, _ := ctl(t, keysEnv(url), "--output", "json", "deny", "add", "--jti", "b7c1")
	var js struct{ Rev, Version string }
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || js.Rev != "7" || js.Version != "42" {
		t.Errorf("deny add --output json = %d %q", code, out)
	}
}

func TestDenyAddUsage(t *testing.T) {
	t.Parallel()
	f, url := keyService(t)
	long := time.Now().Add(-time.Hour).Format(time.RFC3339)
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"deny alone":                 {[]string{"deny"}, "add or list"},
		"deny nonsense":              {[]string{"deny", "remove"}, `"remove" is not add or list`},
		"no match":                   {[]string{"deny", "add", "--ttl", "5m"}, "one of --jti ID, --subject SUB or --client-id ID"},
		"two matches":                {[]string{"deny", "add", "--jti", "a", "--subject", "b", "--issued-before", "now"}, "one of --jti ID"},
		"subject without time":       {[]string{"deny", "add", "--subject", "user-42"}, "--subject and --client-id need --issued-before TIME"},
		"client without time":        {[]string{"deny", "add", "--client-id", "app-x"}, "--subject and --client-id need --issued-before TIME"},
		"jti with time":              {[]string{"deny", "add", "--jti", "a", "--issued-before", "now"}, "--jti names one token"},
		"token expiry of a subject":  {[]string{"deny", "add", "--subject", "s", "--issued-before", "now", "--token-expires", "1900000000"}, "--token-expires goes with --jti"},
		"bad token expiry":           {[]string{"deny", "add", "--jti", "a", "--token-expires", "tomorrow"}, `--token-expires "tomorrow" is neither an RFC 3339 time nor Unix seconds`},
		"bad issued-before":          {[]string{"deny", "add", "--subject", "s", "--issued-before", "yesterday"}, `--issued-before "yesterday" is neither an RFC 3339 time nor "now"`},
		"bad expires":                {[]string{"deny", "add", "--jti", "a", "--expires", "soon"}, `--expires "soon" is not an RFC 3339 time`},
		"expires and ttl":            {[]string{"deny", "add", "--jti", "a", "--expires", "2099-01-01T00:00:00Z", "--ttl", "5m"}, "--expires or --ttl, not both"},
		"zero ttl":                   {[]string{"deny", "add", "--jti", "a", "--ttl", "0s"}, "--ttl is more than 0, not 0s"},
		"negative ttl":               {[]string{"deny", "add", "--jti", "a", "--ttl", "-5m"}, "--ttl is more than 0"},
		"expires in the past":        {[]string{"deny", "add", "--jti", "a", "--expires", long}, "the entry would lapse at once: " + long},
		"every token long expired":   {[]string{"deny", "add", "--subject", "s", "--issued-before", long}, "the entry would lapse at once"},
		"an argument":                {[]string{"deny", "add", "--jti", "a", "b"}, `unexpected "b"`},
		"list with an argument":      {[]string{"deny", "list", "--all"}, "unknown flag: --all"},
		"an unknown flag":            {[]string{"deny", "add", "--sub", "s"}, "unknown flag: --sub"},
		"a duration that is not one": {[]string{"deny", "add", "--jti", "a", "--ttl", "15"}, `invalid argument "15" for "--ttl" flag`},
	} {
		code, out, errOut := ctl(t, keysEnv(url), tc.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: %v = %d %q %q, want 2 and %q", name, tc.args, code, out, errOut, tc.want)
		}
	}
	if calls := f.requests(); len(calls) != 0 {
		t.Errorf("bad usage called %v", calls)
	}
}

func TestDenyList(t *testing.T) {
	t.Parallel()
	f, url := keyService(t)
	at := func(s string) *timestamppb.Timestamp {
		ts, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return timestamppb.New(ts)
	}
	f.entries = []*configv1.DenyEntry{
		{Match: &configv1.DenyEntry_Jti{Jti: "b7c1"}, Expires: at("2026-11-29T18:15:00Z")},
		{Issuer: "login", Match: &configv1.DenyEntry_Subject{Subject: "user-42"}, IssuedBefore: at("2026-11-29T18:00:00Z"), Expires: at("2026-11-29T18:15:00Z")},
		{Match: &configv1.DenyEntry_ClientId{ClientId: "app-compromised"}, IssuedBefore: at("2026-11-29T18:00:00Z"), Expires: at("2026-11-29T18:15:00Z")},
	}
	code, out, errOut := ctl(t, keysEnv(url), "deny", "list")
	want := `MATCH                   ISSUER  ISSUED BEFORE         EXPIRES
jti b7c1                -       -                     2026-11-29T18:15:00Z
subject user-42         login   2026-11-29T18:00:00Z  2026-11-29T18:15:00Z
client app-compromised  -       2026-11-29T18:00:00Z  2026-11-29T18:15:00Z
`
	if code != 0 || out != want || errOut != "" {
		t.Errorf("deny list = %d %q %q, want\n%s", code, out, errOut, want)
	}
	only[*keysv1.ListDenyEntriesRequest](t, f, keysv1connect.TokenServiceListDenyEntriesProcedure)
	code, out, _ = ctl(t, keysEnv(url), "--output", "json", "deny", "list")
	var js struct {
		Entries []struct{ Jti, Subject, ClientID, Issuer string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || len(js.Entries) != 3 || js.Entries[0].Jti != "b7c1" || js.Entries[1].Issuer != "login" || js.Entries[2].ClientID != "app-compromised" {
		t.Errorf("deny list --output json = %d %q", code, out)
	}
}
