package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/format"
)

// TestSketchMatVec checks SketchMatVec against a float64 product of the
// sketch dequantized by format (spec §5.2's element d·(2q − 3)) and x as
// quantizeX rounds it (d_x·q_x), on pools of 1 to 3 threads on every kernel
// set this CPU runs, at a SmolLM2-135M-like width (576) and an odd row
// count: each dot within 1e-5 of Σ|d·(2q−3)·x| (integer block sums, float32
// across blocks).
func TestSketchMatVec(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 37, 576
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.05)
	}
	data, err := format.Quantize(nil, w, format.SK2)
	require.NoError(t, err)
	s, err := NewSketch(format.Tensor{Name: "s", DType: format.SK2, Shape: []int{rows, cols}, Data: data})
	require.NoError(t, err)
	deq := make([]float32, rows*cols)
	require.NoError(t, format.Dequantize(deq, data, format.SK2))
	x := make([]float32, cols)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	xq, xd := make([]int8, 2*cols), make([]float32, 2*cols/32)
	quantizeX(xq, xd, x)
	xr := make([]float64, cols) // x as the kernels see it
	for c := range xr {
		xr[c] = float64(xd[c/32]) * float64(xq[64*(c/32)+c%32])
	}
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		for n := 1; n <= 3; n++ {
			p := NewPool(n)
			got := make([]float32, rows)
			SketchMatVec(p, got, s, x)
			p.Close()
			for j := range rows {
				var want, mag float64
				for c := range cols {
					v := float64(deq[j*cols+c]) * xr[c]
					want += v
					mag += math.Abs(v)
				}
				require.InDelta(t, want, float64(got[j]), 1e-5*mag, "pool %d row %d", n, j)
			}
		}
	})
	_, err = NewSketch(format.Tensor{Name: "s", DType: format.Q4_0, Shape: []int{rows, cols}, Data: data})
	require.ErrorContains(t, err, "want a 2-D SK2 tensor")
	_, err = NewSketch(format.Tensor{Name: "s", DType: format.SK2, Shape: []int{rows, cols}, Data: data[:10]})
	require.ErrorContains(t, err, "do not hold")
}

// BenchmarkSketchMatVec: one SmolLM2-135M γ=0.7 layer's sketch (1075 rows of
// 576), one thread; bytes/s of sketch read.
func BenchmarkSketchMatVec(b *testing.B) {
	const rows, cols = 1075, 576
	w := make([]float32, rows*cols)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	data, _ := format.Quantize(nil, w, format.SK2)
	s := Sketch{Rows: rows, Cols: cols, Data: data}
	x := make([]float32, cols)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	dst := make([]float32, rows)
	p := NewPool(1)
	defer p.Close()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		SketchMatVec(p, dst, s, x)
	}
}
