package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/format"
)

func TestParseCPUList(t *testing.T) {
	require.Equal(t, []int{0, 1, 2, 3, 8, 10, 11}, parseCPUList("0-3,8,10-11"))
	require.Equal(t, []int{5}, parseCPUList("5"))
	for _, bad := range []string{"", "a", "3-1", "1-", "0,,2"} {
		require.Nil(t, parseCPUList(bad), "%q", bad)
	}
}

// TestPhysicalCores counts cores in a fake sysfs of 2 cores × 2 SMT threads:
// CPUs 0 and 2 share core 0, 1 and 3 core 1 (Intel's numbering).
func TestPhysicalCores(t *testing.T) {
	sys := t.TempDir()
	for c, sib := range []string{"0,2", "1,3", "0,2", "1,3"} {
		dir := filepath.Join(sys, fmt.Sprintf("cpu%d", c), "topology")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		name := "core_cpus_list"
		if c == 3 { // an older kernel's name for the same list
			name = "thread_siblings_list"
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(sib+"\n"), 0o644))
	}
	require.Equal(t, 2, physicalCores(sys, []int{0, 1, 2, 3}))
	require.Equal(t, 1, physicalCores(sys, []int{0, 2}), "two SMT siblings are one core")
	require.Equal(t, 2, physicalCores(sys, []int{2, 3}))
	require.Equal(t, runtime.NumCPU(), physicalCores(sys, []int{0, 7}), "an unreadable CPU: fall back to NumCPU")
	require.Equal(t, runtime.NumCPU(), physicalCores(sys, nil))

	n := DefaultThreads()
	require.GreaterOrEqual(t, n, 1)
	require.LessOrEqual(t, n, min(runtime.NumCPU(), runtime.GOMAXPROCS(0)))
	require.Equal(t, 4*runtime.NumCPU(), MaxThreads())
	require.Equal(t, n, NewPool(0).Threads())
}

// TestAdapt feeds the controller windows of run delay: two oversubscribed
// windows in a row take one thread away, one alone does not, and adaptProbe
// quiet windows give one back, never beyond the pool or below the caller.
func TestAdapt(t *testing.T) {
	p := &Pool{workers: 3, active: 3}
	var clock time.Duration
	var delay int64
	window := func(waiting float64) int {
		clock += adaptWindow
		delay += int64(waiting * float64(adaptWindow))
		p.observe(clock, delay)
		return p.active
	}
	window(0) // the first reading only starts a window
	require.Equal(t, 3, window(0.9), "one busy window alone")
	require.Equal(t, 3, window(0.1))
	require.Equal(t, 3, window(0.9))
	require.Equal(t, 2, window(0.9), "two in a row")
	require.Equal(t, 1, window(0.9))
	require.Equal(t, 1, window(0.9), "never below the caller")
	for i := 1; i < adaptProbe; i++ {
		require.Equal(t, 1, window(0.1), "quiet window %d", i)
	}
	require.Equal(t, 2, window(0.1), "probe one more after %d quiet windows", adaptProbe)
	require.Equal(t, 2, window(0.5))
	require.Equal(t, 1, window(0.5), "the probe oversubscribed: back")
	for range 3 * adaptProbe {
		window(0)
	}
	require.Equal(t, 3, p.active, "never beyond the pool")
}

// TestRunDelay: on Linux the reader sees the process's threads wait when
// there are more runnable threads than CPUs.
func TestRunDelay(t *testing.T) {
	var r delayReader
	defer r.close()
	d0, ok := r.read()
	if !ok {
		t.Skip("no schedstat run delay here")
	}
	n := 3 * runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n + 1))
	var spun sync.WaitGroup
	release := make(chan struct{})
	for range n {
		spun.Add(1)
		go func() {
			runtime.LockOSThread() // a thread of its own, kept until released
			for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
			}
			spun.Done()
			<-release
		}()
	}
	spun.Wait()
	d1, ok := r.read()
	close(release)
	require.True(t, ok)
	// n threads on NumCPU CPUs for 200 ms wait about (n-NumCPU)·200 ms in all.
	require.Greater(t, d1-d0, int64(100*time.Millisecond), "run delay %v", time.Duration(d1-d0))
}

// TestPoolStalledWorker: a worker that does not come (descheduled) holds no
// call: the caller runs every chunk, and the results are bit for bit those
// of calls the workers shared, since chunks do not depend on who ran them.
func TestPoolStalledWorker(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	m := randMat(rng, format.F16, 512, 256, 0)
	x := randVec(rng, 256)
	a := randVec(rng, 512)
	shared := NewPool(3)
	defer shared.Close()
	wantV, wantA := make([]float32, 512), make([]float32, 256)
	MatVec(shared, wantV, m.Mat, x)
	AddRows(shared, wantA, m.Mat, nil, a)

	p := NewPool(3)
	release := make(chan struct{})
	p.testClaim = func(int) { <-release }
	gotV, gotA := make([]float32, 512), make([]float32, 256)
	before := p.Stats()
	MatVec(p, gotV, m.Mat, x)
	AddRows(p, gotA, m.Mat, nil, a)
	st := p.Stats()
	close(release)
	p.Close()
	require.Equal(t, uint64(2), st.Calls-before.Calls)
	require.Equal(t, st.Chunks-before.Chunks, st.CallerChunks-before.CallerChunks, "the caller ran every chunk")
	require.Greater(t, st.Chunks-before.Chunks, uint64(2), "the calls were cut into chunks")
	require.Equal(t, wantV, gotV)
	require.Equal(t, math.Float32bits(wantA[0]), math.Float32bits(gotA[0]))
	require.Equal(t, wantA, gotA)
}

// BenchmarkRunDelayRead: the cost of one adapt window's reading.
func BenchmarkRunDelayRead(b *testing.B) {
	var r delayReader
	defer r.close()
	if _, ok := r.read(); !ok {
		b.Skip("no schedstat run delay here")
	}
	for b.Loop() {
		r.read()
	}
}
