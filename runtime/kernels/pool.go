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
}

type span struct{ lo, hi int }

// minChunk is the smallest range worth handing to another worker.
const minChunk = 8

// NewPool starts a pool of n workers (n ≤ 0: runtime.NumCPU()). The calling
// goroutine works too, so n-1 goroutines are started.
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	p := &Pool{workers: n, start: make([]chan span, n-1)}
	for i := range p.start {
		ch := make(chan span, 1)
		p.start[i] = ch
		go func() {
			for s := range ch {
				p.cur.do(s.lo, s.hi)
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

// run splits [0, n) into one range per worker and runs j on each.
func (p *Pool) run(j job, n int) {
	parts := min(p.workers, (n+minChunk-1)/minChunk)
	if parts <= 1 {
		j.do(0, n)
		return
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
	p.cur.do(0, min(chunk, n))
	p.wg.Wait()
}
