package kernels

import (
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// Pool is a fixed set of worker goroutines that run each kernel call's
// parallel dimension in chunks. It starts its workers once; a call neither
// starts goroutines nor allocates. A Pool runs one call at a time: callers
// from several goroutines must use separate pools.
//
// Each call is cut into a few chunks per worker (chunksPerWorker). Each
// thread woken for the call owns an equal run of them and takes them from a
// counter of its own (slot), then takes what is left of the others' runs. A
// worker the operating system has descheduled (a busy device, test binaries
// side by side) then only delays the chunk it holds: the others, the caller
// included, take the rest, and a worker that has not woken yet takes
// nothing. The chunks depend only on the call's size and the pool's thread
// count, never on who ran them, so results are the same from run to run.
// Counters of their own keep the threads off each other's cache lines until
// a run is done: with one shared counter (and one count of chunks done) a
// call cost 2 threads 0.85 µs more than its work on a 2-vCPU Intel Xeon,
// where a cache line takes 0.15 µs from one core to the other, and 0.58 µs
// with them (a MatVec of 16 F32 rows of 576, two chunks); decode calls the
// pool about 150 times a token (SmolLM2-135M shape, dense). Figures: README,
// Threads.
//
// Decode issues hundreds of small calls per token, so waking a parked
// goroutine for each (tens of µs on a busy VM) would cost more than the work.
// Idle workers therefore spin for a new call, bounded in time (workerSpin),
// and the caller spins for the last chunks (callerSpin); either parks at once
// when its spin was interrupted by the operating system (the CPUs are
// oversubscribed, and a spinning thread would take a CPU from one with work).
// While they spin, workers read ahead the weights the caller named
// (Prefetch, ahead.go), and the spin's time starts again after each read.
// While the process's threads wait for CPUs, the caller wakes fewer workers
// (adapt.go).
type Pool struct {
	workers int
	cur     job
	chunk   int    // the current call's units per chunk
	units   int    // and its size
	gen     uint64 // the current call's generation (caller only)
	_       [64]byte
	state   atomic.Uint64 // gen<<genShift | threads woken<<chunkBits | chunks
	_       [56]byte
	// slots[k] is thread k's (0: the caller, i+1: worker i): its range's
	// next chunk and the chunks it has finished, each on its own cache line.
	slots  []slot
	closed atomic.Bool
	ahead  atomic.Pointer[Ahead] // weights for idle workers to read ahead (Prefetch)
	// aheadSeq counts Prefetch's calls: the same Ahead handed again is new
	aheadSeq atomic.Uint64
	parked   []atomic.Bool   // parked[i]: worker i+1 is (about to be) asleep on wake[i]
	wake     []chan struct{} // one-slot wake-up channels
	waiting  atomic.Bool     // the caller is (about to be) asleep on finished
	// finished has one slot: the worker that finishes a call's last chunk
	// wakes the caller through it.
	finished chan struct{}
	// fault holds the first memory fault (a panic value with an Addr
	// method) a chunk of the current call hit; the caller re-panics with it.
	fault atomic.Pointer[any]
	// testLastDone, when set (tests only, before the first call), runs in a
	// worker that finds a call's chunks all done after counting one of its
	// own, before it looks for a caller to wake (with it set, workers look
	// after every chunk; without, only while the caller sleeps).
	testLastDone func()
	// testClaim, when set (tests only), runs in a worker before it takes
	// chunks of a call.
	testClaim func(worker int)
	// testRan, when set (tests only), runs in thread k (0: the caller)
	// after it ran chunk c of a call, before the chunk counts as done.
	testRan func(k, c int)
	// testFixed, when set (tests only), keeps every thread woken: adapt
	// does nothing, so a test's outcome does not depend on the machine's
	// load.
	testFixed bool
	// testAhead, when set (tests only), runs in worker i after it read
	// the page at a.Mats[mi].Data[off:] of the pool's Ahead (mi −1: a
	// page faulted).
	testAhead func(worker, mi, off int)
	// testSched, when set (tests only, before the first call), replaces
	// the schedstat reader: a thread's time on a CPU and run delay, ns.
	testSched func(tid int64) (run, wait int64, ok bool)
	parts     [][]float32 // AddRows' partial sums, one per chunk
	scratch   []*scratch  // one per worker; [0] is the calling goroutine's
	reserved  scratchSize // what every scratch holds at least (reserve)
	stats     PoolStats
	// tids[i] is worker i+1's OS thread id (it is locked to it), 0 until
	// the worker has started.
	tids []atomic.Int64
	// adapt's state (caller only): the threads woken for a call, the
	// current window's start, quiet windows in a row (-1: the last window
	// was not quiet), the quiet windows the next probe waits for and the
	// windows since the last probe, plus one (0: no probe on trial), the last reading of each thread ([0]: the caller's),
	// the growth of their times on a CPU and run delays summed over
	// readings, and those sums at winStart, ns.
	active            int
	winStart          time.Duration
	quiet             int
	probeAfter        int
	probeAge          int
	last              []threadTimes
	ran, waited       int64
	winRan, winWaited int64
	sched             schedReader
}

// PoolStats counts what a pool's threads did, for benchmarks and tests.
type PoolStats struct {
	Calls        uint64 // kernel calls split into chunks
	Chunks       uint64 // their chunks
	CallerChunks uint64 // chunks the calling goroutine ran
	CallerParks  uint64 // calls whose caller slept waiting for a worker's chunk
	ThreadCalls  uint64 // Σ over calls of the threads woken for it, the caller included
}

// Stats returns the pool's counts so far. Call it between kernel calls.
func (p *Pool) Stats() PoolStats { return p.stats }

// slot is one thread's part of a call (Pool.slots), tagged with the call's
// generation (slotWord): next holds the next chunk of the thread's run to
// take, done the chunks the thread finished. A tag older than the call reads
// as the run's start and as none done, so a call resets no slot. Each field
// has a cache line of its own: a thread claims and counts on lines that no
// other thread writes until it steals from them.
type slot struct {
	next atomic.Uint64
	_    [56]byte
	done atomic.Uint64
	_    [56]byte
}

// scratch is a worker's private buffer space, kept across calls.
type scratch struct {
	pack []float32 // MatMulRowsT's float32 copy of a weight block
	att  []float32 // Attention's scores for one token-head pair, or a block's (attendBlock)
	xq   []int8    // the caller's: MatVec's x as int8 blocks (block-quantized weights)
	xd   []float32 // and their scales
	xb   []byte    // the caller's: MatVecBatch's x in qBatchLayout
	xf   []float32 // the caller's: MatMul's x dequantized back (dequantizeX)
	qw   []float32 // block-quantized weights dequantized for MatMul and MatMulRowsT
}

// scratchSize is the float32s of each scratch buffer a call needs.
type scratchSize struct{ pack, qw, att int }

// reserve grows every worker's scratch to what any chunk of j needs, so that
// no chunk allocates: workers the adaptive pool left asleep during earlier
// calls of the same shape included. It costs three compares once the pool
// has seen the shape.
func (p *Pool) reserve(j *job) {
	need := j.scratchNeed()
	if need.pack <= p.reserved.pack && need.qw <= p.reserved.qw && need.att <= p.reserved.att {
		return
	}
	p.reserved = scratchSize{max(need.pack, p.reserved.pack), max(need.qw, p.reserved.qw), max(need.att, p.reserved.att)}
	for _, s := range p.scratch {
		s.pack = grow(s.pack, p.reserved.pack)
		s.qw = grow(s.qw, p.reserved.qw)
		s.att = grow(s.att, p.reserved.att)
	}
}

// grow returns b, or a new buffer of n elements where b is shorter.
func grow(b []float32, n int) []float32 {
	if len(b) < n {
		return make([]float32, n)
	}
	return b
}

// minChunk is the smallest range worth handing to another worker;
// swigluMinChunk the elements of a SwiGLU chunk, whose work per element is
// so small (0.75 ns, AVX2) that a call on 2 threads was slower than on 1 up
// to 4096 elements (AMD EPYC Zen 3, 2 threads: 384 elements 0.32 → 0.65–0.93
// µs, 2048 1.5 → 1.9, 4096 2.8–3.1 → 2.9, 8192 6.2 → 4.9): GateFirst's
// SwiGLU of its φ·N rows and its gate scores on a small model each cost a
// pool call for less work than the call.
const (
	minChunk       = 8
	swigluMinChunk = 4096
)

// chunksPerWorker is how many chunks a call is cut into per thread (fewer
// when it is small). More chunks let the others absorb a descheduled worker's
// share; each costs one atomic claim and, for AddRows, one more partial sum
// to add. SmolLM2-135M shape, F16 dense, 2 threads on an idle 2-core VM,
// alternated, median decode: 1 → 63.5, 4 → 68.0, 8 → 63.2 tok/s; one chunk
// per thread for the prefill products only made prefill no faster.
const chunksPerWorker = 4

// The state word: the generation above genShift (its low 40 bits: they wrap
// after 10^12 calls, and a worker would have to sleep through all of them
// between two loads to mistake one call for another; each worker extends
// them to the caller's 64-bit count), then the threads woken for the call and
// its number of chunks, chunkBits each. A slot's words keep the generation's
// low 52 bits above chunkBits (slotWord): they wrap after 4.5·10^15 calls, 140
// years at a million calls a second.
const (
	chunkBits    = 12
	maxChunks    = 1<<chunkBits - 1
	genShift     = 2 * chunkBits
	stateGenMask = 1<<(64-genShift) - 1
	slotGenMask  = 1<<(64-chunkBits) - 1
)

// slotWord is a slot's word for n (a chunk index or count) in call gen;
// slotGen its generation tag and slotN its n.
func slotWord(gen uint64, n int) uint64 { return (gen&slotGenMask)<<chunkBits | uint64(n) }
func slotGen(w uint64) uint64           { return w >> chunkBits }
func slotN(w uint64) int                { return int(w & maxChunks) }

// workerSpin is how long an idle worker polls for the next call before it
// parks; callerSpin how long a caller polls for the last chunks before it
// sleeps. Decode's gaps between calls are a few µs (norms, RoPE), longer at
// the end of a token (sampling) and in prefill (the activation counter);
// waking a parked worker costs tens of µs on a VM, but the caller does not
// wait for it (it takes the chunks itself meanwhile). A caller waits for a
// chunk in flight, at most a chunk's time while that worker runs. Measured
// as chunksPerWorker: a 20 µs worker spin decoded and prefilled no faster idle
// than 200 µs (Llama-3.2-1B shape: prefill 80.6 against 81.0 tok/s median,
// with the caller sleeping on 20% of the calls against 10%).
const (
	workerSpin = 200 * time.Microsecond
	callerSpin = 50 * time.Microsecond
	// preempted: a gap this long between two polls means the operating
	// system ran something else on this CPU meanwhile.
	preempted = 30 * time.Microsecond
	// pollsPerCheck: polls (cpuPause each, 10–50 ns) between clock reads.
	pollsPerCheck = 16
)

// epoch is the origin of the pool's monotonic clock.
var epoch = time.Now()

func now() time.Duration { return time.Since(epoch) }

// spin polls ready, cpuPause between polls, for up to limit. It returns true
// once ready does, false when the limit passed or the thread was descheduled
// while it polled (the CPUs are oversubscribed: the caller should park).
func spin(ready func() bool, limit time.Duration) bool { return spinFor(ready, ready, limit) }

// spinFor is spin that, when the limit passed or the thread was
// descheduled, returns final() rather than ready(): a worker polls for a
// call or weights to read ahead, and parks then unless a call came.
func spinFor(ready, final func() bool, limit time.Duration) bool {
	start := now()
	last := start
	for {
		for range pollsPerCheck {
			if ready() {
				return true
			}
			cpuPause()
		}
		t := now()
		if t-start > limit || t-last > preempted {
			return final()
		}
		last = t
	}
}

// NewPool starts a pool of n threads (n ≤ 0: DefaultThreads(); at most
// maxChunks, 4095). The calling goroutine works too, so n-1 goroutines are
// started.
func NewPool(n int) *Pool {
	if n <= 0 {
		n = DefaultThreads()
	}
	n = min(n, maxChunks) // the state word's count of threads woken
	p := &Pool{workers: n, active: n, probeAfter: adaptProbe, parked: make([]atomic.Bool, n-1), wake: make([]chan struct{}, n-1),
		finished: make(chan struct{}, 1), scratch: make([]*scratch, n), tids: make([]atomic.Int64, n-1),
		last: make([]threadTimes, n), slots: make([]slot, n)}
	for i := range p.scratch {
		p.scratch[i] = new(scratch)
	}
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
		go p.worker(i)
	}
	return p
}

