package problem_test

import (
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/problem"
)

const (
	testKey = "ak_live_4eC39HqLyjWDarjtT1zdp7dcXYZ0aB"
	testJWT = "eyJhbGciOiJFUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJ1c2VyLTEiLCJleHAiOjE3MDAwMDAwMDB9.MEUCIQDx_ab-cd"
)

func TestRedact(t *testing.T) {
	t.Parallel()
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

// TestRedactCleanAllocates nothing: most problems have nothing to redact.
// (Not parallel: AllocsPerRun.)
func TestRedactCleanAllocates(t *testing.T) {
	clean := "no route matches GET /inventory/v1/items/abc?x=1&e=%20"
	if n := testing.AllocsPerRun(100, func() { _ = problem.Redact(clean) }); n != 0 {
		t.Errorf("Redact of a clean string allocates %v times, want 0", n)
	}
}

func FuzzRedact(f *testing.F) {
	f.Add("/v1/" + testKey)
	f.Add(testJWT)
	f.Add("ak%5Ftest%5Fx%")
	f.Fuzz(func(t *testing.T, s string) {
		out := problem.Redact(s)
		if strings.Contains(out, testKey) || strings.Contains(out, testJWT) {
			t.Errorf("Redact(%q) = %q keeps a credential", s, out)
		}
		if problem.Redact(out) != out {
			t.Errorf("Redact is not idempotent on %q: %q then %q", s, out, problem.Redact(out))
		}
	})
}
