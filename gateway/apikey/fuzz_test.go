package apikey_test

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/apikey"
)

// FuzzParse checks that Parse never panics, that whatever it accepts is a
// key whose checksum an independent encoder reproduces, that its errors are
// *Error values holding nothing of the input, and that Generate, reading
// the same bytes as its random source, yields a key Parse accepts.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		goldenLive, goldenTest, "", "ak_live_", goldenLive[:45], goldenLive + "0",
		goldenLive[:40] + "zzzzzz", goldenLive[:40] + "000000", "AK_LIVE_" + goldenLive[8:],
		strings.Repeat("\xff", 64), strings.Repeat("a", 46),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		env, err := apikey.Parse(s)
		if err == nil {
			if env != apikey.Live && env != apikey.Test {
				t.Fatalf("Parse(%q) = %v, nil; want Live or Test", s, env)
			}
			if !scanner.MatchString(s) || !strings.HasPrefix(s, "ak_"+env.String()+"_") {
				t.Fatalf("Parse(%q) = %v, nil; the key does not match %v", s, env, scanner)
			}
			if re := withChecksum(s[:40]); re != s {
				t.Fatalf("Parse(%q) = %v, nil; re-encoding gives %q", s, env, re)
			}
			if got := apikey.DisplayPrefix(s); got != s[:12] {
				t.Fatalf("DisplayPrefix(%q) = %q, want %q", s, got, s[:12])
			}
		} else {
			var e *apikey.Error
			if env != 0 || !errors.As(err, &e) || !(errors.Is(err, apikey.ErrFormat) || errors.Is(err, apikey.ErrChecksum)) {
				t.Fatalf("Parse(%q) = %v, %v; want 0 and an *Error matching ErrFormat or ErrChecksum", s, env, err)
			}
			if len(s) >= 4 && leaks(err.Error(), s) {
				t.Fatalf("Parse(%q) error %q shows part of the input", s, err)
			}
			if p := apikey.DisplayPrefix(s); p != "" && p != s[:12] {
				t.Fatalf("DisplayPrefix(%q) = %q, want \"\" or %q", s, p, s[:12])
			}
		}
		if got, want := apikey.Hash(s), sha256.Sum256([]byte(s)); got != want {
			t.Fatalf("Hash(%q) = %x, want %x", s, got, want)
		}

		for _, env := range []apikey.Env{apikey.Live, apikey.Test} {
			k, err := apikey.Generate(env, strings.NewReader(s))
			if err != nil {
				continue // too few usable bytes
			}
			if got, err := apikey.Parse(k); got != env || err != nil {
				t.Fatalf("Parse(Generate(%v, %q)) = %v, %v; want %v, nil", env, s, got, err, env)
			}
		}
	})
}