// worker i runs chunks of each call whose generation it sees, on an OS
// thread of its own (runtime.LockOSThread), so that adapt can read that
// thread's scheduler times; the thread ends with it. A fault on a page of
// the weights (a mapped file truncated under the process) panics instead of
// killing the process (debug.SetPanicOnFault), and doChunk hands it to the
// caller.
func (p *Pool) worker(i int) {
	runtime.LockOSThread()
	p.tids[i].Store(gettid())
	debug.SetPanicOnFault(true)
	s := p.scratch[i+1]
	var seen uint64 // the last call's generation, extended to 64 bits
	fresh := func() bool { return p.state.Load()>>genShift != seen&stateGenMask }
	var ra readAhead
	ready := func() bool { return fresh() || ra.pending(p) }
	for {
		for !spinFor(ready, fresh, workerSpin) {
			// Park: announce it, look once more, then sleep unless a call
			// slipped in (the caller wakes a worker it finds parked).
			p.parked[i].Store(true)
			if fresh() && p.parked[i].CompareAndSwap(true, false) {
				break
			}
			<-p.wake[i]
		}
		if p.closed.Load() {
			return
		}
		if !fresh() { // weights to read ahead, and no call yet
			ra.run(p, i, fresh)
			continue
		}
		st := p.state.Load()
		seen += (st>>genShift - seen) & stateGenMask
		if p.testClaim != nil {
			p.testClaim(i)
		}
		p.work(seen, st, i+1, s)
		ra.paused = false
	}
}

