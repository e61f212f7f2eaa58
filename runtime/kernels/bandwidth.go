package kernels

import (
	"sync/atomic"
	"time"
)

// readUnit is the granule, in bytes, in which a read pass is split across
// workers (a page; a multiple of every readSum block).
const readUnit = 4096

// readSink keeps the read passes' checksums observable.
var readSink atomic.Uint64

// MeasureReadBandwidth returns the memory read bandwidth, in bytes/s, of each
// of passes passes of all of p's workers reading a buffer of the given size
// (rounded up to 4 KiB; use one well above the last-level cache, e.g. 256
// MiB, to measure DRAM), after one warm-up pass. It is the roofline that
// decode kernels are compared with; callers take the median, or the best.
func MeasureReadBandwidth(p *Pool, bytes, passes int) []float64 {
	units := max(1, (bytes+readUnit-1)/readUnit)
	buf := make([]byte, units*readUnit)
	// Write every page so the passes read real memory, not the shared zero page.
	for i := 0; i < len(buf); i += readUnit {
		buf[i] = byte(i / readUnit)
	}
	w := Mat{Data: buf}
	rates := make([]float64, 0, passes)
	for i := range passes + 1 { // the first pass warms up
		start := time.Now()
		p.run(job{op: opRead, ks: active, w: w}, units)
		if sec := time.Since(start).Seconds(); i > 0 && sec > 0 {
			rates = append(rates, float64(len(buf))/sec)
		}
	}
	return rates
}

// readPass reads buf (a multiple of readUnit bytes) once on p's workers.
func readPass(p *Pool, buf []byte) {
	p.run(job{op: opRead, ks: active, w: Mat{Data: buf}}, len(buf)/readUnit)
}
