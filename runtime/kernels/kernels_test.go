package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/format"
)

var weightDTypes = []format.DType{format.F32, format.F16, format.BF16}

// tolFor is the allowed error relative to Σ|w·x| (see checkClose).
func tolFor(d format.DType) float64 {
	if d == format.F32 {
		return 1e-5
	}
	return 1e-3
}

// testMat is a random weight matrix and its decoded values.
type testMat struct {
	Mat
	vals []float64 // decoded weights, [Rows, Cols]
}

// randMat makes a [rows, cols] matrix of dtype d whose data starts off
// elements past a 64-byte boundary (so vector loads see every alignment).
func randMat(rng *rand.Rand, d format.DType, rows, cols, off int) testMat {
	es := d.Size()
	n := rows * cols
	raw := make([]byte, (n+off)*es+64)
	start := (64 - int(uintptr(unsafe.Pointer(&raw[0]))%64)) % 64
	b := raw[start+off*es : start+(off+n)*es]
	vals := make([]float64, n)
	for i := range vals {
		f := float32(rng.NormFloat64())
		switch d {
		case format.F32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
			vals[i] = float64(f)
		case format.F16:
			h := format.F32ToF16(f)
			binary.LittleEndian.PutUint16(b[2*i:], h)
			vals[i] = float64(format.F16ToF32(h))
		case format.BF16:
			h := format.F32ToBF16(f)
			binary.LittleEndian.PutUint16(b[2*i:], h)
			vals[i] = float64(format.BF16ToF32(h))
		}
	}
	return testMat{Mat{DType: d, Rows: rows, Cols: cols, Data: b}, vals}
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// refDot returns Σ w·x and Σ|w·x| in float64 over row r of m.
func (m testMat) refDot(r int, x []float32) (sum, abs float64) {
	for c := 0; c < m.Cols; c++ {
		p := m.vals[r*m.Cols+c] * float64(x[c])
		sum += p
		abs += math.Abs(p)
	}
	return
}

// checkClose reports whether got is within tol·scale of want.
func checkClose(t *testing.T, got float32, want, scale, tol float64, what string, args ...any) {
	t.Helper()
	if !(math.Abs(float64(got)-want) <= tol*scale+1e-30) { // NaN fails too
		t.Fatalf("%s: got %v, want %v (scale %v, tol %v)", fmt.Sprintf(what, args...), got, want, scale, tol)
	}
}

// forEachSet runs f with each kernel set the CPU supports made active.
func forEachSet(t *testing.T, f func(t *testing.T, ks *kernelSet)) {
	for _, ks := range kernelSets() {
		t.Run(ks.name, func(t *testing.T) {
			defer useKernelSet(ks)()
			f(t, ks)
		})
	}
}

var (
	testCols = []int{1, 3, 7, 16, 17, 33, 64, 100, 257, 1000}
	testRows = []int{1, 3, 5, 7, 17, 33}
)

func TestSetsDetected(t *testing.T) {
	sets := kernelSets()
	require.Equal(t, "generic", sets[len(sets)-1].name)
	ks, err := chooseSet(os.Getenv("SINF_KERNELS"))
	require.Equal(t, ks.name, ISA())
	require.Equal(t, err, EnvError())
	for _, ks := range sets {
		t.Logf("kernel set %s (blk %d, gemm %dx%d/%d, gemmT %dx%d)", ks.name, ks.blk, ks.gr, ks.gt, ks.gblk, ks.tt, ks.tc)
		require.LessOrEqual(t, ks.gr*ks.gt, 32)
		require.Zero(t, ks.blk&(ks.blk-1))
		require.Zero(t, ks.gblk&(ks.gblk-1))
	}
}

// TestRawKernels calls each set's raw kernels directly on whole blocks and
// compares them with float64 references and with the generic set.
func TestRawKernels(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, dt := range weightDTypes {
			d, es, tol := dtIndex(dt), dt.Size(), tolFor(dt)
			for _, mult := range []int{1, 2, 3, 5, 16, 63} {
				n := mult * ks.blk
				for off := 0; off < 4; off++ {
					m := randMat(rng, dt, 4, n, off)
					x := randVec(rng, n)
					p := [4]unsafe.Pointer{}
					for r := range p {
						p[r] = unsafe.Pointer(&m.Data[r*n*es])
					}
					s := [4]float32{}
					s[0], s[1], s[2], s[3] = ks.dot4[d](p[0], p[1], p[2], p[3], p[0], p[1], p[2], p[3], &x[0], n)
					for r := range p {
						want, scale := m.refDot(r, x)
						checkClose(t, s[r], want, scale, tol, "dot4 %v n=%d off=%d row %d", dt, n, off, r)
						checkClose(t, ks.dot1[d](p[r], &x[0], n), want, scale, tol, "dot1 %v n=%d off=%d row %d", dt, n, off, r)
					}
					// axpy4 and axpy1 on a random dst.
					dst0 := randVec(rng, n)
					a := randVec(rng, 4)
					dst := append([]float32(nil), dst0...)
					ks.axpy4[d](&dst[0], p[0], p[1], p[2], p[3], p[0], p[1], p[2], p[3], a[0], a[1], a[2], a[3], n)
					dst1 := append([]float32(nil), dst0...)
					ks.axpy1[d](&dst1[0], p[2], a[2], n)
					for c := 0; c < n; c++ {
						want, scale := float64(dst0[c]), math.Abs(float64(dst0[c]))
						for r := range 4 {
							v := float64(a[r]) * m.vals[r*n+c]
							want += v
							scale += math.Abs(v)
						}
						checkClose(t, dst[c], want, scale, tol, "axpy4 %v n=%d col %d", dt, n, c)
						v := float64(a[2]) * m.vals[2*n+c]
						checkClose(t, dst1[c], float64(dst0[c])+v, math.Abs(float64(dst0[c]))+math.Abs(v), tol, "axpy1 %v n=%d col %d", dt, n, c)
					}
					// cvt is exact.
					out := make([]float32, n)
					ks.cvt[d](&out[0], p[1], n)
					for c := range out {
						require.Equal(t, float32(m.vals[n+c]), out[c], "cvt %v n=%d col %d", dt, n, c)
					}
				}
			}
			// dotRows and axpyRows: m rows at a stride longer than a row,
			// contiguous or gathered (out of order, repeated), with and
			// without prefetching, some coefficients zero. Up to 8 vectors
			// a row (mult ≤ 4), contiguous rows take the short paths
			// (attention's HeadDim rows), whose sums must be the one-row
			// loop's bit for bit: the gathered rows 0..m−1 take that loop.
			for _, mult := range []int{1, 2, 3, 4, 17} {
				n := mult * ks.blk
				const m, nrows = 9, 12
				mat := randMat(rng, dt, nrows, n+5, 1)
				base, stride := unsafe.Pointer(&mat.Data[0]), (n+5)*es
				x := randVec(rng, n)
				a := randVec(rng, m)
				a[2], a[7] = 0, 0
				for _, gathered := range []bool{false, true} {
					rowOf := func(j int) int { return j }
					var idx *int32
					if gathered {
						sel := []int32{11, 0, 5, 5, 3, 10, 1, 7, 2}
						rowOf = func(j int) int { return int(sel[j]) }
						idx = &sel[0]
					}
					for _, pf := range []int{0, 512} {
						got := make([]float32, m+1)
						got[m] = 42
						ks.dotRows[d](base, stride, idx, &x[0], n, m, &got[0], pf)
						require.Equal(t, float32(42), got[m], "dotRows wrote past m")
						dst0 := randVec(rng, n+1)
						dst := append([]float32(nil), dst0...)
						ks.axpyRows[d](&dst[0], base, stride, idx, &a[0], n, m, pf)
						require.Equal(t, dst0[n], dst[n], "axpyRows wrote past n")
						for j := 0; j < m; j++ {
							var want, scale float64
							for c := 0; c < n; c++ {
								v := mat.vals[rowOf(j)*(n+5)+c] * float64(x[c])
								want += v
								scale += math.Abs(v)
							}
							checkClose(t, got[j], want, scale, tol, "dotRows %v n=%d gathered=%v pf=%d row %d", dt, n, gathered, pf, j)
						}
						if !gathered {
							ident := make([]int32, m)
							for j := range ident {
								ident[j] = int32(j)
							}
							one := make([]float32, m)
							ks.dotRows[d](base, stride, &ident[0], &x[0], n, m, &one[0], pf)
							require.Equal(t, one, got[:m], "dotRows %v n=%d: contiguous rows against the one-row loop", dt, n)
							dst1 := append([]float32(nil), dst0...)
							ks.axpyRows[d](&dst1[0], base, stride, &ident[0], &a[0], n, m, pf)
							require.Equal(t, dst1, dst, "axpyRows %v n=%d: contiguous rows against the one-row loop", dt, n)
						}
						for c := 0; c < n; c++ {
							want, scale := float64(dst0[c]), math.Abs(float64(dst0[c]))
							for j := 0; j < m; j++ {
								v := float64(a[j]) * mat.vals[rowOf(j)*(n+5)+c]
								want += v
								scale += math.Abs(v)
							}
							checkClose(t, dst[c], want, scale, tol, "axpyRows %v n=%d gathered=%v pf=%d col %d", dt, n, gathered, pf, c)
						}
					}
				}
			}
			// gemm: gr rows × gt tokens.
			for _, mult := range []int{1, 2, 7, 33} {
				n := mult * ks.gblk
				m := randMat(rng, dt, ks.gr, n+3, 1) // row stride n+3 elements
				x := randVec(rng, ks.gt*(n+5))       // token stride n+5
				ld := ks.gr + 2                      // dst row stride: gt rows of gr values and a gap
				out := randVec(rng, ks.gt*ld)        // gemm adds to it
				out0 := append([]float32(nil), out...)
				for u := 0; u < ks.gt; u++ {
					out[u*ld+ks.gr], out0[u*ld+ks.gr] = 42, 42
				}
				ks.gemm[d](unsafe.Pointer(&m.Data[0]), (n+3)*es, &x[0], 4*(n+5), n, &out[0], 4*ld)
				for u := 0; u < ks.gt; u++ {
					require.Equal(t, float32(42), out[u*ld+ks.gr], "gemm wrote outside its tile")
				}
				for r := 0; r < ks.gr; r++ {
					for u := 0; u < ks.gt; u++ {
						want, scale := float64(out0[u*ld+r]), math.Abs(float64(out0[u*ld+r]))
						for c := 0; c < n; c++ {
							v := m.vals[r*(n+3)+c] * float64(x[u*(n+5)+c])
							want += v
							scale += math.Abs(v)
						}
						checkClose(t, out[u*ld+r], want, scale, tol, "gemm %v n=%d r=%d t=%d", dt, n, r, u)
					}
				}
			}
		}
		// gemmT: tt tokens × tc columns over kc packed float32 rows.
		for _, kc := range []int{1, 2, 5, 64, 129} {
			ld, K, C := ks.tc+3, kc+2, ks.tc+7
			w := randVec(rng, kc*ld)
			a := randVec(rng, ks.tt*K)
			dst0 := randVec(rng, ks.tt*C)
			dst := append([]float32(nil), dst0...)
			ks.gemmT(unsafe.Pointer(&w[0]), 4*ld, &a[0], 4*K, &dst[0], 4*C, kc)
			for u := 0; u < ks.tt; u++ {
				for c := 0; c < C; c++ {
					if c >= ks.tc {
						require.Equal(t, dst0[u*C+c], dst[u*C+c], "gemmT wrote outside its tile")
						continue
					}
					want, scale := float64(dst0[u*C+c]), math.Abs(float64(dst0[u*C+c]))
					for k := 0; k < kc; k++ {
						v := float64(a[u*K+k]) * float64(w[k*ld+c])
						want += v
						scale += math.Abs(v)
					}
					checkClose(t, dst[u*C+c], want, scale, 1e-5, "gemmT kc=%d t=%d c=%d", kc, u, c)
				}
			}
		}
		// swiglu over a wide range of gate values, the exp clamp included.
		{
			n := 16 * 40
			g, u := make([]float32, n), make([]float32, n)
			for i := range g {
				g[i] = float32(rng.Float64()*240 - 120)
				if i < n/2 {
					g[i] /= 20
				}
				u[i] = float32(rng.NormFloat64())
			}
			g[0], g[1], g[2], g[3] = 0, 88.5, -88.5, -87
			want := make([]float64, n)
			for i := range g {
				x := float64(g[i])
				want[i] = x / (1 + math.Exp(-x)) * float64(u[i])
			}
			ks.swiglu(&g[0], &u[0], n)
			for i, w := range want {
				checkClose(t, g[i], w, math.Max(1, math.Abs(w)), 1e-6, "swiglu %d", i)
			}
		}
		// expSum: softmax numerators over scores down to 100 below the maximum.
		{
			n := 16 * 9
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(-rng.Float64() * 100)
			}
			x[5] = 0
			want := make([]float64, n)
			var wantSum float64
			for i, v := range x {
				want[i] = math.Exp(float64(v - 0.5)) // the difference in float32, as the kernels
				wantSum += want[i]
			}
			sum := ks.expSum(&x[0], n, 0.5)
			for i, w := range want {
				checkClose(t, x[i], w, w, 1e-6, "expSum x[%d]", i)
			}
			checkClose(t, sum, wantSum, wantSum, 1e-6, "expSum sum")
			// −Inf (attendHead's padding) gives exactly 0 and adds nothing
			y := append([]float32(nil), x[:16]...)
			for i := 9; i < 16; i++ {
				y[i] = float32(math.Inf(-1))
			}
			x9 := append([]float32(nil), y[:9]...)
			sum = ks.expSum(&y[0], 16, 0.5)
			require.Equal(t, make([]float32, 7), y[9:], "expSum(−Inf)")
			var s9 float64
			for _, v := range x9 {
				s9 += math.Exp(float64(v - 0.5))
			}
			checkClose(t, sum, s9, s9, 1e-6, "expSum sum with −Inf")
		}
		// toF16 is format.F32ToF16 bit for bit: normal, subnormal and
		// out-of-range values, halfway cases, ±0, ±Inf; NaN stays NaN.
		{
			vals := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65520, 65519.99, 1e6, -1e6,
				float32(math.Inf(1)), float32(math.Inf(-1)), 6e-8, 3e-8, 2.9802322e-08, 5.9604645e-08, 1e-5, -1e-5,
				1.00048828125, 1.00146484375, 2049, 2051, 0.1, -0.3}
			for len(vals)%8 != 0 || len(vals) < 800 {
				e := rng.IntN(40) - 28
				vals = append(vals, float32(rng.NormFloat64()*math.Ldexp(1, e)))
			}
			got := make([]uint16, len(vals))
			ks.toF16(&got[0], &vals[0], len(vals))
			for i, v := range vals {
				require.Equal(t, format.F32ToF16(v), got[i], "toF16(%g)", v)
			}
			nan := []float32{float32(math.NaN()), 0, 0, 0, 0, 0, 0, 0}
			ks.toF16(&got[0], &nan[0], 8)
			require.True(t, math.IsNaN(float64(format.F16ToF32(got[0]))), "toF16(NaN) = %#x", got[0])
		}
		// NaN stays NaN through exp; dotRows over n = 0 sets zeros.
		{
			x := make([]float32, 16)
			x[3] = float32(math.NaN())
			sum := ks.expSum(&x[0], 16, 0)
			require.True(t, math.IsNaN(float64(x[3])) && math.IsNaN(float64(sum)), "expSum(NaN) = %v, sum %v", x[3], sum)
			dst := []float32{42, 42, 42, 42, 42}
			w := make([]float32, 5)
			ks.dotRows[0](unsafe.Pointer(&w[0]), 4, nil, &x[0], 0, 5, &dst[0], 0)
			require.Equal(t, []float32{0, 0, 0, 0, 0}, dst, "dotRows over n = 0")
		}
		// readSum over 128-byte multiples.
		buf := make([]uint64, 16*33)
		var want uint64
		for i := range buf {
			buf[i] = rng.Uint64()
			want += buf[i]
		}
		require.Equal(t, want, ks.readSum(unsafe.Pointer(&buf[0]), 8*len(buf)))
	})
}

