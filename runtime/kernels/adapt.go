package kernels

import "time"

// The pool sizes itself to the CPUs it actually gets. When more threads are
// runnable than there are CPUs (a camera pipeline or another process beside
// the model, test binaries side by side), the operating system time-slices
// them, and a slice taken from the calling thread stalls the whole call: on a
// 2-core machine with one core busy, two threads decoded 15–20% slower than
// one. So the caller measures, over windows of adaptWindow, how long the
// pool's own threads (its workers, each locked to its OS thread, and the
// caller's current thread) were runnable but waiting for a CPU, as a fraction
// of the time they were runnable at all (Linux schedstat: run delay ÷ (time
// on a CPU + run delay), summed over those threads). Two windows in a row
// whose fraction exceeds adaptWait mean the CPUs are oversubscribed: the pool
// then wakes one worker fewer for its calls (never fewer than the caller).
// After adaptProbe quiet windows it tries one more again, up to its size. The
// chunks stay those of the full pool, so results do not depend on it. Where
// the times cannot be read (not Linux, or a kernel without schedstat), the
// pool keeps all its threads.
//
// Only the pool's threads count. The process's other threads (the Go
// runtime's sysmon and idle Ms, a server's goroutines' threads, the
// benchmark's timers) wake briefly and wait for a CPU exactly because the
// pool's threads use every one: an earlier signal summed the run delay of
// every thread of the process against the window's length, and on a free
// 2-core VM it woke 1.0–1.5 of 2 threads on average in dense decode (issue
// 28). Dividing by the pool's runnable time, not the window, makes a parked
// worker count for nothing instead of for quiet.
//
// With all CPUs free the pool's threads still wait now and then (the
// kernel's and the Go runtime's threads preempt them), and schedstat credits
// a run delay only when the thread gets its CPU back, in lumps of a scheduler
// slice (2–7 ms): on a free 2-vCPU VM (SmolLM2-135M shape, F16, 2 threads)
// 10 ms windows read 0.2–0.57 of waiting in bursts, two in a row often
// enough that the pool spent most of a run on one thread (issue 28), while
// over 100 ms the same run never read above 0.10 (0.04 on average). With
// one core of two busy (sinf bench --busy 1) 100 ms windows read 0.25–0.55.
// So a window is adaptWindow = 100 ms, adaptWait lies between, and the pool
// reacts in two windows (200 ms). A probe that fails (the pool drops back
// within adaptProbe windows of it) doubles the quiet windows before the next
// one, up to maxProbe, so a busy core costs the pool 200 ms at the wrong
// count every 8 s at most; a probe that holds resets it. One schedstat read
// per pool thread per window costs 35 µs for a 2-thread pool on a loaded
// 2-core VM (0.035% of a window; 0 allocations: BenchmarkRunDelayRead).
const (
	adaptWindow = 100 * time.Millisecond
	adaptWait   = 0.15
	adaptProbe  = 10 // quiet windows before trying one more worker (1 s)
	maxProbe    = 80 // after failed probes, at most this many (8 s)
	// minRunnable: a window whose pool threads were runnable for less than
	// this in all (an idle pool between requests) is no evidence either way.
	minRunnable = adaptWindow / 10
)

// threadTimes is the last schedstat reading of one of the pool's threads:
// its id, time on a CPU and run delay, ns.
type threadTimes struct{ tid, run, wait int64 }

// adapt updates p.active at the end of each adaptWindow; run calls it before
// each call.
func (p *Pool) adapt() {
	if p.testFixed {
		return
	}
	if t := now(); t-p.winStart >= adaptWindow {
		p.adaptAt(t, gettid())
	}
}

// adaptAt ends a window at time t, the caller running on thread caller.
func (p *Pool) adaptAt(t time.Duration, caller int64) {
	if p.readTimes(caller) {
		p.observe(t, p.ran, p.waited)
	}
}

// readTimes adds each pool thread's growth in time on a CPU and in run delay
// since the last reading to p.ran and p.waited. A thread read for the first
// time, or the caller on another thread than last time (a goroutine that
// parked may resume on another), only sets its baseline. It returns false
// when no thread's times could be read.
func (p *Pool) readTimes(caller int64) bool {
	read := false
	for i := range p.last {
		tid := caller
		if i > 0 {
			tid = p.tids[i-1].Load()
		}
		var run, wait int64
		ok := false
		if p.testSched != nil {
			run, wait, ok = p.testSched(tid)
		} else {
			run, wait, ok = p.sched.read(tid)
		}
		l := &p.last[i]
		if !ok {
			l.tid = 0
			continue
		}
		read = true
		if l.tid == tid {
			p.ran += max(run-l.run, 0)
			p.waited += max(wait-l.wait, 0)
		}
		*l = threadTimes{tid, run, wait}
	}
	return read
}

// observe ends a window at time t, when the pool's threads have run ran ns
// and waited waited ns in all (sums over readings).
func (p *Pool) observe(t time.Duration, ran, waited int64) {
	if p.winStart != 0 {
		if p.probeAge > 0 {
			p.probeAge++
		}
		dr, dw := ran-p.winRan, waited-p.winWaited
		runnable := dr + dw
		switch busy := runnable >= int64(minRunnable) && float64(dw) > adaptWait*float64(runnable); {
		case busy && p.quiet < 0:
			// Two windows in a row: one alone is often a page fault or a
			// burst of the kernel's threads.
			p.active = max(1, p.active-1)
			if p.probeAge > 0 { // the probe failed: wait longer for the next
				p.probeAfter = min(2*p.probeAfter, maxProbe)
				p.probeAge = 0
			}
		case busy:
			p.quiet = -1
		default:
			p.quiet = max(p.quiet, 0) + 1
			if p.probeAge > adaptProbe { // the probe held
				p.probeAfter = adaptProbe
				p.probeAge = 0
			}
			if p.quiet >= p.probeAfter && p.active < p.workers {
				p.active++
				p.quiet = 0
				p.probeAge = 1
			}
		}
	}
	p.winStart, p.winRan, p.winWaited = t, ran, waited
}

// parseSchedstat parses a schedstat line, "run_ns wait_ns slices\n": the
// first two fields.
func parseSchedstat(s []byte) (run, wait int64, ok bool) {
	i := 0
	field := func() (int64, bool) {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		var v int64
		got := false
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			v = v*10 + int64(s[i]-'0')
			got = true
		}
		return v, got
	}
	run, ok1 := field()
	wait, ok2 := field()
	return run, wait, ok1 && ok2
}
