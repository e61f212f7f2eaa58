package kernels

import (
	"syscall"
	"unsafe"
)

// delayReader sums the run delay of this process's threads: the second field
// of /proc/self/task/TID/schedstat, nanoseconds spent runnable but waiting for
// a CPU (Documentation/scheduler/sched-stats.rst). It reads with raw system
// calls into its own buffers, so a read does not allocate.
type delayReader struct {
	dir    int // /proc/self/task, opened on first use; -1: unavailable
	opened bool
	dents  [8192]byte
	path   [64]byte
	stat   [128]byte
}

// read returns the total run delay in ns, or false where it is unavailable.
func (r *delayReader) read() (int64, bool) {
	if !r.opened {
		r.opened = true
		fd, err := syscall.Open("/proc/self/task", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			fd = -1
		}
		r.dir = fd
	}
	if r.dir < 0 {
		return 0, false
	}
	if _, err := syscall.Seek(r.dir, 0, 0); err != nil {
		return 0, false
	}
	var total int64
	threads := 0
	for {
		n, err := syscall.ReadDirent(r.dir, r.dents[:])
		if err != nil {
			return 0, false
		}
		if n <= 0 {
			break
		}
		// linux_dirent64: ino u64, off i64, reclen u16, type u8, name NUL-terminated.
		for off := 0; off+19 < n; {
			reclen := int(r.dents[off+16]) | int(r.dents[off+17])<<8
			if reclen == 0 {
				break
			}
			name := r.dents[off+19 : off+reclen]
			off += reclen
			if name[0] < '0' || name[0] > '9' {
				continue
			}
			if d, ok := r.threadDelay(name); ok {
				total += d
				threads++
			}
		}
	}
	return total, threads > 0
}

// close releases the directory's descriptor.
func (r *delayReader) close() {
	if r.opened && r.dir >= 0 {
		syscall.Close(r.dir)
	}
	r.opened, r.dir = true, -1
}

// threadDelay reads the run delay of thread name (its id, NUL-terminated).
func (r *delayReader) threadDelay(name []byte) (int64, bool) {
	const suffix = "/schedstat\x00"
	k := 0
	for ; k < len(name) && name[k] != 0; k++ {
	}
	if k+len(suffix) > len(r.path) {
		return 0, false
	}
	copy(r.path[:], name[:k])
	copy(r.path[k:], suffix)
	fd, _, e := syscall.Syscall6(syscall.SYS_OPENAT, uintptr(r.dir), uintptr(unsafe.Pointer(&r.path[0])),
		syscall.O_RDONLY|syscall.O_CLOEXEC, 0, 0, 0)
	if e != 0 {
		return 0, false // the thread has exited
	}
	n, err := syscall.Read(int(fd), r.stat[:])
	syscall.Close(int(fd))
	if err != nil || n <= 0 {
		return 0, false
	}
	// "run_ns wait_ns slices\n": the second field.
	s := r.stat[:n]
	i := 0
	for i < len(s) && s[i] != ' ' {
		i++
	}
	var v int64
	got := false
	for i++; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		v = v*10 + int64(s[i]-'0')
		got = true
	}
	return v, got
}