func withPools(t *testing.T, f func(t *testing.T, p *Pool)) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("pool%d", n), func(t *testing.T) {
			p := NewPool(n)
			defer p.Close()
			require.Equal(t, n, p.Threads())
			f(t, p)
		})
	}
}

func TestMatVec(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			rng := rand.New(rand.NewPCG(3, 4))
			for _, dt := range weightDTypes {
				for _, rows := range append(testRows, 70) {
					for _, cols := range testCols {
						m := randMat(rng, dt, rows, cols, rng.IntN(4))
						x := randVec(rng, cols)
						dst := make([]float32, rows)
						MatVec(p, dst, m.Mat, x)
						gen := make([]float32, rows)
						func() {
							defer useKernelSet(genericSet)()
							MatVec(p, gen, m.Mat, x)
						}()
						for r := range dst {
							want, scale := m.refDot(r, x)
							checkClose(t, dst[r], want, scale, tolFor(dt), "MatVec %v [%d,%d] row %d", dt, rows, cols, r)
							checkClose(t, dst[r], float64(gen[r]), scale, 2*tolFor(dt), "MatVec vs generic %v [%d,%d] row %d", dt, rows, cols, r)
						}
					}
				}
			}
		})
	})
}

// TestMatVecs checks MatVecs against one MatVec per matrix, bit for bit (and
// MatVecsBatch against one MatVecBatch per matrix):
// runs of one dtype fused (float, block-quantized, K-quant, interleaved with
// whole and partial groups of sixteen rows), a dtype change that splits the
// run, and rows too few for every thread.
func TestMatVecs(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			rng := rand.New(rand.NewPCG(41, 42))
			cols := 512
			mat := func(d format.DType, rows int) Mat {
				if d.Interleaved() {
					return xMat(t, randQMat(t, rng, d.Base(), rows, cols))
				}
				if d.Quantized() {
					return randQMat(t, rng, d, rows, cols).Mat
				}
				return randMat(rng, d, rows, cols, 0).Mat
			}
			xq4, _ := format.InterleavedOf(format.Q4_0)
			for _, ds := range [][]format.DType{
				{format.F16, format.F16, format.F16},
				{format.Q8_0, format.Q8_0, format.Q8_0},
				{format.Q4_K, format.Q4_K, format.Q6_K},
				{format.Q6_K, format.Q6_K},
				{xq4, xq4, xq4},
				{format.F32, format.Q4_0, format.Q4_0},
			} {
				for _, rows := range [][]int{{64, 16, 16}, {40, 24, 8}, {3, 5, 2}} {
					w := make([]Mat, len(ds))
					got, want := make([][]float32, len(ds)), make([][]float32, len(ds))
					for i, d := range ds {
						w[i] = mat(d, rows[i])
						got[i], want[i] = make([]float32, rows[i]), make([]float32, rows[i])
					}
					x := randVec(rng, cols)
					MatVecs(p, got, w, x)
					for i := range w {
						MatVec(p, want[i], w[i], x)
						require.Equal(t, want[i], got[i], "MatVecs %v rows %v: matrix %d", ds, rows, i)
					}
					// MatVecsBatch against MatVecBatch per matrix
					for _, B := range []int{2, 4, 5} {
						xb := randVec(rng, B*cols)
						for i := range w {
							got[i], want[i] = make([]float32, B*rows[i]), make([]float32, B*rows[i])
							MatVecBatch(p, want[i], w[i], xb, B)
						}
						MatVecsBatch(p, got, w, xb, B)
						for i := range w {
							require.Equal(t, want[i], got[i], "MatVecsBatch %v rows %v B %d: matrix %d", ds, rows, B, i)
						}
					}
				}
			}
		})
	})
}

