package kernels

// Ahead is weights that a caller's next calls will read: a decode step's
// next layer, say. Handed to Pool.Prefetch, they are read ahead by the
// pool's idle workers.
type Ahead struct {
	Mats []Mat
}

// Prefetch has the pool's idle workers read a's weights ahead, one byte a
// cache line, into the caches that the calls after it then find them in;
// nil clears it. A worker is idle while the caller works alone between
// calls (norms, RoPE, quantizing x, GateFirst's pick) and between its own
// last chunk and the caller's; decode's matrix-vector products wait on
// memory, so those gaps are memory bandwidth left unused. Each worker takes
// every (workers−1)-th page of a (pages of aheadPage bytes from each
// matrix's start), stops at the next call, or when a is replaced, and
// resumes after it; it is done with a at the end, and reads it again when
// it is handed again. A worker whose CPU was taken while it read (a page
// took longer than preempted) stops until its next call, so that it parks
// as an idle worker does (spinFor). On a pool of one thread it does
// nothing, and while adapt keeps workers asleep (the CPUs are busy) it
// clears the pool's. The pool keeps a: its weights must stay readable
// until it is replaced or cleared. A memory fault reading them ends that
// worker's reading of a (the call that reads those weights reports it).
// Figures (2-vCPU Intel Xeon, 2 threads): README, Threads. Caller only,
// between calls.
func (p *Pool) Prefetch(a *Ahead) {
	if p.workers == 1 {
		return
	}
	if p.active < p.workers {
		a = nil
	}
	p.aheadSeq.Add(1) // before a: a worker that sees a sees its number or a later one
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
	seq     uint64 // the Prefetch that handed a (Pool.aheadSeq)
	mi, off int
	done    bool
	paused  bool // preempted while reading: no more until the next call
	sink    byte // the bytes read, summed, so that the loads are kept
}

// pending reports whether the pool holds weights to read ahead that this
// worker has not finished.
func (r *readAhead) pending(p *Pool) bool {
	a := p.ahead.Load()
	return a != nil && !r.paused && (a != r.a || p.aheadSeq.Load() != r.seq || !r.done)
}

// run reads worker i's pages of the pool's Ahead, pages i, i+n, i+2n, … of
// its matrices' pages one after the other (n the workers other than the
// caller), until fresh reports a call, Prefetch is called again, the pages
// end, a page faults, or the worker was preempted.
func (r *readAhead) run(p *Pool, i int, fresh func() bool) {
	a := p.ahead.Load()
	if a == nil {
		return
	}
	seq := p.aheadSeq.Load()
	n := p.workers - 1
	if a != r.a || seq != r.seq {
		*r = readAhead{a: a, seq: seq, sink: r.sink, mi: -1}
		r.advance(i + 1)
	}
	defer func() {
		if e := recover(); e != nil {
			if !IsFault(e) {
				panic(e)
			}
			r.done = true
			if p.testAhead != nil {
				p.testAhead(i, -1, 0)
			}
		}
	}()
	for !r.done && !fresh() && p.aheadSeq.Load() == seq {
		start := now()
		d := a.Mats[r.mi].Data
		for o := r.off; o < min(r.off+aheadPage, len(d)); o += 64 {
			r.sink += d[o]
		}
		if now()-start > preempted {
			r.paused = true // the page read again after the next call
			return
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
