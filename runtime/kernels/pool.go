package kernels

import (
	"runtime"
	"sync"
)

// Pool is a fixed set of worker goroutines that split each kernel call's
// parallel dimension into contiguous ranges. It starts its workers once; a
// call neither starts goroutines nor allocates. A Pool runs one call at a time:
// callers from several goroutines must use separate pools.
type Pool struct {
	workers int
	start   []chan span
	wg      sync.WaitGroup
	cur     job
	scratch []*scratch // one per worker; [0] is the calling goroutine's
}

type span struct{ lo, hi int }

// scratch is a worker's private buffer space, kept across calls.
type scratch struct {
	out  [32]float32 // gemm micro-kernel results
	pack []float32   // MatMulRowsT's float32 copy of a weight block
	acc  []float32   // AddRows's partial sum
	att  []float32   // Attention's scores for one token-head pair
}

// minChunk is the smallest range worth handing to another worker.
const minChunk = 8

// NewPool starts a pool of n workers (n ≤ 0: runtime.NumCPU()). The calling
// goroutine works too, so n-1 goroutines are started.
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	p := &Pool{workers: n, start: make([]chan span, n-1), scratch: make([]*scratch, n)}
	for i := range p.scratch {
		p.scratch[i] = new(scratch)
	}
	for i := range p.start {
		ch := make(chan span, 1)
		p.start[i] = ch
		s := p.scratch[i+1]
		go func() {
			for sp := range ch {
				p.cur.do(sp.lo, sp.hi, s)
				p.wg.Done()
			}
		}()
	}
	return p
}

// Threads returns the number of workers, the caller included.
func (p *Pool) Threads() int { return p.workers }

// Close stops the workers. The pool must not be used afterwards.
func (p *Pool) Close() {
	for _, ch := range p.start {
		close(ch)
	}
	p.start = nil
}

// run splits [0, n) into one range per worker and runs j on each. It
// returns the number of ranges: range i ran with p.scratch[i].
func (p *Pool) run(j job, n int) (parts int) {
	parts = min(p.workers, (n+minChunk-1)/minChunk)
	if parts <= 1 {
		j.do(0, n, p.scratch[0])
		return 1
	}
	p.cur = j
	chunk := (n + parts - 1) / parts
	// Keep ranges a multiple of 16 elements where possible so SIMD column
	// splits stay aligned.
	if chunk > 16 {
		chunk = (chunk + 15) &^ 15
	}
	var spans int
	for lo := chunk; lo < n; lo += chunk {
		p.wg.Add(1)
		p.start[spans] <- span{lo, min(lo+chunk, n)}
		spans++
	}
	p.cur.do(0, min(chunk, n), p.scratch[0])
	p.wg.Wait()
	return spans + 1
}