func TestMatVecRows(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			rng := rand.New(rand.NewPCG(5, 6))
			for _, dt := range weightDTypes {
				for _, cols := range testCols {
					rows := 40
					m := randMat(rng, dt, rows, cols, rng.IntN(4))
					x := randVec(rng, cols)
					for _, k := range []int{0, 1, 3, 4, 9, 31, 40} {
						sel := make([]int32, k)
						for i := range sel {
							sel[i] = int32(rng.IntN(rows)) // unsorted, repeats allowed
						}
						dst := make([]float32, k)
						MatVecRows(p, dst, m.Mat, sel, x)
						for j, r := range sel {
							want, scale := m.refDot(int(r), x)
							checkClose(t, dst[j], want, scale, tolFor(dt), "MatVecRows %v cols %d j %d", dt, cols, j)
						}
					}
				}
			}
		})
	})
}

func TestAddRows(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			rng := rand.New(rand.NewPCG(7, 8))
			for _, dt := range weightDTypes {
				for _, cols := range testCols {
					rows := 150
					m := randMat(rng, dt, rows, cols, rng.IntN(4))
					for _, gathered := range []bool{false, true} {
						for _, k := range []int{0, 1, 3, 4, 7, 13, 37, 150} {
							var sel []int32
							if gathered {
								sel = make([]int32, k)
								for i := range sel {
									sel[i] = int32(rng.IntN(rows))
								}
							}
							a := randVec(rng, k)
							for i := range a {
								if rng.IntN(4) == 0 {
									a[i] = 0 // skipped terms
								}
							}
							checkAddRows(t, rng, p, m, sel, a, tolFor(dt), nil)
						}
					}
				}
			}
		})
	})
}

