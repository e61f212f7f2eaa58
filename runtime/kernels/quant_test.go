package kernels

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/selectinfer/sinf/format"
)

var quantDTypes = []format.DType{format.Q8_0, format.Q4_0, format.Q5_0, format.Q5_1, format.Q4_K, format.Q5_K, format.Q6_K}

// colsFor returns the test widths for d: qCols for Q8_0 and Q4_0, and for
// Q5_0 and Q5_1 on amd64; fewer for Q5_0 and Q5_1 elsewhere (their NEON
// forms at 1, 5 and 18 blocks) and 256 and 2048 for the K-quants, so that
// make test-arm64 (qemu) stays within its time.
func colsFor(d format.DType) []int {
	switch {
	case d.KQuant():
		return []int{256, 2048}
	case (d == format.Q5_0 || d == format.Q5_1) && runtime.GOARCH != "amd64":
		return []int{32, 160, 576}
	}
	return qCols
}

// blockElems is d's block size.
func blockElems(d format.DType) int { e, _ := d.Block(); return e }

// minTermBound is the float32 rounding of the dtypes with a minimum (Q5_1,
// Q4_K, Q5_K): the scale and the minimum terms are summed apart and cancel,
// so their rounding is relative to Σ|x|·(|w| + the block's minimum) rather
// than Σ|w·x|; a tolerance of 4× covers it at these shapes.
func minTermBound(d format.DType) float64 {
	switch d {
	case format.Q5_1, format.Q4_K, format.Q5_K:
		return 4
	}
	return 1
}

// guarded returns n bytes that end where an inaccessible page begins, so a
// kernel reading past the last row faults. The memory is never freed (a
// few pages per test case).
func guarded(t *testing.T, n int) []byte {
	t.Helper()
	ps := unix.Getpagesize()
	size := (n+ps-1)/ps*ps + ps
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	require.NoError(t, unix.Mprotect(mem[size-ps:], unix.PROT_NONE))
	return mem[size-ps-n : size-ps]
}

// randQMat makes a [rows, cols] block-quantized matrix of random normal
// weights in guarded memory, with its dequantized values in float64.
func randQMat(t *testing.T, rng *rand.Rand, d format.DType, rows, cols int) testMat {
	f := make([]float32, rows*cols)
	for i := range f {
		f[i] = float32(rng.NormFloat64())
	}
	b := quantizeCached(t, f, d)
	data := guarded(t, len(b))
	copy(data, b)
	deq := make([]float32, len(f))
	require.NoError(t, format.Dequantize(deq, b, d))
	vals := make([]float64, len(f))
	for i, v := range deq {
		vals[i] = float64(v)
	}
	return testMat{Mat{DType: d, Rows: rows, Cols: cols, Data: data}, vals}
}

// quantCache holds the blocks of the matrices randQMat made: the tests draw
// the same matrices for every kernel set and pool, and the K-quants'
// reference quantization (a least-squares search per sub-block) is slow
// under qemu.
var quantCache = map[[2]uint64][]byte{}

// quantizeCached is format.Quantize(nil, f, d), from quantCache when f and
// d were seen before (keyed by an FNV-1a hash of f's bits, its length and d).
func quantizeCached(t *testing.T, f []float32, d format.DType) []byte {
	h := uint64(14695981039346656037)
	for _, v := range f {
		h = (h ^ uint64(math.Float32bits(v))) * 1099511628211
	}
	key := [2]uint64{h, uint64(len(f))<<8 | uint64(d)}
	if b, ok := quantCache[key]; ok {
		return b
	}
	b, err := format.Quantize(nil, f, d)
	require.NoError(t, err)
	quantCache[key] = b
	return b
}

// qxBound is the error of a dot product with row r that quantizing x to int8
// blocks can cause: Σ_e |w_e|·d_b/2 with d_b = max|x| over e's block / 127
// (for the K-quants, whose x has one scale per 256, over e's 256).
func (m testMat) qxBound(r int, x []float32) float64 {
	bl := 32
	if m.DType.KQuant() {
		bl = format.SuperBlockElems
	}
	var s float64
	for b := 0; b < m.Cols; b += bl {
		var amax float64
		for _, v := range x[b : b+bl] {
			amax = max(amax, math.Abs(float64(v)))
		}
		for c := b; c < b+bl; c++ {
			s += math.Abs(m.vals[r*m.Cols+c]) * amax / 127 / 2
		}
	}
	return s
}

