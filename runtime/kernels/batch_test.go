package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBatchEqualsSingle: MatVecBatch's row t equals MatVec of x[t], and
// AddRowsBatch's equals AddRows of a[t], bit for bit, on every kernel set,
// pool size and weight dtype, for shapes whose chunks span several cache
// blocks (batchBlockBytes): short rows (one dotRows stream) and long ones
// (dot4 groups, a tail of rows), a column tail, coefficients that are zero
// (AddRows skips them), and the column and term splits of AddRows.
func TestBatchEqualsSingle(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			for _, dt := range append(weightDTypes, quantDTypes...) {
				// Short rows with column tails after the SIMD blocks (dotRows'
				// two-vector step and the portable tail), long rows (dot4),
				// and for Q8_0/Q4_0 an odd count of blocks (the multi-token
				// kernels' last block alone).
				multi := ks.dotRowsB[0][0] != nil || ks.qdotRowsB[0][0] != nil || ks.qaxpy4B[0] != nil
				shapes := [][2]int{{701, 200}, {203, 1100}}
				if dt.Quantized() {
					shapes = [][2]int{{701, 256}, {203, 1536}}
				}
				if multi && !dt.KQuant() { // only the multi-token kernels take these paths apart
					shapes = append(shapes, [2]int{301, 229}, [2]int{57, 243})
					if dt.Quantized() {
						shapes = [][2]int{{701, 256}, {203, 1536}, {97, 800}}
					}
				}
				for _, sh := range shapes {
					R, C := sh[0], sh[1]
					var m testMat
					if dt.Quantized() {
						m = randQMat(t, rng, dt, R, C)
					} else {
						m = randMat(rng, dt, R, C, 0)
					}
					// B = 1 is MatVec and AddRows themselves; 4 and 6 take
					// the multi-token kernels' groups of four and two.
					Bs := []int{3}
					if multi {
						Bs = append(Bs, 4, 6)
					}
					for _, B := range Bs {
						x := randVec(rng, B*C)
						got := make([]float32, B*R)
						MatVecBatch(p, got, m.Mat, x, B)
						want := make([]float32, R)
						for tok := range B {
							MatVec(p, want, m.Mat, x[tok*C:(tok+1)*C])
							equalBits(t, got[tok*R:(tok+1)*R], want, "MatVecBatch %v [%d,%d] B=%d token %d", dt, R, C, B, tok)
						}
						// AddRows over n terms: few (a column split) and many
						// (a term split when the pool has workers), with a
						// third of them zero and with none (the multi-token
						// qaxpy4B's case).
						ns := []int{20, R}
						if multi {
							ns = append(ns, -22, -R)
						}
						for _, n := range ns {
							zeros := n > 0
							n = max(n, -n)
							a := randVec(rng, B*n)
							for i := range a {
								if zeros && rng.IntN(3) == 0 {
									a[i] = 0
								}
							}
							base := randVec(rng, C)
							got := make([]float32, B*C)
							for tok := range B {
								copy(got[tok*C:], base)
							}
							AddRowsBatch(p, got, m.Mat, a, B)
							for tok := range B {
								want := append([]float32(nil), base...)
								AddRows(p, want, m.Mat, nil, a[tok*n:(tok+1)*n])
								equalBits(t, got[tok*C:(tok+1)*C], want, "AddRowsBatch %v [%d,%d] %d terms B=%d token %d", dt, R, C, n, B, tok)
							}
						}
					}
				}
			}
		})
	})
}

func equalBits(t *testing.T, got, want []float32, format string, args ...any) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf(format+": [%d] = %v, single-token kernel %v", append(args, i, got[i], want[i])...)
		}
	}
}

// TestSwiGLUBatch: SwiGLUBatch's rows equal SwiGLU of each row bit for bit,
// for rows whose single calls split into whole 16-blocks (1536), into chunks
// too short for them (32 on several workers: the portable form), and rows
// that are not whole blocks (200).
func TestSwiGLUBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			for _, n := range []int{1536, 32, 200} {
				for _, B := range []int{3, 4} {
					g0, u := randVec(rng, B*n), randVec(rng, B*n)
					for i := range g0 {
						g0[i] *= 8 // beyond exp's small-argument range
					}
					got := append([]float32(nil), g0...)
					SwiGLUBatch(p, got, u, B)
					for tok := range B {
						want := append([]float32(nil), g0[tok*n:(tok+1)*n]...)
						SwiGLU(p, want, u[tok*n:(tok+1)*n])
						equalBits(t, got[tok*n:(tok+1)*n], want, "SwiGLUBatch n=%d B=%d token %d", n, B, tok)
					}
				}
			}
		})
	})
}