func TestMatMul(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			rng := rand.New(rand.NewPCG(9, 10))
			shapes := [][2]int{{1, 1}, {3, 7}, {7, 17}, {13, 33}, {17, 100}, {50, 257}, {70, 1000}}
			if ks != genericSet && !raceOn {
				shapes = append(shapes, [2]int{40, 2048}) // several row blocks
			}
			if raceOn {
				shapes = shapes[:5]
			}
			for _, dt := range weightDTypes {
				for _, sh := range shapes {
					rows, cols := sh[0], sh[1]
					m := randMat(rng, dt, rows, cols, rng.IntN(4))
					// Up to 9 tokens split rows; 65 and 98 split tokens
					// (whole groups, a ragged last one) on 2 and 3 threads.
					for _, T := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 65, 98} {
						if T > 9 && cols > 257 {
							continue
						}
						x := randVec(rng, T*cols)
						dst := make([]float32, T*rows)
						for i := range dst {
							dst[i] = float32(math.NaN()) // MatMul overwrites dst
						}
						MatMul(p, dst, m.Mat, x, T)
						for u := 0; u < T; u++ {
							for r := 0; r < rows; r++ {
								want, scale := m.refDot(r, x[u*cols:(u+1)*cols])
								checkClose(t, dst[u*rows+r], want, scale, tolFor(dt), "MatMul %v [%d,%d] T=%d t=%d r=%d", dt, rows, cols, T, u, r)
							}
						}
					}
				}
			}
		})
	})
}

