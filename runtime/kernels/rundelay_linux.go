package kernels

import (
	"syscall"
	"unsafe"
)

// schedReader reads one thread's scheduler times from
// /proc/self/task/TID/schedstat: "run_ns wait_ns slices", the time it ran on
// a CPU and the time it was runnable but waiting for one (its run delay;
// Documentation/scheduler/sched-stats.rst). It reads with raw system calls
// into its own buffers, so a read does not allocate.
type schedReader struct {
	dir    int // /proc/self/task, opened on first use; -1: unavailable
	opened bool
	path   [64]byte
	stat   [128]byte
}

// gettid returns the calling thread's id.
func gettid() int64 { return int64(syscall.Gettid()) }

// read returns thread tid's time on a CPU and run delay so far, in ns; ok
// false when the thread has exited or schedstat is unavailable.
func (r *schedReader) read(tid int64) (run, wait int64, ok bool) {
	if !r.opened {
		r.opened = true
		fd, err := syscall.Open("/proc/self/task", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			fd = -1
		}
		r.dir = fd
	}
	if r.dir < 0 || tid <= 0 {
		return 0, 0, false
	}
	// The path "TID/schedstat\x00", the id's digits written backwards.
	var digits [20]byte
	k := len(digits)
	for v := tid; v > 0; v /= 10 {
		k--
		digits[k] = byte('0' + v%10)
	}
	n := copy(r.path[:], digits[k:])
	n += copy(r.path[n:], "/schedstat\x00")
	fd, _, e := syscall.Syscall6(syscall.SYS_OPENAT, uintptr(r.dir), uintptr(unsafe.Pointer(&r.path[0])),
		syscall.O_RDONLY|syscall.O_CLOEXEC, 0, 0, 0)
	if e != 0 {
		return 0, 0, false // the thread has exited (or no schedstat)
	}
	m, err := syscall.Read(int(fd), r.stat[:])
	syscall.Close(int(fd))
	if err != nil || m <= 0 {
		return 0, 0, false
	}
	return parseSchedstat(r.stat[:m])
}

// close releases the directory's descriptor.
func (r *schedReader) close() {
	if r.opened && r.dir >= 0 {
		syscall.Close(r.dir)
	}
	r.opened, r.dir = true, -1
}

// threadCPUTime returns the calling thread's CPU time in ns
// (CLOCK_THREAD_CPUTIME_ID, which counts the current slice too, unlike
// schedstat's run time, updated at scheduler ticks); 0 on error.
func threadCPUTime() int64 {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return ts.Nano()
}
