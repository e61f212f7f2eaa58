package kernels

import (
	"runtime"
	"sync/atomic"
)

// Pool is a fixed set of worker goroutines that split each kernel call's
// parallel dimension into contiguous ranges. It starts its workers once; a
// call neither starts goroutines nor allocates. A Pool runs one call at a time:
// callers from several goroutines must use separate pools.
//
// Decode issues hundreds of small calls per token, so waking a parked
// goroutine for each (a futex wake, tens of microseconds on a busy VM) would
// cost more than the work. Workers therefore spin on a generation counter for
// a short while after each call and park only when the pool stays idle.
type Pool struct {
	workers int
	cur     job
	spans   []span        // spans[i]: the range of worker i+1 for this call
	gen     atomic.Uint64 // incremented for each call; workers run when it moves
	pending atomic.Int32  // worker ranges of this call not yet done
	closed  atomic.Bool
	parked  []atomic.Bool   // parked[i]: worker i+1 is (about to be) asleep on wake[i]
	wake    []chan struct{} // one-slot wake-up channels
	waiting atomic.Bool     // the caller is (about to be) asleep on done
	done    chan struct{}   // one slot: the last worker of a call wakes the caller
	// testLastDone, when set (tests only, before the first call), runs in the
	// last worker of a call between its count-down and its wake-up.
	testLastDone func()
	scratch      []*scratch // one per worker; [0] is the calling goroutine's
}

type span struct{ lo, hi int }

// scratch is a worker's private buffer space, kept across calls.
type scratch struct {
	pack []float32 // MatMulRowsT's float32 copy of a weight block
	acc  []float32 // AddRows's partial sum
	att  []float32 // Attention's scores for one token-head pair
	xq   []int8    // the caller's: MatVec's x as int8 blocks (block-quantized weights)
	xd   []float32 // and their scales
	qw   []float32 // block-quantized weights dequantized for MatMul and MatMulRowsT
}

// minChunk is the smallest range worth handing to another worker.
const minChunk = 8

// spinChecks is how many times an idle worker polls for a new call before it
// parks, and a caller polls for the workers to finish before it sleeps. Each
// poll is paced by cpuPause (about 30 ns on Zen 3): about 0.5 ms of spinning,
// longer than the serial gaps between prefill's kernel calls (norms, RoPE and
// the activation counter over all tokens); waking a parked worker costs tens
// of µs on a VM. The price: test binaries sharing the CPUs run several times
// slower. Without the pause, 2-thread prefill on a 2-vCPU VM ran 8–30% slower
// (a spinning vCPU competes with the working one).
const spinChecks = 1 << 14

// NewPool starts a pool of n workers (n ≤ 0: runtime.NumCPU()). The calling
// goroutine works too, so n-1 goroutines are started.
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	p := &Pool{workers: n, spans: make([]span, n-1), parked: make([]atomic.Bool, n-1),
		wake: make([]chan struct{}, n-1), done: make(chan struct{}, 1), scratch: make([]*scratch, n)}
	for i := range p.scratch {
		p.scratch[i] = new(scratch)
	}
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
		go p.worker(i)
	}
	return p
}

// worker i runs range spans[i] of each call whose generation it sees.
func (p *Pool) worker(i int) {
	s := p.scratch[i+1]
	var seen uint64
	for {
		g := p.gen.Load()
		for spins := 0; g == seen; spins++ {
			if spins < spinChecks {
				cpuPause()
				g = p.gen.Load()
				continue
			}
			// Park: announce it, look once more, then sleep unless a call
			// slipped in (the caller wakes a worker it finds parked).
			p.parked[i].Store(true)
			if g = p.gen.Load(); g != seen && p.parked[i].CompareAndSwap(true, false) {
				break
			}
			<-p.wake[i]
			g = p.gen.Load()
			spins = 0
		}
		seen = g
		if p.closed.Load() {
			return
		}
		sp := p.spans[i]
		if sp.lo < sp.hi {
			p.cur.do(sp.lo, sp.hi, s)
		}
		if p.pending.Add(-1) == 0 {
			if p.testLastDone != nil {
				p.testLastDone()
			}
			if p.waiting.CompareAndSwap(true, false) {
				p.done <- struct{}{}
			}
		}
	}
}

// Threads returns the number of workers, the caller included.
func (p *Pool) Threads() int { return p.workers }

// Close stops the workers. A kernel called on the pool afterwards panics.
func (p *Pool) Close() {
	p.closed.Store(true)
	p.gen.Add(1)
	for i := range p.parked {
		if p.parked[i].CompareAndSwap(true, false) {
			p.wake[i] <- struct{}{}
		}
	}
}

// run splits [0, n) into one range per worker and runs j on each. It
// returns the number of ranges: range i ran with p.scratch[i]. It panics on a
// closed pool, whose workers would never answer.
func (p *Pool) run(j job, n int) (parts int) {
	if p.closed.Load() {
		panic("kernels: Pool used after Close")
	}
	parts = min(p.workers, (n+minChunk-1)/minChunk)
	if parts <= 1 {
		j.do(0, n, p.scratch[0])
		return 1
	}
	p.cur = j
	chunk := (n + parts - 1) / parts
	if a := j.colAlign(); chunk > a || j.alignRequired() {
		chunk = (chunk + a - 1) / a * a
	}
	used := 1
	for i := range p.spans {
		lo := (i + 1) * chunk
		p.spans[i] = span{min(lo, n), min(lo+chunk, n)}
		if lo < n {
			used++
		}
	}
	p.pending.Store(int32(len(p.spans)))
	p.gen.Add(1) // publishes cur and spans to the workers
	for i := range p.parked {
		if p.parked[i].CompareAndSwap(true, false) {
			p.wake[i] <- struct{}{}
		}
	}
	p.cur.do(0, min(chunk, n), p.scratch[0])
	for spins := 0; p.pending.Load() != 0; spins++ {
		if spins < spinChecks {
			cpuPause()
			continue
		}
		// Sleep: announce it, look once more, then wait for the last worker
		// (which wakes a caller it finds waiting). Spinning on instead would
		// keep a CPU from a worker when the CPUs are oversubscribed. A
		// wake-up may be a late one from the previous call's last worker
		// (counted down, then delayed before it looked at waiting), so the
		// loop checks pending again.
		p.waiting.Store(true)
		if p.pending.Load() == 0 && p.waiting.CompareAndSwap(true, false) {
			break
		}
		<-p.done
	}
	return used
}