func TestMatMulRowsT(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			rng := rand.New(rand.NewPCG(11, 12))
			shapes := [][2]int{{1, 1}, {3, 7}, {7, 17}, {33, 16}, {100, 33}, {257, 64}, {130, 300}}
			Ts := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17}
			if raceOn {
				shapes, Ts = shapes[:5], []int{1, 2, 6, 7, 9}
			}
			for _, dt := range weightDTypes {
				for _, sh := range shapes {
					K, C := sh[0], sh[1]
					m := randMat(rng, dt, K, C, rng.IntN(4))
					for _, T := range Ts {
						checkMatMulRowsT(t, rng, p, m, T, tolFor(dt), nil)
					}
				}
			}
		})
	})
}

// TestMatMulRowsTBlocks forces small MatMulRowsT blocks so that several
// row blocks, their tail, and partial panels and token groups are exercised.
func TestMatMulRowsTBlocks(t *testing.T) {
	defer func(k, b int) { gemmKC, gemmPackBytes = k, b }(gemmKC, gemmPackBytes)
	gemmKC, gemmPackBytes = 18, 18*4*40 // 75 rows: blocks of 18 rows (the last of 3) by 40 columns or less
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			rng := rand.New(rand.NewPCG(21, 22))
			for _, dt := range weightDTypes {
				K, C := 75, 133
				m := randMat(rng, dt, K, C, 1)
				for _, T := range []int{2, 6, 7, 9, 16, 25} {
					checkMatMulRowsT(t, rng, p, m, T, tolFor(dt), nil)
				}
			}
		})
	})
}

// TestCvtPanels checks each set's panel decoder exactly: run i of tc values
// lands at panel i (pstride apart), and nothing between or after the panels
// is written.
func TestCvtPanels(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, dt := range weightDTypes {
			d := dtIndex(dt)
			for np := 0; np < 7; np++ {
				n := np * ks.tc
				m := randMat(rng, dt, 1, max(n, 1), rng.IntN(4))
				pst := ks.tc + rng.IntN(40)
				dst := make([]float32, np*pst+ks.tc+16)
				for i := range dst {
					dst[i] = -7
				}
				ks.cvtPanels[d](&dst[0], 4*pst, dataPtr(m.Mat), n, dataPtr(m.Mat))
				for i := range dst {
					p, e := i/pst, i%pst
					want := -7.0
					if p < np && e < ks.tc {
						want = m.vals[p*ks.tc+e]
					}
					if float64(dst[i]) != want {
						t.Fatalf("%v, %d panels of stride %d: dst[%d] = %v, want %v", dt, np, pst, i, dst[i], want)
					}
				}
			}
		}
	})
}

// TestNoAllocs checks that the decode kernels allocate nothing in steady
// state, whatever the pool size.
func TestNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			for _, dt := range append(weightDTypes, quantDTypes...) {
				C := 200 // a tail after the SIMD blocks
				var m testMat
				if dt.Quantized() {
					C = 224 // whole blocks of 32
					if blockElems(dt) == 256 {
						C = 512
					}
					m = randQMat(t, rng, dt, 256, C)
				} else {
					m = randMat(rng, dt, 256, C, 0)
				}
				x := randVec(rng, C)
				dst := make([]float32, 256)
				sel := []int32{5, 9, 100, 3, 255, 7, 8, 200, 17}
				a := randVec(rng, len(sel))
				aAll := randVec(rng, 256)
				xT := randVec(rng, 5*C)
				dT := make([]float32, 5*256)
				aT := randVec(rng, 7*256)
				vecsW := []Mat{m.Mat, m.Mat, m.Mat}
				vecsDst := [][]float32{dT[:256], dT[256:512], dT[512:768]}
				bvecsDst := [][]float32{make([]float32, 3*256), make([]float32, 3*256)}
				dTT := make([]float32, 7*C)
				cases := map[string]func(){
					"MatVec":       func() { MatVec(p, dst, m.Mat, x) },
					"MatVecRows":   func() { MatVecRows(p, dst[:len(sel)], m.Mat, sel, x) },
					"AddRows":      func() { AddRows(p, x, m.Mat, sel, a) },
					"AddRowsAll":   func() { AddRows(p, x, m.Mat, nil, aAll) },
					"MatMul":       func() { MatMul(p, dT, m.Mat, xT, 5) },
					"MatMulRowsT":  func() { MatMulRowsT(p, dTT, m.Mat, aT, 7) },
					"MatVecBatch":  func() { MatVecBatch(p, dT[:3*256], m.Mat, xT[:3*C], 3) },
					"MatVecs":      func() { MatVecs(p, vecsDst, vecsW, x) },
					"MatVecsBatch": func() { MatVecsBatch(p, bvecsDst, vecsW[:2], xT[:3*C], 3) },
					"AddRowsBatch": func() { AddRowsBatch(p, dTT[:3*C], m.Mat, aT[:3*256], 3) },
				}
				if dt == format.F32 {
					// GateFirst's predictor over the same shape as an SK2 sketch
					c := 192 // whole blocks within C
					sd, err := format.Quantize(nil, randVec(rng, 256*c), format.SK2)
					require.NoError(t, err)
					sk := Sketch{Rows: 256, Cols: c, Data: sd}
					cases["SketchMatVec"] = func() { SketchMatVec(p, dst, sk, x[:c]) }
					// decode steps: each one position further into a
					// 128-position cache, as forward.go calls it
					a := AttnShape{Heads: 8, KVHeads: 2, HeadDim: 16, T: 1}
					kc, vc := Cache{F32: randVec(rng, 128*32), KVHeads: 2, HeadDim: 16}, Cache{F32: randVec(rng, 128*32), KVHeads: 2, HeadDim: 16}
					kh, vh := NewCache(format.F16, 128, 2, 16), NewCache(format.F16, 128, 2, 16)
					q, out := randVec(rng, 8*16), make([]float32, 8*16)
					cases["Attention"] = func() {
						a.Pos = (a.Pos + 1) % 127
						Attention(p, out, q, kc, vc, a)
					}
					// a prompt of 16 tokens (attendBlock), F16 values
					// converted in the scratch
					ab := AttnShape{Heads: 4, KVHeads: 2, HeadDim: 64, Pos: 20, T: 16}
					kb, vb := NewCache(format.F16, 36, 2, 64), NewCache(format.F16, 36, 2, 64)
					kb.Put(0, randVec(rng, 36*128))
					vb.Put(0, randVec(rng, 36*128))
					qb, outb := randVec(rng, 16*4*64), make([]float32, 16*4*64)
					if ks.attnBlock(ab) == 0 {
						t.Fatalf("%s: a 16-token prompt of 64-value heads is not blocked", ks.name)
					}
					cases["Attention blocked"] = func() { Attention(p, outb, qb, kb, vb, ab) }
					cases["Attention F16 cache"] = func() {
						a.Pos = (a.Pos + 1) % 127
						kh.Put(a.Pos, q[:32])
						Attention(p, out, q, kh, vh, a)
					}
				}
				for name, f := range cases {
					f() // warm up (MatMulRowsT sizes its scratch once)
					runs := 50
					if raceOn {
						runs = 5
					}
					if allocs := steadyAllocs(runs, f); allocs != 0 {
						t.Errorf("%s %v: %v allocations per call", name, dt, allocs)
					}
				}
			}
		})
	})
}

