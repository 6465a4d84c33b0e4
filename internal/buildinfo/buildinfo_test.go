package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"work tree", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "(devel) go1.26.8"},
		{"no version", debug.BuildInfo{}, "(devel)"},
		{"tagged with vcs", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "false"},
		}}, "v1.2.3 (rev 0123456789ab, 2026-12-01T10:00:00Z) go1.26.8"},
		{"modified", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"},
		}}, "(devel) (rev abc+modified)"},
	} {
		if got := parse(&tc.bi).String(); got != tc.want {
			t.Errorf("%s: String() = %q, want %q", tc.name, got, tc.want)
		}
	}
}
