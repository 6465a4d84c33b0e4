//go:build linux || darwin

package usage

import (
	"syscall"
	"unsafe"
)

// ResidentBytes is how much of the window file is in memory: the pages
// the windows have touched.
func (r *Recorder) ResidentBytes() (int, error) {
	b := r.m.b
	vec := make([]byte, (len(b)+pageSize-1)/pageSize)
	_, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return 0, errno
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n * pageSize, nil
}