// steadyAllocs is testing.AllocsPerRun's count, the least of three tries.
// The count is the process's: the Go runtime's own objects land in it too,
// above all a new OS thread's (several objects: the pool's workers are locked
// to threads, and under -race with more threads than CPUs the scheduler
// starts one now and then; TestNoAllocs/pool3 failed once so in make test).
// An allocation in the kernel call itself shows in every try.
func steadyAllocs(runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for range 2 {
		if least == 0 {
			break
		}
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}

// TestPoolLateWake delays the worker that finishes a call's last chunk,
// between its count-down and its wake-up, until the next call's caller
// sleeps: that wake-up must not end the next call before its chunks are done.
// The matrix is large enough (16 MiB) that a chunk takes longer than waking
// the caller. Chunks do not depend on who runs them, so every call's result is
// bit for bit the first one's, which is checked against the reference.
func TestPoolLateWake(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	p.testFixed = true // under load adapt would stop waking the worker whose wake-up is tested
	var fired atomic.Bool
	p.testLastDone = func() {
		if !p.waiting.Load() && fired.CompareAndSwap(false, true) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	rng := rand.New(rand.NewPCG(11, 12))
	m := randMat(rng, format.F32, 4096, 1024, 0)
	x := randVec(rng, 1024)
	first := make([]float32, 4096)
	MatVec(p, first, m.Mat, x)
	for r := range first {
		want, scale := m.refDot(r, x)
		checkClose(t, first[r], want, scale, 1e-5, "row %d", r)
	}
	dst := make([]float32, 4096)
	// Until the delay has run once (it needs a call whose caller did not
	// sleep), and two calls after it.
	after := 0
	for call := 0; call < 2000 && after < 2; call++ {
		if fired.Load() {
			after++
		}
		for i := range dst {
			dst[i] = float32(math.NaN())
		}
		MatVec(p, dst, m.Mat, x)
		st := p.state.Load()
		require.True(t, p.allDone(st>>genShift, int(st&maxChunks)), "call %d returned before its chunks were done", call)
		require.Equal(t, first, dst, "call %d", call)
	}
	require.True(t, fired.Load(), "the delay never ran: the test did not test the late wake-up (stats %+v)", p.Stats())
}

// TestPoolAfterClose: a kernel on a closed pool panics instead of waiting
// for workers that have stopped.
func TestPoolAfterClose(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	m := randMat(rng, format.F32, 64, 32, 0)
	for _, th := range []int{1, 2} {
		p := NewPool(th)
		p.Close()
		require.PanicsWithValue(t, "kernels: Pool used after Close", func() {
			MatVec(p, make([]float32, 64), m.Mat, randVec(rng, 32))
		}, "%d threads", th)
	}
}

// TestPoolChunksOnce: every chunk of every call runs once, whichever
// threads are woken (the others only take what is left of the woken
// threads' runs), and the results are the 1-thread pool's bit for bit.
// Calls follow each other at once, so a worker still in one call when the
// next is published (a stale generation) is exercised too.
func TestPoolChunksOnce(t *testing.T) {
	c := newChunkCheck(23)
	for n := 2; n <= 4; n++ {
		for active := 1; active <= n; active++ {
			p := NewPool(n)
			p.testFixed = true
			p.active = active
			byThread := make([]atomic.Int64, n)
			p.testRan = func(k, ch int) {
				c.ran[ch].Add(1)
				byThread[k].Add(1)
			}
			for call := range 100 {
				c.call(t, p, fmt.Sprintf("threads %d, woken %d, call %d", n, active, call))
			}
			p.Close()
			require.Greater(t, byThread[0].Load(), int64(0), "threads %d, woken %d: the caller ran chunks", n, active)
		}
	}
}

// TestPoolStaleWorker: a worker that read a call's state and then stalled
// until the caller had run that call alone and published the next one takes
// no chunk of either when it resumes (its generation has ended), and the
// next call runs each chunk once.
func TestPoolStaleWorker(t *testing.T) {
	c := newChunkCheck(25)
	p := NewPool(2)
	defer p.Close()
	p.testFixed = true
	stalled, release := make(chan struct{}), make(chan struct{})
	var stall, resume sync.Once
	p.testClaim = func(int) { stall.Do(func() { close(stalled); <-release }) }
	var second atomic.Bool
	p.testRan = func(k, ch int) {
		c.ran[ch].Add(1)
		if k == 0 && second.Load() {
			resume.Do(func() { // the stale worker goes on while this call runs
				close(release)
				time.Sleep(20 * time.Millisecond)
			})
		}
	}
	for call := range 2 {
		before := p.Stats()
		chunks := c.call(t, p, fmt.Sprintf("call %d", call))
		if call == 0 {
			require.Equal(t, uint64(chunks), p.Stats().CallerChunks-before.CallerChunks, "the caller ran the first call alone")
			<-stalled // the worker holds the first call's state
			second.Store(true)
		}
	}
}

// TestPoolGenerationWrap: calls go on across the state word's 40-bit
// generation wrapping (the workers extend it to the caller's count), each
// chunk run once and the results the 1-thread pool's.
func TestPoolGenerationWrap(t *testing.T) {
	c := newChunkCheck(27)
	p := NewPool(2)
	defer p.Close()
	p.testFixed = true
	p.gen = stateGenMask - 4 // before the first call
	var workerRan atomic.Int32
	p.testRan = func(k, ch int) {
		c.ran[ch].Add(1)
		if k > 0 {
			workerRan.Add(1)
			return
		}
		// The caller waits for the worker to take a chunk of the call (it
		// would take none with a generation that disagreed with the
		// caller's: the results would not show it).
		for start := time.Now(); workerRan.Load() == 0 && time.Since(start) < 5*time.Second; {
			time.Sleep(100 * time.Microsecond)
		}
	}
	for call := range 10 {
		workerRan.Store(0)
		c.call(t, p, fmt.Sprintf("call %d", call))
		require.Greater(t, workerRan.Load(), int32(0), "call %d: the worker took no chunk", call)
	}
	require.Greater(t, p.gen, uint64(stateGenMask), "the generation wrapped")
}

// chunkCheck is the pool tests' call: a MatVec of a random 1024 × 64 F32
// matrix, whose result must be the 1-thread pool's (want), and ran, the runs
// of each chunk index, which the test's Pool.testRan hook counts.
type chunkCheck struct {
	m    testMat
	x    []float32
	want []float32
	ran  []atomic.Int32
}

func newChunkCheck(seed uint64) *chunkCheck {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	c := &chunkCheck{m: randMat(rng, format.F32, 1024, 64, 0), x: randVec(rng, 64), want: make([]float32, 1024), ran: make([]atomic.Int32, maxChunks)}
	MatVec(NewPool(1), c.want, c.m.Mat, c.x)
	return c
}

// call runs the MatVec on p (within 30 s) into a NaN-filled dst and checks
// that it was cut into more chunks than p has threads, that each chunk ran
// once (clearing the counts) and the result. It returns the chunks.
func (c *chunkCheck) call(t *testing.T, p *Pool, what string) int {
	t.Helper()
	dst := make([]float32, len(c.want))
	for i := range dst {
		dst[i] = float32(math.NaN())
	}
	before := p.Stats()
	within(t, what, func() { MatVec(p, dst, c.m.Mat, c.x) })
	chunks := int(p.Stats().Chunks - before.Chunks)
	require.Greater(t, chunks, p.Threads(), "%s: the call was cut into chunks", what)
	for ch := range c.ran {
		want := int32(0)
		if ch < chunks {
			want = 1
		}
		require.Equal(t, want, c.ran[ch].Swap(0), "%s: runs of chunk %d", what, ch)
	}
	require.Equal(t, c.want, dst, what)
	return chunks
}

// within runs f and fails the test if f has not returned within 30 s: a
// pool that lost a chunk or a wake-up hangs rather than failing.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no return within 30 s", what)
	}
}

