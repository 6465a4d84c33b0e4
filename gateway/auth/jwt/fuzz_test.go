package jwt_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"

	"github.com/portico-gw/portico/gateway/auth/jwt"
	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// FuzzPreparse feeds the pre-parser arbitrary tokens, and arbitrary header
// and payload JSON inside well-formed segments. It must never panic, never
// accept what golang-jwt's parser calls malformed, and read alg, kid, iss
// and the claims exactly as encoding/json (through golang-jwt) does.
func FuzzPreparse(f *testing.F) {
	key := newSigner(f, "ES256", "k1")
	for _, tok := range []string{
		key.mint(f, claims()),
		key.mint(f, claims("aud", []string{"a", "b"}, "scp", []string{"x", "y"}, "nbf", 1.5)),
		key.mint(f, claims("sub", "é\u2028\"\\/", "tenant", "t", "plan", "p", "azp", "z", "client_id", "c")),
		"e30.e30.e30", "a.b.c", "..", "", "e30.e30.", "eyJhbGciOiJub25lIn0.e30.",
	} {
		f.Add(tok, `{"alg":"ES256","kid":"k1"}`, `{"iss":"x","sub":"s"}`)
	}
	for _, j := range [][2]string{
		{`{"alg":"ES256","kid":"k1","alg":"none"}`, `{"iss":"x"}`},
		{`{"alg":"ES256","kid":"a\u002fb"}`, `{"iss":"x"}`},
		{`{"alg":"ES256","kid":"k1","crit":[]}`, `{"iss":"x"}`},
		{`{"alg":"ES256","kid":"k1"}`, `{"iss":"x","s\u0075b":"a","sub":"b"}`},
		{`{"alg":"ES256","kid":"k1"}`, `{"iss":"x","aud":["a",{"b":[1,2,{"c":null}]}],"exp":1e3}`},
		{`{"alg":"ES256","kid":"k1"}`, `{"iss":"x","exp":-0.5e-3,"iat":1E+2,"sub":"\ud83d\ude00"}`},
		{`{"alg":"ES256","kid":"k1"} `, ` {"iss" : "x" , "scope":"a b"}` + "\n"},
		{`{"alg":"ES256","kid":"k1"}`, `{"iss":"x","sub":"\ud800"}`},
		{`{"alg":"ES256","kid":"k1"}`, `{"iss":"x","n":1e400}`},
		{`{"alg":"ES256","kid":"k1"}`, `{"iss":"x","n":01}`},
		{`{"alg":"ES256","kid":"k1"}`, `{"iss":"x",}`},
		{`{"alg":"ES256","kid":"k1"}`, "{\"iss\":\"x\",\"sub\":\"\xff\"}"},
	} {
		f.Add("", j[0], j[1])
	}
	f.Fuzz(func(t *testing.T, token, header, payload string) {
		checkPreparse(t, token)
		checkPreparse(t, b64([]byte(header))+"."+b64([]byte(payload))+".c2ln")
	})
}