var qCols = []int{32, 64, 96, 160, 576, 2048}

// blockMax returns the largest |weight| of the block of row r holding column c.
func (m testMat) blockMax(r, c int) float64 {
	var v float64
	for e := c &^ 31; e < c&^31+32; e++ {
		v = max(v, math.Abs(m.vals[r*m.Cols+e]))
	}
	return v
}

// TestQuantMatVec checks MatVec and MatVecRows on Q8_0 and Q4_0 rows against
// the float64 product of the dequantized weights and x, within the error that
// quantizing x to int8 blocks allows, plus 1e-5 of Σ|w·x|; gathered rows
// include the last one, which ends at a guard page.
func TestQuantMatVec(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			rng := rand.New(rand.NewPCG(21, 22))
			for _, dt := range quantDTypes {
				for _, cols := range colsFor(dt) {
					for _, rows := range []int{1, 3, 17, 70} {
						m := randQMat(t, rng, dt, rows, cols)
						x := randVec(rng, cols)
						dst := make([]float32, rows)
						MatVec(p, dst, m.Mat, x)
						for r := range dst {
							want, scale := m.refDot(r, x)
							checkClose(t, dst[r], want, 1, m.qxBound(r, x)+1e-5*minTermBound(dt)*scale, "MatVec %v [%d,%d] row %d", dt, rows, cols, r)
						}
						sel := []int32{int32(rows - 1), 0, int32(rows / 2), int32(rows - 1)}
						got := make([]float32, len(sel))
						MatVecRows(p, got, m.Mat, sel, x)
						for j, r := range sel {
							want, scale := m.refDot(int(r), x)
							checkClose(t, got[j], want, 1, m.qxBound(int(r), x)+1e-5*minTermBound(dt)*scale, "MatVecRows %v [%d,%d] j %d", dt, rows, cols, j)
						}
					}
				}
			}
		})
	})
}

// TestQuantRawDot compares each set's qdotRows (and each raw form this CPU
// runs that no set of it uses, qdotVariants) with the generic one on the
// same int8 x: the integer sums are exact, so only float32 rounding differs.
func TestQuantRawDot(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	sets := kernelSets()
	for name, dots := range qdotVariants() {
		c := *genericSet
		c.name = name
		copy(c.qdotRows[:4], dots[:]) // Q8_0, Q4_0, Q5_0, Q5_1; the K-quants' are generic
		sets = append(sets, &c)
	}
	for _, ks := range sets {
		for _, dt := range quantDTypes {
			q, be := qIndex(dt), blockElems(dt)
			for _, nb := range []int{1, 2, 3, 18, 64} {
				n := be * nb
				nx := n / 32
				m := randQMat(t, rng, dt, 5, n)
				x := randVec(rng, n)
				if nb == 3 {
					clear(x[32:64]) // an all-zero block: d = 0
					x[70] = 127     // and a value the scale maps to exactly 127
				}
				xq, xd := make([]int8, 64*nx), make([]float32, 2*nx)
				quantizeX(xq, xd, x)
				dq, dd := xq, xd
				if dt.KQuant() { // the K-quant dots' x (MatVec's): one scale per 256
					dq, dd = make([]int8, 64*nx), make([]float32, 2*nx)
					quantizeXFor(dt)(dq, dd, x)
				}
				got, want := make([]float32, 5), make([]float32, 5)
				ks.qdotRows[q](dataPtr(m.Mat), m.RowBytes(), nil, &dq[0], &dd[0], nb, 5, &got[0], 64)
				genericSet.qdotRows[q](dataPtr(m.Mat), m.RowBytes(), nil, &dq[0], &dd[0], nb, 5, &want[0], 0)
				for r := range got {
					_, scale := m.refDot(r, x)
					checkClose(t, got[r], float64(want[r]), scale, 1e-6, "%s qdotRows %v nb %d row %d", ks.name, dt, nb, r)
				}
				gq, gd := make([]int8, 64*nx), make([]float32, 2*nx)
				ks.quantizeX(&gq[0], &gd[0], &x[0], nx, 1)
				require.Equal(t, xq, gq, "%s quantizeX nb %d", ks.name, nb)
				require.Equal(t, xd, gd, "%s quantizeX nb %d", ks.name, nb)
				if dt.KQuant() {
					quantizeXK(dq, dd, x) // without Q6_K's sums (q6XSums)
					ks.quantizeX(&gq[0], &gd[0], &x[0], nx, 8)
					require.Equal(t, dq, gq, "%s quantizeXK nb %d", ks.name, nb)
					require.Equal(t, dd, gd, "%s quantizeXK nb %d", ks.name, nb)
				}
				deq := make([]float32, n)
				ks.qcvt[q](&deq[0], dataPtr(m.Mat), nb)
				for e, v := range deq {
					require.Equal(t, float32(m.vals[e]), v, "%s qcvt %v nb %d element %d", ks.name, dt, nb, e)
				}
			}
		}
	}
}

