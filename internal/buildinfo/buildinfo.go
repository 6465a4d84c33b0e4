// Package buildinfo says which build of Portico is running: the module's
// version and the VCS revision it was built from, as `--version` prints
// them on both binaries.
package buildinfo

import (
	"fmt"
	"runtime/debug"
)

// Info is what the Go toolchain recorded about a build.
type Info struct {
	// Version is the main module's version: a tag, a pseudo-version, or
	// "(devel)" for a build from a work tree.
	Version string
	// Revision is the VCS revision, empty when not recorded (go run, go
	// test, a build with -buildvcs=false).
	Revision string
	// Time is the revision's commit time (RFC 3339), if recorded.
	Time string
	// Modified reports a work tree with uncommitted changes.
	Modified bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown"}
	}
	return parse(bi)
}

func parse(bi *debug.BuildInfo) Info {
	info := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the one line `--version` prints after the binary's name:
// "v1.2.3 (rev 0123abcd, 2026-12-01T10:00:00Z) go1.26.8", with
// "+modified" after a revision built from a changed work tree.
func (i Info) String() string {
	s := i.Version
	if i.Revision != "" {
		rev := i.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if i.Modified {
			rev += "+modified"
		}
		if i.Time != "" {
			s += fmt.Sprintf(" (rev %s, %s)", rev, i.Time)
		} else {
			s += fmt.Sprintf(" (rev %s)", rev)
		}
	}
	if i.GoVersion != "" {
		s += " " + i.GoVersion
	}
	return s
}
