//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package spool

import "os"

// lockDir does nothing where flock is missing: the caller must make sure
// only one Spool has dir open.
func lockDir(dir string) (*os.File, error) { return nil, nil }
