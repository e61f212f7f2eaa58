package kernels

import "time"

// The pool sizes itself to the CPUs it actually gets. When more threads are
// runnable than there are CPUs (a camera pipeline or another process beside
// the model, test binaries side by side), the operating system time-slices
// them, and a slice taken from the calling thread stalls the whole call: on a
// 2-core machine with one core busy, two threads decoded 15–20% slower than
// one. So the caller measures, over windows of adaptWindow, how long the
// process's threads were runnable but waiting for a CPU (Linux schedstat's
// run delay, summed over threads). Two windows in a row whose wait exceeds
// adaptWait of their length mean the CPUs are oversubscribed: the pool then wakes one
// worker fewer for its calls (never fewer than the caller). After adaptProbe
// quiet windows it tries one more again, up to its size. The chunks stay
// those of the full pool, so results do not depend on it. Where the run
// delay cannot be read (not Linux, or a kernel without schedstat), the pool
// keeps all its threads.
//
// Measured on a 2-core VM: idle, the threads of a 2-thread decode wait about
// 0.03 of a window in all; with a busy loop on one core, 0.7 with both
// threads and 0.15 with one. Windows of 10 ms rather than 50 ms let short runs
// adapt too (the embedded model's 64-token decode beside a busy loop: 2
// threads at 0.85× of one, against 0.5–0.9×) and cost one read of
// /proc/self/task per window (29 µs, 0 allocations: BenchmarkRunDelayRead),
// 0.3% of a window.
const (
	adaptWindow = 10 * time.Millisecond
	adaptWait   = 0.3
	adaptProbe  = 100 // quiet windows before trying one more worker (1 s)
)

// adapt updates p.active at the end of each adaptWindow; run calls it before
// each call.
func (p *Pool) adapt() {
	if p.testFixed {
		return
	}
	t := now()
	if t-p.winStart < adaptWindow {
		return
	}
	if d, ok := p.delay.read(); ok {
		p.observe(t, d)
	}
}

// observe ends a window at time t, when the threads' total run delay is d ns.
func (p *Pool) observe(t time.Duration, d int64) {
	if p.winStart != 0 {
		if float64(d-p.winDelay) > adaptWait*float64(t-p.winStart) {
			// Two windows in a row: one alone is often a page fault or a
			// kernel thread.
			if p.quiet < 0 {
				p.active = max(1, p.active-1)
			}
			p.quiet = -1
		} else if p.quiet = max(p.quiet, 0) + 1; p.quiet >= adaptProbe && p.active < p.workers {
			p.active++
			p.quiet = 0
		}
	}
	p.winStart, p.winDelay = t, d
}
