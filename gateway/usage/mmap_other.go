//go:build !(linux || darwin)

package usage

import (
	"errors"
	"os"
)

var errNoMmap = errors.New("usage: memory-mapped windows need linux or darwin")

func mapFile(f *os.File, size int) ([]byte, error) { return nil, errNoMmap }

func unmap(b []byte) error { return nil }

func syncMapped(b []byte) error { return errNoMmap }
