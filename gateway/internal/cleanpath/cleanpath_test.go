package cleanpath_test

import (
	"strings"
	"testing"

	"github.com/portico-gw/portico/gateway/internal/cleanpath"
)

func TestClean(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"/", "/"},
		{"/v1/orders/o-1", "/v1/orders/o-1"},
		{"/v1/orders/", "/v1/orders/"},
		{"/pkg.Service/Method", "/pkg.Service/Method"},
		{"/a//b", "/a/b"},
		{"//a///b//", "/a/b/"},
		{"/a/./b", "/a/b"},
		{"/a/.", "/a/"},
		{"/a/b/..", "/a/"},
		{"/a/b/../c", "/a/c"},
		{"/public/../admin", "/admin"},
		{"/public/%2e%2e/admin", "/admin"},
		{"/public/%2E%2e/admin", "/admin"},
		{"/public/.%2e/admin", "/admin"},
		{"/%61dmin", "/admin"},
		{"/a%2db", "/a-b"},
		{"/a%7e", "/a~"},
		{"/caf%c3%a9", "/caf%C3%A9"},
		{"/caf%C3%A9", "/caf%C3%A9"},
		{"/a%20b", "/a%20b"},
		{"/a%3Fb", "/a%3Fb"},
		{"/a/..", "/"},
		{"/.", "/"},
		{"/...", "/..."},
		{"/a/...b", "/a/...b"},
		{"/a/.b/c", "/a/.b/c"},
		{"/v1/orders:watch", "/v1/orders:watch"},
		{"/a@b!$&'()*+,;=", "/a@b!$&'()*+,;="},
	}
	for _, tt := range tests {
		got, err := cleanpath.Clean(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("Clean(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
		}
	}
}

func TestCleanRejects(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"", "a/b", "*",
		"/a%2Fb", "/a%2fb", "/a%5Cb", "/a%5cb", "/a%00",
		"/a%", "/a%2", "/a%zz", "/a%g1",
		"/..", "/a/../..", "/%2e%2e/etc/passwd", "/a/%2e%2e/%2e%2e/x",
		"/a\\b", "/a b", "/a\x00b", "/a\x7fb", "/a\tb", "/caf\xc3\xa9", "/a\"b", "/a<b", "/a{b}", "/a|b", "/a^b", "/a`b",
	} {
		got, err := cleanpath.Clean(in)
		if err == nil {
			t.Errorf("Clean(%q) = %q, nil; want an error", in, got)
			continue
		}
		if !cleanpath.IsError(err) {
			t.Errorf("Clean(%q) error %v is not a *cleanpath.Error", in, err)
		}
	}
}

func TestCleanReturnsInputWhenClean(t *testing.T) {
	in := "/v1/orders/o-1"
	allocs := testing.AllocsPerRun(100, func() {
		out, err := cleanpath.Clean(in)
		if err != nil || out != in {
			t.Fatalf("Clean(%q) = %q, %v", in, out, err)
		}
	})
	if allocs != 0 {
		t.Errorf("Clean of a clean path allocates %v times, want 0", allocs)
	}
}

func FuzzClean(f *testing.F) {
	for _, s := range []string{"/", "/a/../b", "/%2e%2e", "//x//", "/a%2fb", "/%61", "/./.././", "/a/b/c/../../.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := cleanpath.Clean(in)
		if err != nil {
			return
		}
		// The result is normal: cleaning it again changes nothing.
		again, err := cleanpath.Clean(out)
		if err != nil || again != out {
			t.Fatalf("Clean(Clean(%q)=%q) = %q, %v; want idempotent", in, out, again, err)
		}
		if !strings.HasPrefix(out, "/") || strings.Contains(out, "//") {
			t.Fatalf("Clean(%q) = %q: not a single-slash absolute path", in, out)
		}
		for _, seg := range strings.Split(out, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("Clean(%q) = %q keeps a dot segment", in, out)
			}
		}
		lower := strings.ToLower(out)
		for _, bad := range []string{"%2f", "%5c", "%00", "%2e", "\\"} {
			if strings.Contains(lower, bad) {
				t.Fatalf("Clean(%q) = %q contains %q", in, out, bad)
			}
		}
	})
}

func BenchmarkClean(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_, _ = cleanpath.Clean("/v2/acme.orders/orders/o-123456/items/i-42")
	}
}