// rangeOf returns the chunks [lo, hi) of participant k (0: the caller) of
// a call of total chunks on active threads: an equal share each, in order;
// none for a worker beyond active (it only takes others' chunks).
func rangeOf(k, active, total int) (lo, hi int) {
	if k >= active {
		return total, total
	}
	return k * total / active, (k + 1) * total / active
}

// take claims the next chunk of thread k's range [lo, hi) of call gen, or
// returns ok false when none is left (or the call has ended).
func (p *Pool) take(k int, gen uint64, lo, hi int) (c int, ok bool) {
	sl := &p.slots[k].next
	tag := gen & slotGenMask
	for {
		s := sl.Load()
		next := lo
		switch g := slotGen(s); {
		case g == tag:
			next = slotN(s)
		case g > tag: // a later call: gen has ended
			return 0, false
		}
		if next >= hi {
			return 0, false
		}
		if sl.CompareAndSwap(s, slotWord(gen, next+1)) {
			return next, true
		}
	}
}

// work runs chunks of call gen as thread k (0: the caller): its own range
// first, then what is left of the others', and returns how many it ran. A
// worker that finishes the call's last chunk wakes a waiting caller.
func (p *Pool) work(gen uint64, st uint64, k int, s *scratch) (ran int) {
	active, total := int(st>>chunkBits&maxChunks), int(st&maxChunks)
	n := len(p.slots)
	done := &p.slots[k].done
	for j := range n {
		o := (k + j) % n
		lo, hi := rangeOf(o, active, total)
		for {
			c, ok := p.take(o, gen, lo, hi)
			if !ok {
				break
			}
			// Claimed: until this chunk is counted done, the caller keeps
			// the call (cur, chunk, units, parts) as it published it.
			clo := c * p.chunk
			p.doChunk(clo, min(clo+p.chunk, p.units), s, c)
			if p.testRan != nil {
				p.testRan(k, c)
			}
			ran++
			d := done.Load()
			if slotGen(d) != gen&slotGenMask {
				d = slotWord(gen, 0)
			}
			done.Store(d + 1)
			if k > 0 && (p.waiting.Load() || p.testLastDone != nil) && p.allDone(gen, total) {
				if p.testLastDone != nil {
					p.testLastDone()
				}
				if p.waiting.CompareAndSwap(true, false) {
					p.finished <- struct{}{}
				}
			}
		}
	}
	return ran
}