// TestQuantRawGemm compares each set's integer prefill kernels (qpack, then
// qgemm over four tokens) with the generic decode dot of each token on the
// same int8 x: the integer sums are exact, so only float32 rounding differs
// (qgemm subtracts the weights' offset times Σ x in float32).
func TestQuantRawGemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	sets := kernelSets()
	for name, gemm := range qgemmVariants() {
		c := *genericSet
		c.name = name
		c.qpack, c.qgemm, c.qrows = gemm.pack, gemm.gemm, gemm.rows
		sets = append(sets, &c)
	}
	tested := 0
	for _, ks := range sets {
		for _, dt := range quantDTypes {
			q := qIndex(dt)
			if ks.qgemm[q] == nil {
				continue
			}
			tested++
			G := ks.qrows
			nbs := []int{1, 2, 3, 18, 64}
			if dt.KQuant() {
				nbs = []int{8, 16, 64}
			}
			for _, nb := range nbs {
				n, nx := 32*nb, 2*nb
				m := randQMat(t, rng, dt, G, n)
				if dt == format.Q8_0 && nb == 2 { // the extreme levels −128 (|w| = 128) and 127
					for b := 0; b < len(m.Data); b += 34 {
						for e := range 32 {
							m.Data[b+2+e] = [2]byte{0x80, 0x7f}[(b/34+e)%2]
						}
					}
					deq := make([]float32, G*n)
					require.NoError(t, format.Dequantize(deq, m.Data, dt))
					for i, v := range deq {
						m.vals[i] = float64(v)
					}
				}
				xq, xd := make([]int8, 4*2*n), make([]float32, 4*nx)
				x := randVec(rng, 4*n)
				if nb == 3 {
					clear(x[n+32 : n+64]) // token 1: an all-zero block, d = 0
					x[2*n+70] = 127       // token 2: a value mapped to exactly 127
				}
				for j := range 4 { // as MatMul quantizes it: the K-quants' with a scale per 256
					quantize := quantizeX
					if dt.KQuant() {
						quantize = quantizeXFor(dt)
					}
					quantize(xq[j*2*n:(j+1)*2*n], xd[j*nx:(j+1)*nx], x[j*n:(j+1)*n])
				}
				want := make([]float32, 4*G)
				for j := range 4 {
					genericSet.qdotRows[q](dataPtr(m.Mat), m.RowBytes(), nil, &xq[j*2*n], &xd[j*nx], n/blockElems(dt), G, &want[G*j], 0)
				}
				pack := make([]byte, nb*qpackStride*G/8)
				ks.qpack[q](&pack[0], dataPtr(m.Mat), m.RowBytes(), nb)
				if dt.KQuant() { // the assembly packers: the bytes of the portable one
					ref := make([]byte, len(pack))
					qpackGo(q, G, &ref[0], dataPtr(m.Mat), m.RowBytes(), nb)
					require.Equal(t, ref, pack, "%s qpack %v nb %d", ks.name, dt, nb)
				}
				ds := G + 3 // tokens strided by G+3: dst's stride is honoured
				got := make([]float32, 3*ds+G)
				ks.qgemm[q](&pack[0], &xq[0], 2*n, &xd[nb], 4*nx, nb, &got[0], 4*ds, unsafe.Pointer(&pack[0]))
				for j := range 4 {
					for r := range G {
						_, scale := m.refDot(r, x[j*n:(j+1)*n])
						checkClose(t, got[ds*j+r], float64(want[G*j+r]), scale, 2e-6, "%s qgemm %v nb %d token %d row %d", ks.name, dt, nb, j, r)
					}
				}
			}
		}
	}
	if tested == 0 {
		t.Skip("no set of this CPU has integer prefill kernels")
	}
}

