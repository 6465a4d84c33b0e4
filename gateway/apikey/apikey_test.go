package apikey_test

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"hash/crc32"
	"io"
	"math"
	mrand "math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/apikey"
)

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Golden keys: the body Generate draws from counter(240) (240..247 kept,
// 248..255 dropped, then 0..23), with checksums computed outside Go
// (Python's zlib.crc32).
const (
	goldenLive = "ak_live_stuvwxyz0123456789ABCDEFGHIJKLMN34DANb"
	goldenTest = "ak_test_stuvwxyz0123456789ABCDEFGHIJKLMN0R5qMc"
)

// scanner is the pattern secret scanners use for keys.
var scanner = regexp.MustCompile(`^ak_(live|test)_[0-9A-Za-z]{38}$`)

// withChecksum appends the checksum to a prefix and body, independently of
// the package: hash/crc32 and a plain base62 conversion.
func withChecksum(s string) string {
	v := uint64(crc32.ChecksumIEEE([]byte(s)))
	var d [6]byte
	for i := 5; i >= 0; i-- {
		d[i] = alphabet[v%62]
		v /= 62
	}
	return s + string(d[:])
}

// counter is a reader yielding n, n+1, n+2, … (mod 256).
type counter byte

func (c *counter) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(*c)
		*c++
	}
	return len(p), nil
}

// constant is a reader yielding one byte forever.
type constant byte

func (c constant) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(c)
	}
	return len(p), nil
}

type failing struct{ err error }

func (f failing) Read([]byte) (int, error) { return 0, f.err }

func TestGenerateParse(t *testing.T) {
	t.Parallel()
	for _, env := range []apikey.Env{apikey.Live, apikey.Test} {
		for range 200 {
			k, err := apikey.Generate(env, rand.Reader)
			if err != nil {
				t.Fatalf("Generate(%v) error: %v", env, err)
			}
			if len(k) != apikey.Len || !scanner.MatchString(k) || !strings.HasPrefix(k, "ak_"+env.String()+"_") {
				t.Fatalf("Generate(%v) = %q, want a %d-byte key matching %v", env, k, apikey.Len, scanner)
			}
			if withChecksum(k[:40]) != k {
				t.Fatalf("Generate(%v) = %q, want checksum %q", env, k, withChecksum(k[:40])[40:])
			}
			got, err := apikey.Parse(k)
			if got != env || err != nil {
				t.Fatalf("Parse(Generate(%v)) = %v, %v; want %v, nil", env, got, err, env)
			}
		}
	}
}

func TestGenerateGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  apikey.Env
		want string
	}{
		{apikey.Live, goldenLive},
		{apikey.Test, goldenTest},
	} {
		c := counter(240)
		got, err := apikey.Generate(tc.env, &c)
		if got != tc.want || err != nil {
			t.Errorf("Generate(%v, counter(240)) = %q, %v; want %q, nil", tc.env, got, err, tc.want)
		}
		// 32 bytes, of which 8 dropped, then the 8 missing: 40 bytes read.
		if c != counter(24) { // 240+40 mod 256
			t.Errorf("Generate(%v, counter(240)) read %d bytes, want 40", tc.env, byte(c-240))
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		env  apikey.Env
		rand io.Reader
		want error // nil: any error
	}{
		{"reader fails", apikey.Live, failing{boom}, boom},
		{"reader ends at once", apikey.Live, strings.NewReader(""), io.EOF},
		{"reader ends early", apikey.Test, strings.NewReader("0123456789"), io.ErrUnexpectedEOF},
		{"only dropped bytes", apikey.Live, constant(0xff), nil},
		{"zero env", 0, rand.Reader, nil},
		{"unknown env", 3, rand.Reader, nil},
	} {
		k, err := apikey.Generate(tc.env, tc.rand)
		if err == nil || k != "" || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: Generate = %q, %v; want an error matching %v", tc.name, k, err, tc.want)
		}
	}
}