// allDone reports whether every chunk of call gen (total in all) is done.
func (p *Pool) allDone(gen uint64, total int) bool {
	n := 0
	for k := range p.slots {
		if d := p.slots[k].done.Load(); slotGen(d) == gen&slotGenMask {
			n += slotN(d)
		}
	}
	return n == total
}

// doChunk runs one chunk of the current call. A memory fault in it is kept
// in p.fault (the first of the call) and the chunk counts as done, so the
// call ends and run re-panics with the fault on the caller's goroutine,
// where Session.Forward turns it into an error. Any other panic goes on.
// One deferred recover per chunk (a few per thread and call) costs nothing
// measurable; per row it would.
func (p *Pool) doChunk(lo, hi int, s *scratch, c int) {
	defer p.keepFault()
	p.cur.do(lo, hi, s, c)
}

// keepFault is doChunk's deferred recover (a method, so that the call
// allocates nothing when there is no panic).
func (p *Pool) keepFault() {
	if r := recover(); r != nil {
		if !IsFault(r) {
			panic(r)
		}
		p.storeFault(r)
	}
}

// storeFault keeps r as the call's fault unless one is kept already.
func (p *Pool) storeFault(r any) { p.fault.CompareAndSwap(nil, &r) }

// IsFault reports whether a recovered panic value is a memory fault: the
// runtime.Error of a goroutine with debug.SetPanicOnFault set, which has an
// Addr method (for example SIGBUS on a page of a file truncated while
// mapped).
func IsFault(r any) bool {
	_, ok := r.(interface{ Addr() uintptr })
	return ok
}

