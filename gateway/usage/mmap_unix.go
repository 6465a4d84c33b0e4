//go:build linux || darwin

package usage

import (
	"os"
	"syscall"
	"unsafe"
)

// mapFile maps size bytes of f, shared: stores reach the file's pages in
// the kernel's page cache, so they outlive the process.
func mapFile(f *os.File, size int) ([]byte, error) {
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	// Slots are touched here and there, never in sequence: reading ahead
	// around each would only fill memory with pages no window uses.
	syscall.Madvise(b, syscall.MADV_RANDOM)
	return b, nil
}

func unmap(b []byte) error { return syscall.Munmap(b) }

// syncMapped writes b's dirty pages to the disk and waits for them; b must
// start on a page boundary.
func syncMapped(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, _, errno := syscall.Syscall(syscall.SYS_MSYNC, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), syscall.MS_SYNC)
	if errno != 0 {
		return errno
	}
	return nil
}
