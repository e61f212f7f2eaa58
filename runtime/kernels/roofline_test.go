package kernels

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestRoofline prints the decode kernels' rates next to a plain read of the
// same number of bytes, each the best of many single calls on weights that are
// not in cache (the copies of bench_test.go). Best-of-many keeps the ratios
// meaningful on a machine shared with other work, where the averages of
// `go test -bench` are not. Opt-in:
//
//	SINF_ROOFLINE=1 go test -run TestRoofline -v ./runtime/kernels/
func TestRoofline(t *testing.T) {
	if os.Getenv("SINF_ROOFLINE") == "" {
		t.Skip("set SINF_ROOFLINE=1 to measure")
	}
	const trials = 150
	best := func(bytes int, f func()) float64 {
		b := time.Hour
		for range trials {
			s := time.Now()
			f()
			b = min(b, time.Since(s))
		}
		return float64(bytes) / b.Seconds() / 1e9
	}
	buf := make([]byte, 512<<20)
	for i := 0; i < len(buf); i += readUnit {
		buf[i] = 1
	}
	t.Logf("kernel set %s; GB/s of weights read, (%% of the plain read)", ISA())
	t.Logf("%-3s %-15s %-5s %6s | %-14s %-14s %-14s %-14s", "thr", "shape", "dtype", "read", "MatVec", "MatVecRows/2", "AddRows", "AddRows/2")
	for _, th := range benchThreads {
		p := NewPool(th)
		for _, sh := range []benchShape{smolFFN, smolDown, llamaFFN, llamaDown} {
			for _, d := range append(weightDTypes, quantDTypes...) {
				if d.Quantized() && sh.cols%blockElems(d) != 0 {
					continue // rows of 576 are no K-quant super-blocks
				}
				ws := benchMats(sh, d)
				w := ws.mats[0]
				chunk := w.Bytes() / readUnit * readUnit
				off := 0
				rd := best(chunk, func() {
					off = (off + chunk) % (len(buf) - chunk)
					readPass(p, buf[off:off+chunk])
				})
				x, dst := benchVec(w.Cols), make([]float32, w.Rows)
				rows := benchRows(w.Rows)
				a, y := benchVec(w.Rows), make([]float32, w.Cols)
				half := len(rows) * w.RowBytes()
				col := func(v float64) string { return fmt.Sprintf("%5.1f (%3.0f%%)", v, 100*v/rd) }
				t.Logf("t%-2d %-15s %-5v %6.1f | %-14s %-14s %-14s %-14s", th, sh.name, d, rd,
					col(best(w.Bytes(), func() { MatVec(p, dst, ws.next(), x) })),
					col(best(half, func() { MatVecRows(p, dst, ws.next(), rows, x) })),
					col(best(w.Bytes(), func() { AddRows(p, y, ws.next(), nil, a) })),
					col(best(half, func() { AddRows(p, y, ws.next(), rows, a[:len(rows)]) })))
			}
		}
		p.Close()
	}
}