func checkPreparse(t *testing.T, token string) {
	p, reason := jwt.Preparse(token)
	if reason != "" {
		return
	}
	parsed, _, err := gojwt.NewParser().ParseUnverified(token, gojwt.MapClaims{})
	if errors.Is(err, gojwt.ErrTokenMalformed) {
		t.Fatalf("Preparse accepted a token golang-jwt calls malformed: %v", err)
	}
	if parsed == nil || parsed.Header == nil {
		t.Fatalf("golang-jwt read no header: %v", err)
	}
	if got := parsed.Header["alg"]; got != p.Alg {
		t.Errorf("alg: Preparse %q, golang-jwt %v", p.Alg, got)
	}
	if got := parsed.Header["kid"]; got != p.KID {
		t.Errorf("kid: Preparse %q, golang-jwt %v", p.KID, got)
	}
	if _, ok := parsed.Header["crit"]; ok {
		t.Errorf("Preparse accepted crit")
	}
	if strings.Trim(p.KID, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != "" || p.KID == "" {
		t.Errorf("Preparse accepted kid %q", p.KID)
	}
	mc := parsed.Claims.(gojwt.MapClaims)
	if got := mc["iss"]; got != p.Iss {
		t.Errorf("iss: Preparse %q, golang-jwt %v", p.Iss, got)
	}
	if p.ClaimsReason != "" {
		return
	}
	for _, c := range []struct {
		name string
		got  string
	}{
		{"sub", p.Sub}, {"jti", p.JTI}, {"client_id", p.ClientID}, {"azp", p.AZP},
		{"scope", p.Scope}, {"tenant", p.Tenant}, {"plan", p.Plan},
	} {
		want, _ := mc[c.name].(string) // absent and null read as ""
		if c.got != want {
			t.Errorf("%s: Preparse %q, encoding/json %q", c.name, c.got, want)
		}
	}
	if _, ok := mc["scope"]; ok != p.HasScope && mc["scope"] != nil {
		t.Errorf("scope present: Preparse %v, encoding/json %v", p.HasScope, ok)
	}
	if s, ok := mc["scp"].(string); ok && s != p.Scp {
		t.Errorf("scp: Preparse %q, encoding/json %q", p.Scp, s)
	}
	if arr, ok := mc["scp"].([]any); ok {
		var parts []string
		for _, a := range arr {
			parts = append(parts, a.(string))
		}
		if got := strings.Join(parts, " "); got != p.Scp {
			t.Errorf("scp: Preparse %q, encoding/json %q", p.Scp, got)
		}
	}
	aud, err := mc.GetAudience()
	if err != nil {
		t.Errorf("Preparse accepted aud golang-jwt refuses: %v", err)
	}
	if len(aud) == 1 && aud[0] == "" {
		aud = nil
	}
	if !slices.Equal(aud, p.Aud) {
		t.Errorf("aud: Preparse %q, golang-jwt %q", p.Aud, aud)
	}
	for _, c := range []struct {
		name string
		has  bool
		got  float64
	}{{"exp", p.HasExp, p.Exp}, {"iat", p.HasIat, p.Iat}} {
		want, ok := mc[c.name].(float64)
		if ok != c.has || ok && want != c.got {
			t.Errorf("%s: Preparse %v %v, encoding/json %v %v", c.name, c.has, c.got, ok, want)
		}
	}
}

// FuzzVerify: Verify never panics, refuses with an *Error whose text holds
// no part of the token, and accepts only tokens the test signed.
func FuzzVerify(f *testing.F) {
	key := newSigner(f, "ES256", "k1")
	rs := newSigner(f, "RS256", "r1")
	valid := map[string]bool{}
	for _, c := range []map[string]any{
		claims(),
		claims("aud", []string{"x", "api"}, "scp", []string{"a", "b"}, "client_id", "c"),
		claims("sub", "alice", "iat", t0.Add(-2*time.Minute).Unix(), "plan", "gold"),
	} {
		for _, s := range []*signer{key, rs} {
			tok := s.mint(f, c)
			valid[tok] = true
			f.Add(tok)
		}
	}
	f.Add(raw(`{"alg":"none","kid":"k1"}`, payloadJSON(claims()), nil))
	f.Add(raw(`{"alg":"HS256","kid":"k1"}`, payloadJSON(claims()), []byte("0123456789abcdef0123456789abcdef")))
	f.Add("")
	v := newVerifier(f, nil, jwt.Options{CacheSize: 64}, issuer(jwksOf(key, rs), algs(es256, rs256)))
	if err := v.Update(
		[]*configv1.Issuer{issuer(jwksOf(key, rs), algs(es256, rs256))},
		[]*configv1.DenyEntry{denySubject("", "alice", t0.Add(-time.Minute))},
	); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, token string) {
		c, err := verify(t, v, token)
		if err == nil && !valid[token] {
			t.Fatalf("Verify accepted a token nobody signed: %+v", c)
		}
	})
}
