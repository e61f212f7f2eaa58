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

// TestAdapt feeds the controller windows of run delay, as fractions of the
// pool threads' runnable time: two oversubscribed windows in a row take one
// thread away, one alone does not, and adaptProbe quiet windows give one
// back, never beyond the pool or below the caller; a probe that fails
// doubles the quiet windows before the next (up to maxProbe), one that holds
// resets them. A window whose threads were hardly runnable is no evidence.
func TestAdapt(t *testing.T) {
	p := &Pool{workers: 3, active: 3, probeAfter: adaptProbe}
	var clock time.Duration
	var ran, waited int64
	window := func(waiting float64) int {
		clock += adaptWindow
		ran += int64((1 - waiting) * float64(adaptWindow))
		waited += int64(waiting * float64(adaptWindow))
		p.observe(clock, ran, waited)
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
	require.Equal(t, 2, window(0.33))
	require.Equal(t, 1, window(0.33), "the probe oversubscribed (one core of two busy): back")
	// The failed probe doubles the wait for the next one.
	for i := 1; i < 2*adaptProbe; i++ {
		require.Equal(t, 1, window(0.1), "quiet window %d after a failed probe", i)
	}
	require.Equal(t, 2, window(0.1), "probe again after %d quiet windows", 2*adaptProbe)
	window(0.33)
	require.Equal(t, 1, window(0.33), "failed again")
	for range 4*adaptProbe - 1 {
		require.Equal(t, 1, window(0))
	}
	require.Equal(t, 2, window(0), "probe after %d quiet windows", 4*adaptProbe)
	// This probe holds: after adaptProbe windows the wait is adaptProbe again.
	for i := 1; i < adaptProbe; i++ {
		require.Equal(t, 2, window(0), "window %d after a probe that holds", i)
	}
	require.Equal(t, 3, window(0), "the next probe comes after adaptProbe windows again")
	for range 3 * maxProbe {
		window(0)
	}
	require.Equal(t, 3, p.active, "never beyond the pool")

	// Hardly runnable (90% waiting, but of 0.5 ms): no evidence.
	for range 3 {
		clock += adaptWindow
		ran += int64(minRunnable / 20)
		waited += int64(minRunnable * 9 / 20)
		p.observe(clock, ran, waited)
	}
	require.Equal(t, 3, p.active)

	// Failed probes never wait longer than maxProbe windows.
	for range 30 {
		p.probeAge = 1
		window(0.9)
		window(0.9)
	}
	require.Equal(t, maxProbe, p.probeAfter)
}

// TestAdaptOwnThreads drives a real pool's adapt with injected schedstat
// readings (so the outcome does not depend on the machine's load). Every
// thread of the process that is not the pool's waits for a CPU most of each
// window, as the Go runtime's helper threads do while the pool's threads
// use every CPU: the pool reads only its own threads (its locked workers and
// the caller's thread), keeps all its threads woken, and drops one only
// when its own threads wait a third of their runnable time (one core of two
// busy).
func TestAdaptOwnThreads(t *testing.T) {
	if gettid() == 0 {
		t.Skip("no thread ids here (not Linux)")
	}
	runtime.LockOSThread() // the caller's thread stays one for the test
	defer runtime.UnlockOSThread()
	p := NewPool(3)
	defer p.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	m := randMat(rng, format.F32, 256, 64, 0)
	x := randVec(rng, 64)
	dst := make([]float32, 256)
	MatVec(p, dst, m.Mat, x) // the workers have started once a call ran
	for i := range p.tids {
		for p.tids[i].Load() == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	caller := gettid()
	own := map[int64]bool{caller: true}
	for i := range p.tids {
		own[p.tids[i].Load()] = true
	}
	require.Len(t, own, 3, "the caller and two workers on threads of their own")

	// Each thread's cumulative times; a window adds to every thread of the
	// process, the helpers waiting 80% of the window.
	type times struct{ run, wait int64 }
	clocks := map[int64]*times{}
	var asked []int64
	p.testSched = func(tid int64) (int64, int64, bool) {
		asked = append(asked, tid)
		c, ok := clocks[tid]
		if !ok {
			return 0, 0, false
		}
		return c.run, c.wait, true
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip("no /proc/self/task here")
	}
	for _, e := range tasks {
		var tid int64
		fmt.Sscan(e.Name(), &tid)
		clocks[tid] = &times{}
	}
	for tid := range own {
		clocks[tid] = &times{}
	}
	var clock time.Duration
	window := func(ownWaiting float64) int {
		w := int64(adaptWindow)
		for tid, c := range clocks {
			if own[tid] {
				c.run += int64((1 - ownWaiting) * float64(w))
				c.wait += int64(ownWaiting * float64(w))
			} else {
				c.run += w / 50
				c.wait += w * 8 / 10
			}
		}
		clock += adaptWindow
		p.adaptAt(clock, caller)
		return p.active
	}
	window(0)
	for i := range 50 {
		require.Equal(t, 3, window(0.02), "window %d: the helpers' waiting is not the pool's", i)
	}
	for _, tid := range asked {
		require.True(t, own[tid], "asked about thread %d, not one of the pool's", tid)
	}
	require.Equal(t, 3, window(0.33))
	require.Equal(t, 2, window(0.33), "the pool's own threads wait a third of their runnable time")

	// A call still runs on the active threads and gives the same result.
	want := make([]float32, 256)
	copy(want, dst)
	MatVec(p, dst, m.Mat, x)
	require.Equal(t, want, dst)
}

// TestParseSchedstat: the fields of /proc/self/task/TID/schedstat.
func TestParseSchedstat(t *testing.T) {
	run, wait, ok := parseSchedstat([]byte("123456 7890 12\n"))
	require.True(t, ok)
	require.Equal(t, int64(123456), run)
	require.Equal(t, int64(7890), wait)
	for _, bad := range []string{"", "12", "12 x 3", "x 1 2"} {
		_, _, ok := parseSchedstat([]byte(bad))
		require.False(t, ok, "%q", bad)
	}
}

// TestRunDelay: on Linux the reader sees threads wait when there are more
// runnable threads than CPUs.
func TestRunDelay(t *testing.T) {
	var r schedReader
	defer r.close()
	if _, _, ok := r.read(gettid()); !ok {
		t.Skip("no schedstat run delay here")
	}
	n := 3 * runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n + 1))
	var spun sync.WaitGroup
	release := make(chan struct{})
	tids := make([]int64, n)
	for i := range n {
		spun.Add(1)
		go func() {
			runtime.LockOSThread() // a thread of its own, kept until released
			tids[i] = gettid()
			for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
			}
			spun.Done()
			<-release
		}()
	}
	spun.Wait()
	var ran, waited int64
	for _, tid := range tids {
		run, wait, ok := r.read(tid)
		require.True(t, ok)
		ran, waited = ran+run, waited+wait
	}
	close(release)
	// n threads on NumCPU CPUs for 200 ms each wait about (n-NumCPU)·200 ms in all.
	require.Greater(t, waited, int64(100*time.Millisecond), "run delay %v", time.Duration(waited))
	require.Greater(t, ran, int64(0), "time on a CPU")
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

// BenchmarkRunDelayRead: the cost of one adapt window's reading of a
// 2-thread pool's times.
func BenchmarkRunDelayRead(b *testing.B) {
	p := NewPool(2)
	defer p.Close()
	for p.tids[0].Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if !p.readTimes(gettid()) {
		b.Skip("no schedstat run delay here")
	}
	for b.Loop() {
		p.readTimes(gettid())
	}
}