func TestPoolConcurrentPools(t *testing.T) {
	// Separate pools may run at once from separate goroutines.
	rng := rand.New(rand.NewPCG(15, 16))
	m := randMat(rng, format.F16, 300, 130, 0)
	x := randVec(rng, 130)
	want := make([]float32, 300)
	MatVec(NewPool(1), want, m.Mat, x)
	done := make(chan []float32)
	for g := 0; g < 3; g++ {
		go func() {
			p := NewPool(2)
			defer p.Close()
			dst := make([]float32, 300)
			for range 20 {
				MatVec(p, dst, m.Mat, x)
			}
			done <- dst
		}()
	}
	for range 3 {
		require.Equal(t, want, <-done)
	}
}

func TestPanicsOnBadShapes(t *testing.T) {
	p := NewPool(1)
	defer p.Close()
	rng := rand.New(rand.NewPCG(17, 18))
	m := randMat(rng, format.F32, 4, 8, 0)
	require.Panics(t, func() { MatVec(p, make([]float32, 4), m.Mat, make([]float32, 7)) })
	require.Panics(t, func() { MatVec(p, make([]float32, 3), m.Mat, make([]float32, 8)) })
	require.Panics(t, func() { MatVecRows(p, make([]float32, 1), m.Mat, []int32{4}, make([]float32, 8)) })
	require.Panics(t, func() { AddRows(p, make([]float32, 8), m.Mat, []int32{-1}, []float32{1}) })
	require.Panics(t, func() { AddRows(p, make([]float32, 8), m.Mat, nil, make([]float32, 5)) })
	require.Panics(t, func() { MatMul(p, make([]float32, 8), m.Mat, make([]float32, 15), 2) })
	require.Panics(t, func() { MatMulRowsT(p, make([]float32, 15), m.Mat, make([]float32, 8), 2) })
}

func TestMeasureReadBandwidth(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	bw := MeasureReadBandwidth(p, 4<<20, 3)
	require.Len(t, bw, 3)
	for _, r := range bw {
		require.Greater(t, r, 0.0)
	}
	t.Logf("read bandwidth over 4 MiB (cache), first pass: %.1f GB/s (%s)", bw[0]/1e9, ISA())
}