// TestGenerateUniform counts the characters of 10,000 keys drawn from a
// seeded generator: per position and overall, the chi-square statistic
// (61 degrees of freedom, mean 61, standard deviation 11) stays far below
// what a bias such as byte%62 without rejection produces (≈ 2,600 overall).
// The seed makes the test deterministic; the bounds make it robust to a
// change of seed.
func TestGenerateUniform(t *testing.T) {
	t.Parallel()
	const keys = 10_000
	src := mrand.NewChaCha8([32]byte{1, 2, 3})
	var count [32][62]int
	var total [62]int
	for range keys {
		k, err := apikey.Generate(apikey.Live, src)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 32 {
			d := strings.IndexByte(alphabet, k[8+i])
			count[i][d]++
			total[d]++
		}
	}
	chi2 := func(c []int, n int) float64 {
		want := float64(n) / 62
		var x float64
		for _, got := range c {
			x += (float64(got) - want) * (float64(got) - want) / want
		}
		return x
	}
	for i := range count {
		if x := chi2(count[i][:], keys); x > 150 || math.IsNaN(x) {
			t.Errorf("position %d: chi-square %.1f over 62 digits, want < 150", i, x)
		}
	}
	if x := chi2(total[:], keys*32); x > 120 {
		t.Errorf("all positions: chi-square %.1f over 62 digits, want < 120", x)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	other := withChecksum("ak_live_" + strings.Repeat("Z", 32))
	for _, tc := range []struct {
		name, key string
		want      error
	}{
		{"empty", "", apikey.ErrFormat},
		{"short", goldenLive[:45], apikey.ErrFormat},
		{"long", goldenLive + "0", apikey.ErrFormat},
		{"no checksum", goldenLive[:40], apikey.ErrFormat},
		{"prod prefix", withChecksum("ak_prod_" + goldenLive[8:40]), apikey.ErrFormat},
		{"upper-case prefix", withChecksum("AK_LIVE_" + goldenLive[8:40]), apikey.ErrFormat},
		{"upper-case env", withChecksum("ak_LIVE_" + goldenLive[8:40]), apikey.ErrFormat},
		{"dash for underscore", withChecksum("ak-live_" + goldenLive[8:40]), apikey.ErrFormat},
		{"no prefix", withChecksum(strings.Repeat("a", 8) + goldenLive[8:40]), apikey.ErrFormat},
		{"dash in body", withChecksum("ak_live_" + "stuv-xyz" + goldenLive[16:40]), apikey.ErrFormat},
		{"space in body", withChecksum("ak_live_" + "stuv xyz" + goldenLive[16:40]), apikey.ErrFormat},
		{"non-ASCII in body", withChecksum("ak_live_" + "stuvéyz" + goldenLive[16:40]), apikey.ErrFormat},
		{"NUL in checksum", goldenLive[:45] + "\x00", apikey.ErrFormat},
		{"dash in checksum", goldenLive[:45] + "-", apikey.ErrFormat},
		{"checksum of another key", goldenLive[:40] + other[40:], apikey.ErrChecksum},
		{"live checksum on test key", goldenTest[:40] + goldenLive[40:], apikey.ErrChecksum},
		{"checksum above 2^32", goldenLive[:40] + "zzzzzz", apikey.ErrChecksum},
		{"swapped characters", goldenLive[:8] + "tsuvwxyz" + goldenLive[16:], apikey.ErrChecksum},
	} {
		env, err := apikey.Parse(tc.key)
		if env != 0 || !errors.Is(err, tc.want) {
			t.Errorf("%s: Parse(%q) = %v, %v; want 0, %v", tc.name, tc.key, env, err, tc.want)
		}
		var e *apikey.Error
		if !errors.As(err, &e) || e.Reason == "" {
			t.Errorf("%s: Parse(%q) error %v is not an *Error with a reason", tc.name, tc.key, err)
		}
		if len(tc.key) >= 12 && leaks(err.Error(), tc.key[8:]) {
			t.Errorf("%s: Parse(%q) error %q shows part of the key", tc.name, tc.key, err)
		}
	}
	for _, tc := range []struct {
		key  string
		want apikey.Env
	}{
		{goldenLive, apikey.Live},
		{goldenTest, apikey.Test},
		{other, apikey.Live},
		{withChecksum("ak_test_" + strings.Repeat("0", 32)), apikey.Test},
	} {
		if env, err := apikey.Parse(tc.key); env != tc.want || err != nil {
			t.Errorf("Parse(%q) = %v, %v; want %v, nil", tc.key, env, err, tc.want)
		}
	}
}

// leaks reports whether msg holds any 4 consecutive bytes of secret.
func leaks(msg, secret string) bool {
	for i := 0; i+4 <= len(secret); i++ {
		if strings.Contains(msg, secret[i:i+4]) {
			return true
		}
	}
	return false
}

// TestParseOneChange changes every byte of a key to every other printable
// ASCII byte: a change in the prefix is a format error, a change to a byte
// outside the alphabet too, and any other change a checksum error (CRC-32
// catches every error within 32 consecutive bits). Swapping two adjacent
// different characters is a checksum error as well.
func TestParseOneChange(t *testing.T) {
	t.Parallel()
	for _, key := range []string{goldenLive, goldenTest} {
		for i := range len(key) {
			for c := byte(' '); c <= '~'; c++ {
				if c == key[i] {
					continue
				}
				bad := key[:i] + string(c) + key[i+1:]
				want := apikey.ErrChecksum
				if i < 8 || !strings.ContainsRune(alphabet, rune(c)) {
					want = apikey.ErrFormat
				}
				if _, err := apikey.Parse(bad); !errors.Is(err, want) {
					t.Errorf("Parse(%q) (byte %d changed) = %v, want %v", bad, i, err, want)
				}
			}
			if i >= 8 && i+1 < len(key) && key[i] != key[i+1] {
				bad := key[:i] + key[i+1:i+2] + key[i:i+1] + key[i+2:]
				if _, err := apikey.Parse(bad); !errors.Is(err, apikey.ErrChecksum) {
					t.Errorf("Parse(%q) (bytes %d and %d swapped) = %v, want %v", bad, i, i+1, err, apikey.ErrChecksum)
				}
			}
		}
	}
}

func TestHash(t *testing.T) {
	t.Parallel()
	for _, s := range []string{goldenLive, goldenTest, "", "ak_", goldenLive[:45], goldenLive + "x", strings.Repeat("k", 1000)} {
		if got, want := apikey.Hash(s), sha256.Sum256([]byte(s)); got != want {
			t.Errorf("Hash(%q) = %x, want %x", s, got, want)
		}
	}
}

func TestDisplayPrefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ key, want string }{
		{goldenLive, "ak_live_stuv"},
		{goldenTest, "ak_test_stuv"},
		{goldenLive[:40] + "000000", "ak_live_stuv"}, // a mistyped key still shows its prefix
		{"", ""},
		{goldenLive[:12], ""},
		{goldenLive + "x", ""},
		{"ak_prod_" + goldenLive[8:], ""},
		{"ak_live_st\nv" + goldenLive[12:], ""},
		{"-----BEGIN PRIVATE KEY-----MIIEvQIBADANBgkqhk", ""},
	} {
		if got := apikey.DisplayPrefix(tc.key); got != tc.want {
			t.Errorf("DisplayPrefix(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

func TestEnvString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  apikey.Env
		want string
	}{{apikey.Live, "live"}, {apikey.Test, "test"}, {0, "Env(0)"}, {7, "Env(7)"}} {
		if got := tc.env.String(); got != tc.want {
			t.Errorf("Env(%d).String() = %q, want %q", uint8(tc.env), got, tc.want)
		}
	}
}

func TestAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters change allocation counts")
	}
	badSum := goldenLive[:40] + "000000"
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"Parse", func() { _, _ = apikey.Parse(goldenLive) }},
		{"Parse bad checksum", func() { _, _ = apikey.Parse(badSum) }},
		{"Parse bad length", func() { _, _ = apikey.Parse(goldenLive[:20]) }},
		{"Hash", func() { _ = apikey.Hash(goldenLive) }},
		{"DisplayPrefix", func() { _ = apikey.DisplayPrefix(goldenLive) }},
	} {
		if n := testing.AllocsPerRun(100, tc.f); n != 0 {
			t.Errorf("%s: %v allocations, want 0", tc.name, n)
		}
	}
}
