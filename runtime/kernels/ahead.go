package kernels

// Ahead is weights that a caller's next calls will read: a decode step's
// next layer, say. Handed to Pool.Prefetch, they are read ahead by the
// pool's idle workers.
type Ahead struct {
	Mats []Mat
}

// Prefetch has the pool's idle workers read a's weights ahead, one byte a
// cache line, into the caches that the calls after it then find them in
// (nil: nothing). A worker is idle while the caller works alone between
// calls (norms, RoPE, quantizing x, GateFirst's pick) and between its own
// last chunk and the caller's; decode's matrix-vector products wait on
// memory, so those gaps are memory bandwidth left unused. Each worker takes
// every (workers−1)-th page of a, stops at the next call and resumes after
// it, and is done with a once it reached the end; a new a starts over. On
// a pool of one thread, or while adapt keeps workers asleep (the CPUs are
// busy), it does nothing. A memory fault reading a ends the reading (the
// call that reads those weights reports it). SmolLM2-135M shape, 2
// threads, 2-vCPU Intel Xeon, next layer's attention projections ahead
// (README's figures). Caller only, between calls.
func (p *Pool) Prefetch(a *Ahead) {
	if p.workers == 1 {
		return
	}
	if p.active < p.workers {
		a = nil
	}
	p.ahead.Store(a)
}

// aheadPage is the bytes a worker reads ahead between looks for a new call:
// at 10–15 GB/s, a few tenths of a µs.
const aheadPage = 4096

// readAhead is one worker's progress through the pool's Ahead: the next
// page it reads is at a.Mats[mi].Data[off:] (pages start at each matrix's
// first byte, every aheadPage bytes).
type readAhead struct {
	a       *Ahead
	mi, off int
	done    bool
	sink    byte // the bytes read, summed, so that the reads stay
}

// pending reports whether the pool holds weights to read ahead that this
// worker has not finished.
func (r *readAhead) pending(p *Pool) bool {
	a := p.ahead.Load()
	return a != nil && (a != r.a || !r.done)
}

// run reads worker i's pages of the pool's Ahead, pages i, i+n, i+2n, … of
// its matrices' pages one after the other (n the workers other than the
// caller), until stop reports a call or the pages end.
func (r *readAhead) run(p *Pool, i int, stop func() bool) {
	a := p.ahead.Load()
	if a == nil {
		return
	}
	n := p.workers - 1
	if a != r.a {
		*r = readAhead{a: a, sink: r.sink, mi: -1}
		r.advance(i + 1)
	}
	defer func() {
		if e := recover(); e != nil {
			if !IsFault(e) {
				panic(e)
			}
			r.done = true
		}
	}()
	for !r.done && !stop() {
		d := a.Mats[r.mi].Data
		for o := r.off; o < min(r.off+aheadPage, len(d)); o += 64 {
			r.sink += d[o]
		}
		if p.testAhead != nil {
			p.testAhead(i, r.mi, r.off)
		}
		r.advance(n)
	}
}

// advance moves the next page n pages on (from mi −1: to the n-th page).
func (r *readAhead) advance(n int) {
	for ; n > 0 && !r.done; n-- {
		r.off += aheadPage
		for r.mi < 0 || r.off >= len(r.a.Mats[r.mi].Data) {
			r.mi, r.off = r.mi+1, 0
			if r.mi == len(r.a.Mats) {
				r.done = true
				break
			}
		}
	}
}