// TestSetsComplete checks that every kernel set built for this architecture,
// including one this CPU cannot run (AVX-512 here), has every kernel and
// every tile size: a missing entry would otherwise be a nil call on the
// machine that picks the set.
func TestSetsComplete(t *testing.T) {
	for _, ks := range append(slices.Clone(declaredSets), genericSet) {
		v := reflect.ValueOf(ks).Elem()
		for i := 0; i < v.NumField(); i++ {
			f, name := v.Field(i), v.Type().Field(i).Name
			if name == "qpack" || name == "qgemm" || name == "qrows" {
				continue // optional: checked below
			}
			if name == "dotRowsB" || name == "dot4B" || name == "qdotRowsB" || name == "kdotRowsB" || name == "qaxpy4B" {
				continue // optional multi-token kernels: TestBatchEqualsSingle runs those a set has
			}
			if name == "qdotX" || name == "qpackX" || name == "qdotXB" {
				continue // optional interleaved kernels (the portable ones run instead): TestInterleavedProducts
			}
			switch f.Kind() {
			case reflect.Func:
				require.False(t, f.IsNil(), "set %s: %s is nil", ks.name, name)
			case reflect.Array:
				for d := 0; d < f.Len(); d++ {
					require.False(t, f.Index(d).IsNil(), "set %s: %s[%d] is nil", ks.name, name, d)
				}
			case reflect.Int:
				require.Positive(t, f.Int(), "set %s: %s", ks.name, name)
			}
		}
		require.Equal(t, ks != genericSet, len(ks.features) > 0, "set %s: features %v", ks.name, ks.features)
		for q, g := range ks.qgemm { // integer prefill where the set has it: qgemm needs qpack
			require.True(t, g == nil || ks.qpack[q] != nil && (ks.qrows == 8 || ks.qrows == 16), "set %s: qgemm[%d] without qpack or qrows %d", ks.name, q, ks.qrows)
		}
	}
}

func TestChooseSet(t *testing.T) {
	sets := kernelSets()
	for _, ks := range sets {
		got, err := chooseSet(ks.name)
		require.NoError(t, err)
		require.Same(t, ks, got)
	}
	got, err := chooseSet("")
	require.NoError(t, err)
	require.Same(t, sets[0], got)
	var names []string
	for _, ks := range sets {
		names = append(names, ks.name)
	}
	got, err = chooseSet("no-such-set")
	require.Same(t, sets[0], got)
	require.EqualError(t, err, fmt.Sprintf("SINF_KERNELS=no-such-set: no such kernel set; this CPU runs %s (unset SINF_KERNELS for the best, %s)",
		strings.Join(names, ", "), sets[0].name))
	for _, ks := range declaredSets {
		if !slices.Contains(sets, ks) {
			_, err := chooseSet(ks.name)
			require.ErrorContains(t, err, "SINF_KERNELS="+ks.name+": this CPU lacks a feature of that kernel set")
		}
	}
	require.Equal(t, active.features, Features())
}

func TestRowF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	for _, dt := range weightDTypes {
		m := randMat(rng, dt, 3, 21, 0)
		dst := make([]float32, 21)
		m.RowF32(dst, 2)
		for c := range dst {
			require.Equal(t, float32(m.vals[2*21+c]), dst[c])
		}
	}
}

// checkMatMulRowsT runs MatMulRowsT of m ([K, C]) on T random coefficient
// rows (a fifth of them zero) and checks every output against the float64
// sum within tol of Σ|a·w| (plus |a|·extra(k, c) per term, when extra is set).
func checkMatMulRowsT(t *testing.T, rng *rand.Rand, p *Pool, m testMat, T int, tol float64, extra func(r, c int) float64) {
	t.Helper()
	K, C := m.Rows, m.Cols
	a := randVec(rng, T*K)
	for i := range a {
		if rng.IntN(5) == 0 {
			a[i] = 0
		}
	}
	dst := randVec(rng, T*C) // overwritten
	MatMulRowsT(p, dst, m.Mat, a, T)
	for u := 0; u < T; u++ {
		for c := 0; c < C; c++ {
			var want, scale float64
			for k := 0; k < K; k++ {
				v := float64(a[u*K+k]) * m.vals[k*C+c]
				want += v
				scale += math.Abs(v)
				if extra != nil {
					scale += math.Abs(float64(a[u*K+k])) * extra(k, c)
				}
			}
			checkClose(t, dst[u*C+c], want, scale, tol, "MatMulRowsT %v [%d,%d] T=%d t=%d c=%d", m.DType, K, C, T, u, c)
		}
	}
}

// checkAddRows runs AddRows of m over the terms a (rows sel; nil: 0, 1, …)
// on a random dst and checks every column against the float64 sum within
// tol of |dst| + Σ|a·w| (plus |a|·extra(r, c) per term, when extra is set).
func checkAddRows(t *testing.T, rng *rand.Rand, p *Pool, m testMat, sel []int32, a []float32, tol float64, extra func(r, c int) float64) {
	t.Helper()
	C := m.Cols
	dst0 := randVec(rng, C)
	dst := append([]float32(nil), dst0...)
	AddRows(p, dst, m.Mat, sel, a)
	for c := range dst {
		want, scale := float64(dst0[c]), math.Abs(float64(dst0[c]))
		for j := range a {
			r := j
			if sel != nil {
				r = int(sel[j])
			}
			v := float64(a[j]) * m.vals[r*C+c]
			want += v
			scale += math.Abs(v)
			if extra != nil {
				scale += math.Abs(float64(a[j])) * extra(r, c)
			}
		}
		checkClose(t, dst[c], want, scale, tol, "AddRows %v cols %d k %d gathered %v col %d", m.DType, C, len(a), sel != nil, c)
	}
}

// TestAdd: Add equals the plain loop's sums bit for bit on every set, for
// lengths around the sets' element multiples, with a longer src.
func TestAdd(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		rng := rand.New(rand.NewPCG(7, 8))
		for _, n := range []int{0, 1, 7, 8, 15, 16, 17, 31, 33, 63, 65, 2304} {
			dst, src := randVec(rng, n), randVec(rng, n+3)
			want := slices.Clone(dst)
			for i := range want {
				want[i] += src[i]
			}
			Add(dst, src)
			equalBits(t, dst, want, "Add n=%d", n)
		}
		require.Panics(t, func() { Add(make([]float32, 4), make([]float32, 3)) })
	})
}
