package load

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// cpuTimes is what a process's threads have used of the CPU so far.
type cpuTimes struct {
	// Run is time on a CPU, Wait time runnable but waiting for one.
	Run, Wait time.Duration
	// Precise says Run and Wait come from the scheduler's nanosecond
	// counters; otherwise Run is utime+stime in clock ticks and Wait is 0.
	Precise bool
}

func (c cpuTimes) sub(o cpuTimes) cpuTimes {
	return cpuTimes{Run: c.Run - o.Run, Wait: c.Wait - o.Wait, Precise: c.Precise && o.Precise}
}

// clockTick is the unit of /proc/PID/stat times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// readCPU sums /proc/PID/task/*/schedstat over the threads of pid, which
// gives nanoseconds. Time of threads that exited is lost there; the Go
// programs measured here do not end threads, so it is the better counter.
// Where schedstat is missing it falls back to /proc/PID/stat.
func readCPU(pid int) (cpuTimes, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return cpuTimes{}, err
	}
	var t cpuTimes
	for _, task := range tasks {
		data, err := os.ReadFile(filepath.Join(dir, task.Name(), "schedstat"))
		if errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat(filepath.Join(dir, task.Name())); serr != nil {
				continue // the thread ended while we looked
			}
			return readStatCPU(pid)
		}
		if err != nil {
			return cpuTimes{}, err
		}
		f := strings.Fields(string(data))
		if len(f) < 2 {
			return cpuTimes{}, fmt.Errorf("%s/%s/schedstat: %q", dir, task.Name(), data)
		}
		run, err1 := strconv.ParseInt(f[0], 10, 64)
		wait, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return cpuTimes{}, fmt.Errorf("%s/%s/schedstat: %q", dir, task.Name(), data)
		}
		t.Run += time.Duration(run)
		t.Wait += time.Duration(wait)
	}
	t.Precise = true
	return t, nil
}

func readStatCPU(pid int) (cpuTimes, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpuTimes{}, err
	}
	// The command name may hold spaces and parentheses; fields resume
	// after the last ')'. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return cpuTimes{}, fmt.Errorf("/proc/%d/stat: %q", pid, data)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return cpuTimes{}, fmt.Errorf("/proc/%d/stat: %q", pid, data)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return cpuTimes{}, fmt.Errorf("/proc/%d/stat: %q", pid, data)
	}
	return cpuTimes{Run: time.Duration(utime+stime) * clockTick}, nil
}

// statusField returns a field of /proc/PID/status ("VmRSS", "Cpus_allowed_list").
func statusField(pid int, name string) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("/proc/%d/status: no %s", pid, name)
}

// readRSS returns the resident set size of pid in bytes.
func readRSS(pid int) (int64, error) {
	v, err := statusField(pid, "VmRSS")
	if err != nil {
		return 0, err
	}
	kb, unit, _ := strings.Cut(v, " ")
	n, err := strconv.ParseInt(kb, 10, 64)
	if err != nil || unit != "kB" {
		return 0, fmt.Errorf("/proc/%d/status: VmRSS %q", pid, v)
	}
	return n << 10, nil
}

// countFDs returns the number of open file descriptors of pid.
func countFDs(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	return len(names), err
}

// cpuSet is a Linux CPU affinity mask for up to 1024 CPUs.
type cpuSet [16]uint64

func getAffinity(tid int) (cpuSet, error) {
	var s cpuSet
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, uintptr(tid), unsafe.Sizeof(s), uintptr(unsafe.Pointer(&s)))
	if e != 0 {
		return s, e
	}
	return s, nil
}

func setAffinity(tid int, s cpuSet) error {
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(s), uintptr(unsafe.Pointer(&s)))
	if e != 0 {
		return e
	}
	return nil
}

// pinSelf sets the affinity of every thread of this process to s. Threads
// the runtime starts later inherit it from the thread that creates them.
func pinSelf(s cpuSet) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := setAffinity(tid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("sched_setaffinity(%d): %w", tid, err)
		}
	}
	return nil
}

func (s cpuSet) has(cpu int) bool { return s[cpu/64]&(1<<(cpu%64)) != 0 }

func oneCPU(cpu int) cpuSet {
	var s cpuSet
	s[cpu/64] = 1 << (cpu % 64)
	return s
}

// readMachineBusy returns the CPU time spent on all CPUs by anything, from
// the "cpu" line of /proc/stat: user, nice, system, irq, softirq and steal.
func readMachineBusy() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: %q", line)
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %q", line)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}