// TestQuantAddRows checks AddRows (contiguous and gathered rows, zero terms
// skipped, columns split across workers) on block-quantized rows.
func TestQuantAddRows(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			rng := rand.New(rand.NewPCG(25, 26))
			for _, dt := range quantDTypes {
				for _, cols := range colsFor(dt) {
					rows := 60
					m := randQMat(t, rng, dt, rows, cols)
					for _, gathered := range []bool{false, true} {
						for _, k := range []int{1, 4, 13, 37, 60} {
							var sel []int32
							if gathered {
								sel = make([]int32, k)
								for i := range sel {
									sel[i] = int32(rng.IntN(rows))
								}
								sel[k-1] = int32(rows - 1)
							}
							a := randVec(rng, k)
							for i := range a {
								if rng.IntN(4) == 0 {
									a[i] = 0
								}
							}
							var extra func(r, c int) float64
							if dt != format.Q8_0 {
								// qaxpy4 adds a·d·q and then −8·a·d (Q6_K: −32,
								// Q4_K, Q5_1: the minimum): its rounding is
								// relative to 8|a·d| ≈ |a|·max|w| of the block.
								extra = m.blockMax
							}
							checkAddRows(t, rng, p, m, sel, a, 1e-5, extra)
						}
					}
				}
			}
		})
	})
}

// TestQuantMatMul checks prefill's MatMul (x quantized; in integers where
// the set has qgemm, else on the weights dequantized to float32 in blocks)
// and MatMulRowsT on block-quantized weights against float64 references.
func TestQuantMatMul(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			rng := rand.New(rand.NewPCG(27, 28))
			for _, dt := range quantDTypes {
				shapes := [][2]int{{1, 32}, {7, 64}, {33, 96}, {50, 576}}
				if blockElems(dt) == format.SuperBlockElems {
					shapes = [][2]int{{1, 256}, {33, 512}}
				}
				if !raceOn {
					shapes = append(shapes, [2]int{40, 2048})
				}
				for _, sh := range shapes {
					rows, cols := sh[0], sh[1]
					m := randQMat(t, rng, dt, rows, cols)
					for _, T := range []int{1, 3, 4, 9, 37} {
						x := randVec(rng, T*cols)
						dst := make([]float32, T*rows)
						MatMul(p, dst, m.Mat, x, T)
						for u := 0; u < T; u++ {
							for r := 0; r < rows; r++ {
								xu := x[u*cols : (u+1)*cols]
								want, scale := m.refDot(r, xu)
								// x quantized, as MatVec's, on every set
								tol := m.qxBound(r, xu) + 1e-5*minTermBound(dt)*scale
								checkClose(t, dst[u*rows+r], want, 1, tol, "MatMul %v [%d,%d] T=%d t=%d r=%d", dt, rows, cols, T, u, r)
							}
						}
						// The same matrix as the transposed down_proj [K=rows, C=cols];
						// few tokens go through AddRows' kernels, whose
						// rounding is relative to the block's largest weight
						// for the dtypes with an offset or a minimum (as
						// in TestQuantAddRows).
						var extra func(r, c int) float64
						if dt != format.Q8_0 {
							extra = m.blockMax
						}
						checkMatMulRowsT(t, rng, p, m, T, 1e-5, extra)
					}
				}
			}
		})
	})
}

// TestQuantRowF32 checks the embedding lookup of a quantized matrix decodes
// exactly what format.Dequantize does.
func TestQuantRowF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	for _, dt := range quantDTypes {
		cols := 3 * blockElems(dt)
		m := randQMat(t, rng, dt, 4, cols)
		got := make([]float32, cols)
		m.RowF32(got, 3)
		for c, v := range got {
			require.Equal(t, float32(m.vals[3*cols+c]), v, "%v col %d", dt, c)
		}
	}
}

// TestQuantNewMat checks the shape rules of block-quantized matrices.
func TestQuantNewMat(t *testing.T) {
	_, err := NewMat(format.Tensor{Name: "w", DType: format.Q8_0, Shape: []int{2, 40}, Data: make([]byte, 2*34)})
	require.ErrorContains(t, err, "not a whole number of Q8_0 blocks")
	_, err = NewMat(format.Tensor{Name: "w", DType: format.Q4_0, Shape: []int{2, 64}, Data: make([]byte, 71)})
	require.ErrorContains(t, err, "71 bytes do not hold")
	m, err := NewMat(format.Tensor{Name: "w", DType: format.Q4_0, Shape: []int{2, 64}, Data: make([]byte, 72)})
	require.NoError(t, err)
	require.Equal(t, 36, m.RowBytes())
	require.True(t, m.Aligned())
}
