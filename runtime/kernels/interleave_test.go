package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/format"
)

// xMat returns m's matrix interleaved (spec §5.4) in guarded memory.
func xMat(t *testing.T, m testMat) Mat {
	t.Helper()
	xd, ok := format.InterleavedOf(m.DType)
	require.True(t, ok)
	data := guarded(t, len(m.Data))
	require.NoError(t, format.Interleave(data, m.Data, m.DType, m.Rows, m.Cols))
	return Mat{DType: xd, Rows: m.Rows, Cols: m.Cols, Data: data}
}

// TestInterleavedProducts checks MatVec, MatVecBatch and MatMul on
// interleaved rows against the float64 dequantize-then-multiply reference
// on every set and pool, with whole groups and a tail of plain rows; each
// token of MatVecBatch equals MatVec's bit for bit, and so does MatMul's
// where the set runs it as MatVecBatch (xdotPrefill); the row-major-only
// products refuse interleaved rows; RowF32 decodes rows exactly; MatMul of
// no tokens does nothing, row-major or interleaved.
func TestInterleavedProducts(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			rng := rand.New(rand.NewPCG(31, 32))
			shapes := [][2]int{{16, 32}, {37, 64}, {29, 64}, {5, 96}, {70, 576}} // tails of 5, 13 (an eight-row group of plain rows), 5 and 6
			if !raceOn {
				shapes = append(shapes, [2]int{48, 2048})
			}
			for _, dt := range []format.DType{format.Q8_0, format.Q4_0} {
				for _, sh := range shapes {
					rows, cols := sh[0], sh[1]
					m := randQMat(t, rng, dt, rows, cols)
					w := xMat(t, m)
					for _, v := range []Mat{m.Mat, w} { // no tokens: nothing to do, on either layout
						require.NotPanics(t, func() { MatMul(p, nil, v, nil, 0) }, "MatMul %v of 0 tokens", v.DType)
					}
					for _, T := range []int{1, 2, 3, 4, 9, 37} { // MatVecBatch: every multi-token kernel
						x := randVec(rng, T*cols)
						dst := make([]float32, T*rows)
						MatMul(p, dst, w, x, T)
						vec := make([]float32, T*rows)
						MatVecBatch(p, vec, w, x, T)
						if ks.xdotPrefill(w) {
							require.Equal(t, vec, dst, "MatMul %v [%d,%d] T=%d as MatVecBatch", w.DType, rows, cols, T)
						}
						for u := range T {
							xu := x[u*cols : (u+1)*cols]
							one := make([]float32, rows)
							MatVec(p, one, w, xu)
							require.Equal(t, one, vec[u*rows:(u+1)*rows], "MatVecBatch %v [%d,%d] token %d", w.DType, rows, cols, u)
							for r := range rows {
								want, scale := m.refDot(r, xu)
								tol := m.qxBound(r, xu) + 1e-5*scale
								checkClose(t, one[r], want, 1, tol, "MatVec %v [%d,%d] row %d", w.DType, rows, cols, r)
								checkClose(t, dst[u*rows+r], want, 1, tol, "MatMul %v [%d,%d] T=%d t=%d r=%d", w.DType, rows, cols, T, u, r)
							}
						}
					}
					row := make([]float32, cols)
					for _, r := range []int{0, rows / 2, rows - 1} {
						w.RowF32(row, r)
						for c, v := range row {
							require.Equal(t, float32(m.vals[r*cols+c]), v, "RowF32 %v [%d,%d] row %d col %d", w.DType, rows, cols, r, c)
						}
					}
					// MatVecRows (a sliced layer's gathered gate rows): MatVec's
					// value for each row, in any order, repeats and tail rows
					// included.
					x := randVec(rng, cols)
					all := make([]float32, rows)
					MatVec(p, all, w, x)
					var third, down, mixed []int32
					for r := range rows {
						if r%3 == 1 {
							third = append(third, int32(r))
						}
						down = append(down, int32(rows-1-r))
					}
					for range 2 * rows {
						mixed = append(mixed, int32(rng.IntN(rows)))
					}
					for _, sel := range [][]int32{third, down, mixed, {int32(rows - 1)}} {
						got := make([]float32, len(sel))
						MatVecRows(p, got, w, sel, x)
						for k, r := range sel {
							require.Equal(t, all[r], got[k], "MatVecRows %v [%d,%d] rows[%d] = %d", w.DType, rows, cols, k, r)
						}
					}
					for _, r := range []int32{int32(rows), -1} {
						require.PanicsWithValue(t, fmt.Sprintf("kernels: row %d out of range [0, %d)", r, rows), func() {
							MatVecRows(p, make([]float32, 1), w, []int32{r}, x)
						}, "MatVecRows %v [%d,%d] row %d", w.DType, rows, cols, r)
					}
					refused := func(op string) string {
						return fmt.Sprintf("kernels: %s takes row-major rows, not %v (spec §5.4: a sliced layer's up_proj and down_proj.weight_t are not interleaved)", op, w.DType)
					}
					require.PanicsWithValue(t, refused("AddRows"), func() { AddRows(p, make([]float32, cols), w, nil, make([]float32, rows)) })
				}
			}
		})
	})
}

// TestInterleavedBatchExtremes: at the extreme levels (every Q4_0 nibble 15,
// every Q8_0 value −128, every x at the largest int8 level) each token of
// MatVecBatch still equals MatVec bit for bit and the exact sum: the AVX2
// Q4_0 kernels (one token and several) add a block's VPMADDUBSW pair sums
// in int16 lanes (here 8·2·15·127 = 30480 of 32767).
func TestInterleavedBatchExtremes(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			const rows, cols, T = 16, 256, 4
			for _, dt := range []format.DType{format.Q8_0, format.Q4_0} {
				bb, level, fill := 34, -128.0, byte(0x80)
				if dt == format.Q4_0 {
					bb, level, fill = 18, 7, 0xff
				}
				data := make([]byte, rows*cols/32*bb)
				for b := 0; b < len(data); b += bb {
					data[b+1] = 0x3c // d = 1.0 (F16 0x3c00)
					for i := 2; i < bb; i++ {
						data[b+i] = fill
					}
				}
				w := xMat(t, testMat{Mat: Mat{DType: dt, Rows: rows, Cols: cols, Data: data}})
				x := make([]float32, T*cols)
				for i := range x {
					x[i] = 1 - 2*float32(i/cols%2) // tokens of +1s and −1s: x at ±127·d_x
				}
				got := make([]float32, T*rows)
				MatVecBatch(p, got, w, x, T)
				one := make([]float32, rows)
				for u := range T {
					MatVec(p, one, w, x[u*cols:(u+1)*cols])
					require.Equal(t, one, got[u*rows:(u+1)*rows], "MatVecBatch %v token %d", w.DType, u)
					want := float32(level * float64(cols) * float64(x[u*cols]))
					for r := range rows {
						checkClose(t, one[r], float64(want), 1, 1e-3*math.Abs(float64(want)), "MatVec %v token %d row %d", w.DType, u, r)
					}
				}
			}
		})
	})
}
