package kernels

import (
	"syscall"
	"unsafe"
)

// delayReader sums the run delay of this process's threads: the second field
// of /proc/self/task/TID/schedstat, nanoseconds spent runnable but waiting for
// a CPU (Documentation/scheduler/sched-stats.rst). Threads come and go, so it
// adds up each thread's growth since the last read (a new thread's whole
// delay; an exited one's last part is lost) rather than the current threads'
// totals, which would fall when a thread exits. It reads with raw system
// calls into its own buffers, so a read does not allocate.
type delayReader struct {
	dir    int // /proc/self/task, opened on first use; -1: unavailable
	opened bool
	sum    int64 // the growth added up over reads
	n      int   // threads seen at the last read (at most maxTracked)
	tids   [maxTracked]int64
	delays [maxTracked]int64
	ntids  [maxTracked]int64 // this read's, swapped in when it ends
	ndel   [maxTracked]int64
	dents  [8192]byte
	path   [64]byte
	stat   [128]byte
}

// maxTracked bounds the threads a reader follows; a Go process runs a few
// more than GOMAXPROCS.
const maxTracked = 256

// read returns the run delay added up over reads, in ns, or false where it is
// unavailable.
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
			if reclen < 20 || off+reclen > n {
				break // not a record the kernel writes: stop, do not read past it
			}
			name := r.dents[off+19 : off+reclen]
			off += reclen
			if name[0] < '0' || name[0] > '9' {
				continue
			}
			tid, d, ok := r.threadDelay(name)
			if !ok || threads == maxTracked {
				continue
			}
			grew := d
			for k := range r.n {
				if r.tids[k] == tid {
					grew = d - r.delays[k]
					break
				}
			}
			r.sum += max(grew, 0)
			r.ntids[threads], r.ndel[threads] = tid, d
			threads++
		}
	}
	r.tids, r.delays, r.n = r.ntids, r.ndel, threads
	return r.sum, threads > 0
}

// close releases the directory's descriptor.
func (r *delayReader) close() {
	if r.opened && r.dir >= 0 {
		syscall.Close(r.dir)
	}
	r.opened, r.dir = true, -1
}

// threadDelay reads the run delay of thread name (its id, NUL-terminated),
// and returns the id too.
func (r *delayReader) threadDelay(name []byte) (tid, delay int64, ok bool) {
	const suffix = "/schedstat\x00"
	k := 0
	for ; k < len(name) && name[k] >= '0' && name[k] <= '9'; k++ {
		tid = tid*10 + int64(name[k]-'0')
	}
	if k == 0 || k < len(name) && name[k] != 0 || k+len(suffix) > len(r.path) {
		return 0, 0, false
	}
	copy(r.path[:], name[:k])
	copy(r.path[k:], suffix)
	fd, _, e := syscall.Syscall6(syscall.SYS_OPENAT, uintptr(r.dir), uintptr(unsafe.Pointer(&r.path[0])),
		syscall.O_RDONLY|syscall.O_CLOEXEC, 0, 0, 0)
	if e != 0 {
		return 0, 0, false // the thread has exited
	}
	n, err := syscall.Read(int(fd), r.stat[:])
	syscall.Close(int(fd))
	if err != nil || n <= 0 {
		return 0, 0, false
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
	return tid, v, got
}
