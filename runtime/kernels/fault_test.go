//go:build unix

package kernels

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/selectinfer/sinf/format"
)

// TestPoolFault (issue 16 item 3): a kernel call over weights whose mapped
// pages have gone (the file was truncated) re-panics on the caller with the
// memory fault, whichever thread read the page, and the pool keeps working;
// the process is not killed (a fault on a worker without the recover would
// be a fatal SIGBUS). The caller runs with SetPanicOnFault, as
// runtime.Session.Forward does.
// faultSink keeps TestPoolFault's probing read from being optimised away.
var faultSink byte

func TestPoolFault(t *testing.T) {
	const rows, cols = 512, 256
	path := filepath.Join(t.TempDir(), "w")
	require.NoError(t, os.WriteFile(path, make([]byte, rows*cols*4), 0o644))
	fd, err := os.Open(path)
	require.NoError(t, err)
	data, err := unix.Mmap(int(fd.Fd()), 0, rows*cols*4, unix.PROT_READ, unix.MAP_SHARED)
	fd.Close()
	require.NoError(t, err)
	defer unix.Munmap(data)
	require.NoError(t, os.Truncate(path, 0))
	w, err := NewMat(format.Tensor{Name: "w", DType: format.F32, Shape: []int{rows, cols}, Data: data})
	require.NoError(t, err)
	good, err := NewMat(format.Tensor{Name: "g", DType: format.F32, Shape: []int{rows, cols}, Data: make([]byte, rows*cols*4)})
	require.NoError(t, err)
	p := NewPool(2)
	defer p.Close()
	x, dst := make([]float32, cols), make([]float32, rows)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if r := func() (r any) { // the platform's fault, read here on the test's goroutine
		defer func() { r = recover() }()
		faultSink = data[0]
		return nil
	}(); !IsFault(r) {
		// qemu-user delivers SIGBUS without the address, so Go reports a
		// nil dereference, which is not a fault to keep.
		t.Skipf("this platform reports a read past the end of a truncated mapping as %v, not as a fault with its address (qemu-user does)", r)
	}
	call := func() (r any) {
		defer func() { r = recover() }()
		MatVec(p, dst, w, x)
		return nil
	}
	var workerChunks uint64 // chunks of the faulting calls that the worker ran
	// Until the worker has run a chunk of a faulting call (the caller may
	// take them all while the worker is not scheduled), 50 calls at least.
	for i := 0; i < 50 || workerChunks == 0 && i < 100000; i++ {
		before := p.Stats()
		r := call()
		after := p.Stats()
		workerChunks += (after.Chunks - before.Chunks) - (after.CallerChunks - before.CallerChunks)
		require.True(t, IsFault(r), "recovered %v", r)
		MatVec(p, dst, good, x) // the pool still answers
	}
	require.NotZero(t, workerChunks, "the worker never took a chunk of a faulting call, so its recover was not exercised")
}

// TestPrefetchFault: weights read ahead (Pool.Prefetch) whose mapped pages
// have gone end the worker's reading ahead without killing the process;
// the pool goes on answering.
func TestPrefetchFault(t *testing.T) {
	const n = 64 << 10
	path := filepath.Join(t.TempDir(), "w")
	require.NoError(t, os.WriteFile(path, make([]byte, n), 0o644))
	fd, err := os.Open(path)
	require.NoError(t, err)
	data, err := unix.Mmap(int(fd.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	fd.Close()
	require.NoError(t, err)
	defer unix.Munmap(data)
	require.NoError(t, os.Truncate(path, 0))
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if r := func() (r any) {
		defer func() { r = recover() }()
		faultSink = data[0]
		return nil
	}(); !IsFault(r) {
		t.Skipf("this platform reports a read past the end of a truncated mapping as %v, not as a fault with its address (qemu-user does)", r)
	}
	good, err := NewMat(format.Tensor{Name: "g", DType: format.F32, Shape: []int{256, 64}, Data: make([]byte, 256*64*4)})
	require.NoError(t, err)
	p := NewPool(2)
	defer p.Close()
	p.testFixed = true
	var pages, faults atomic.Int32
	p.testAhead = func(_, mi, _ int) {
		if mi < 0 {
			faults.Add(1)
		} else {
			pages.Add(1)
		}
	}
	p.Prefetch(&Ahead{Mats: []Mat{{DType: format.F32, Rows: 1, Cols: n / 4, Data: data}}})
	x, dst := make([]float32, 64), make([]float32, 256)
	MatVec(p, dst, good, x) // the worker reads ahead after it, and faults
	require.Eventually(t, func() bool { return faults.Load() == 1 && p.parked[0].Load() }, 10*time.Second, time.Millisecond,
		"the worker's reading ahead faulted once, and it then parked (done with those weights)")
	for range 100 {
		MatVec(p, dst, good, x)
	}
	require.Zero(t, pages.Load(), "a page of the truncated mapping was read")
	require.Equal(t, int32(1), faults.Load(), "weights that faulted were read again")
}
