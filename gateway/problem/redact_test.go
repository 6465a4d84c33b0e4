package problem_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/problem"
)

const (
	testKey = "ak_live_4eC39HqLyjWDarjtT1zdp7dcXYZ0aB"
	testJWT = "eyJhbGciOiJFUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJ1c2VyLTEiLCJleHAiOjE3MDAwMDAwMDB9.MEUCIQDx_ab-cd"
)

var b64 = base64.RawURLEncoding.EncodeToString

// spaced is a JWT whose header and payload JSON are header and payload as
// written, white space and all, with a made-up signature.
func spaced(header, payload string) string {
	return b64([]byte(header)) + "." + b64([]byte(payload)) + ".MEUCIQDx_ab-cd"
}

func TestRedact(t *testing.T) {
	t.Parallel()
	const claims = `{"sub":"user-1","exp":1700000000}`
	for _, tc := range []struct{ in, want string }{
		{"/v1/items/" + testKey, "/v1/items/[redacted]"},
		{"/v1/items/" + testKey + "/more", "/v1/items/[redacted]/more"},
		{"no route matches GET /k/ak_test_abc123/x", "no route matches GET /k/[redacted]/x"},
		{"/AK_LIVE_ABCdef", "/[redacted]"},
		{"query parameter ak%5Flive%5FabcDEF%zz is not validly escaped", "query parameter [redacted]%zz is not validly escaped"},
		{"%61k_live_abc", "[redacted]"},
		{"/t/" + testJWT, "/t/[redacted]"},
		{"/t/" + testJWT + "/x", "/t/[redacted]/x"},
		{"eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", "[redacted]"},          // alg none
		{"eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0", "[redacted]"},           // no signature part
		{"has no field eyJhbGciOiJub25lIn0", "has no field [redacted]"}, // one segment
		{`string "` + testKey + `" doesn't match "^t-[0-9]+$"`, `string "[redacted]" doesn't match "^t-[0-9]+$"`},
		{testKey + " and " + testJWT, "[redacted] and [redacted]"},
		// JSON white space the verifier accepts, wherever it is.
		{"/t/" + spaced(`{ "alg": "ES256", "kid": "k1" }`, claims), "/t/[redacted]"},
		{"/t/" + spaced("{\n  \"alg\": \"ES256\",\n  \"kid\": \"k1\"\n}", claims), "/t/[redacted]"},
		{"/t/" + spaced("{\t\"alg\":\"ES256\",\"kid\":\"k1\"}", claims), "/t/[redacted]"},
		{"/t/" + spaced("{\r\n\"alg\":\"ES256\",\"kid\":\"k1\"}", claims), "/t/[redacted]"},
		{"/t/" + spaced("{    \"alg\":\"ES256\",\"kid\":\"k1\"}", claims), "/t/[redacted]"},
		{"/t/" + spaced(` {"alg":"ES256","kid":"k1"}`, claims), "/t/[redacted]"},
		{"/t/" + spaced("\r\n{\"alg\":\"ES256\",\"kid\":\"k1\"}", claims), "/t/[redacted]"},
		{"/t/" + spaced(`{"0":1,"alg":"ES256","kid":"k1"}`, claims), "/t/[redacted]"},
		// Four spaces first: the '{' is in the second group of four
		// characters, where the redaction starts; "ICAg" is three spaces.
		{"/t/" + spaced(`    {"alg":"ES256","kid":"k1"}`, claims), "/t/ICAg[redacted]"},
		{"?token=" + spaced(`{ "alg": "ES256", "kid": "k1" }`, claims) + "&x=1", "?token=[redacted]&x=1"},
		{"Bearer%20" + spaced(`{ "alg": "ES256", "kid": "k1" }`, claims), "Bearer%20[redacted]"},
		// Glued to something else, or to each other: all of it goes.
		{"/t/x" + testJWT, "/t/x[redacted]"},
		{"/t/" + testJWT + testKey, "/t/[redacted]"},
		{"/t/" + testKey + "." + testJWT, "/t/[redacted]"},
		// A key glued to a token took its header, and left a payload too
		// short to be found on its own, with the signature.
		{"/t/ak_live_eyJhbGciOiJFUzI1NiIsImtpZCI6ImsxIn0.eyJpc3MiOiJ4In0.MEUCIQDx_ab-cd", "/t/[redacted]"},
		{"/t/ak_test_abc_def-" + testJWT, "/t/[redacted]"},
		// Not credentials: left alone.
		{"/v1/items/sku-1", "/v1/items/sku-1"},
		{"keys look like ak_live_… or ak_test_…", "keys look like ak_live_… or ak_test_…"},
		{"Authorization: Bearer ak_…", "Authorization: Bearer ak_…"},
		{"/eyJonly", "/eyJonly"},
		{"/eyJ0123456789ab", "/eyJ0123456789ab"}, // 15: shorter than any JOSE header
		{"/eyJx.", "/eyJx."},
		{"100% sure", "100% sure"},
		{"%", "%"},
		{"", ""},
	} {
		if got := problem.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestRedactOrdinaryText: what a path, a query or an error message holds
// in the normal course (words, host names, ids, dates, base64 of text) is
// left as it is, including words that start like the base64 of '{' ("ew",
// "ex", "ey") or of white space ("I", "C", "D").
func TestRedactOrdinaryText(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"no route matches GET /v1/ewoks/endor/eyewitnesses",
		"/v1/exports/2024-01-01/extraordinarily-long-name.csv",
		"ewok.com example.com eyeballs.example.org exceptionalities.json",
		"/v1/orders/0b8f6a1e-3c7d-4d2b-9a61-5f0e2c9d7b43",
		"/v1/Customers/CDIIDCICDCICD/Invoices/DCIIDICDCIIDICDC",
		"IHOP Costco Dear Customer Item ID",
		"proto: (line 1:2): unknown field \"customerId\"",
		"/v1/blobs/" + b64([]byte("ordinary text, not JSON at all, however long it is")),
		"/v1/blobs/" + base64.StdEncoding.EncodeToString([]byte("[1, 2, 3] and more")),
		"invalid value for int64 field page_size: \"exactly\"",
	} {
		if got := problem.Redact(s); got != s {
			t.Errorf("Redact(%q) = %q, want it unchanged", s, got)
		}
	}
}

// TestRedactCleanAllocates nothing: most problems have nothing to redact.
// (Not parallel: AllocsPerRun.)
func TestRedactCleanAllocates(t *testing.T) {
	clean := "no route matches GET /inventory/v1/items/abc?x=1&e=%20&CDI=Ie"
	if n := testing.AllocsPerRun(100, func() { _ = problem.Redact(clean) }); n != 0 {
		t.Errorf("Redact of a clean string allocates %v times, want 0", n)
	}
}

// spacedToken builds a JWT from fixed header and payload JSON with white
// space at every place JSON allows it, how much and which read from ws
// (one byte per place, while it lasts). It returns the token and the part
// of it Redact must never leave: all of it from the group of four
// characters that decodes the header's '{', since what comes before only
// encodes white space.
func spacedToken(t *testing.T, ws []byte) (token, secret string) {
	spaceOut := func(pieces []string) string {
		var b strings.Builder
		for i, p := range pieces {
			if i < len(ws) {
				for k := 0; k < int(ws[i]>>2)%24; k++ {
					b.WriteByte(" \t\n\r"[(int(ws[i])+k)&3])
				}
			}
			b.WriteString(p)
		}
		if len(pieces) < len(ws) {
			for k := 0; k < int(ws[len(pieces)]>>2)%24; k++ {
				b.WriteByte(" \t\n\r"[(int(ws[len(pieces)])+k)&3])
			}
		}
		return b.String()
	}
	header := spaceOut([]string{"{", `"alg"`, ":", `"ES256"`, ",", `"kid"`, ":", `"k1"`, ",", `"typ"`, ":", `"JWT"`, "}"})
	if len(ws) > 14 {
		ws = ws[14:]
	} else {
		ws = nil
	}
	payload := spaceOut([]string{"{", `"iss"`, ":", `"https://login.example.com/"`, ",", `"sub"`, ":", `"user-1"`, ",", `"exp"`, ":", "1700000000", "}"})
	if !json.Valid([]byte(header)) || !json.Valid([]byte(payload)) {
		t.Fatalf("spacedToken made JSON that is not: %q %q", header, payload)
	}
	token = spaced(header, payload)
	lead := len(header) - len(strings.TrimLeft(header, " \t\n\r"))
	return token, token[4*(lead/3):]
}

func FuzzRedact(f *testing.F) {
	f.Add("/v1/"+testKey, []byte(nil), "")
	f.Add(testJWT, []byte{4, 0, 4, 8, 0, 4}, "/x")
	f.Add("ak%5Ftest%5Fx%", []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, "")
	f.Add("/nowhere/", []byte{13, 200, 7}, "?x=1")
	// White space first in both header and payload: no "eyJ" anywhere.
	f.Add("/nowhere/", []byte{4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4}, "")
	f.Fuzz(func(t *testing.T, s string, ws []byte, suffix string) {
		out := problem.Redact(s)
		if strings.Contains(out, testKey) || strings.Contains(out, testJWT) {
			t.Errorf("Redact(%q) = %q keeps a credential", s, out)
		}
		if problem.Redact(out) != out {
			t.Errorf("Redact is not idempotent on %q: %q then %q", s, out, problem.Redact(out))
		}
		// A token with white space in its JSON, between s and suffix.
		token, secret := spacedToken(t, ws)
		in := s + token + suffix
		out = problem.Redact(in)
		if strings.Contains(out, secret) {
			t.Errorf("Redact(%q) = %q keeps the token %q", in, out, secret)
		}
		if problem.Redact(out) != out {
			t.Errorf("Redact is not idempotent on %q: %q then %q", in, out, problem.Redact(out))
		}
	})
}

// BenchmarkRedact: a clean detail (the common case), one with a key, and
// long strings of near misses: segments that start like a JSON object but
// are too short, and base64 of white space without a '{'.
func BenchmarkRedact(b *testing.B) {
	for _, bc := range []struct{ name, s string }{
		{"clean", "no route matches GET /inventory/v1/items/abc?x=1&e=%20"},
		{"key", "no route matches GET /inventory/v1/items/" + testKey},
		{"near-misses", "/" + strings.Repeat("eyAiYWxnIjog.", 2000)},
		{"white-space", "/" + strings.Repeat("ICAgCQoNICAg", 2000)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.s)))
			for b.Loop() {
				_ = problem.Redact(bc.s)
			}
		})
	}
}