// Threads returns the number of threads, the caller included.
func (p *Pool) Threads() int { return p.workers }

// Close stops the workers. A kernel called on the pool afterwards panics.
func (p *Pool) Close() {
	p.sched.close()
	p.closed.Store(true)
	p.gen++
	p.state.Store(p.gen << genShift)
	for i := range p.parked {
		if p.parked[i].CompareAndSwap(true, false) {
			p.wake[i] <- struct{}{}
		}
	}
}

// split returns the chunk size and the number of chunks for a job of n units
// on this pool.
func (p *Pool) split(j *job, n int) (chunk, total int) {
	mc := j.chunkMin()
	parts := min(p.workers*chunksPerWorker, (n+mc-1)/mc, maxChunks)
	if parts <= 1 || p.workers == 1 {
		return n, 1
	}
	chunk = (n + parts - 1) / parts
	if a := j.colAlign(); chunk > a || j.alignRequired() {
		chunk = (chunk + a - 1) / a * a
	}
	return chunk, (n + chunk - 1) / chunk
}

// run cuts [0, n) into chunks and runs j on each. It returns the number of
// chunks: chunk i ran with j.parts[i] (opAddRowsPart). It panics on a closed
// pool, whose workers would never answer.
func (p *Pool) run(j job, n int) (parts int) {
	if p.closed.Load() {
		panic("kernels: Pool used after Close")
	}
	chunk, total := p.split(&j, n)
	j.chunk = chunk
	p.reserve(&j)
	switch j.op {
	case opAddRowsPart:
		p.partialSums(total, j.w.Cols)
		j.parts = p.parts
	case opAddRowsPartBatch:
		p.partialSums(total*j.t, j.w.Cols)
		j.parts = p.parts[:total*j.t]
	}
	if total <= 1 {
		j.do(0, n, p.scratch[0], 0)
		return 1
	}
	p.adapt()
	p.cur, p.chunk, p.units = j, chunk, n
	p.gen++
	st := p.gen<<genShift | uint64(p.active)<<chunkBits | uint64(total)
	p.state.Store(st) // publishes the call
	for i := range p.parked[:p.active-1] {
		if p.parked[i].CompareAndSwap(true, false) {
			p.wake[i] <- struct{}{}
		}
	}
	p.stats.Calls++
	p.stats.Chunks += uint64(total)
	p.stats.ThreadCalls += uint64(p.active)
	p.stats.CallerChunks += uint64(p.work(p.gen, st, 0, p.scratch[0]))
	gen := p.gen
	finished := func() bool { return p.allDone(gen, total) }
	if !spin(finished, callerSpin) {
		p.stats.CallerParks++
	}
	for !finished() {
		// Sleep: announce it, look once more, then wait for the worker that
		// finishes the last chunk (it wakes a caller it finds waiting).
		// Spinning on would keep a CPU from that worker when the CPUs are
		// oversubscribed. A wake-up may be a late one from an earlier call's
		// last worker (counted down, then delayed before it looked at
		// waiting), so the loop looks again.
		p.waiting.Store(true)
		if finished() && p.waiting.CompareAndSwap(true, false) {
			break
		}
		<-p.finished
	}
	if p.fault.Load() != nil { // a read: the workers poll the cache lines nearby
		panic(*p.fault.Swap(nil))
	}
	return total
}

// partialSums makes p.parts hold n buffers of c floats (each chunk clears
// its own).
func (p *Pool) partialSums(n, c int) {
	for len(p.parts) < n {
		p.parts = append(p.parts, nil)
	}
	for i := range n {
		if cap(p.parts[i]) < c {
			p.parts[i] = make([]float32, c)
		}
		p.parts[i] = p.parts[i][:c]
	}
}
