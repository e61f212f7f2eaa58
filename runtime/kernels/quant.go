package kernels

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// Block-quantized weights (Q8_0, Q4_0 here, the others in kquant.go; spec/sinf.md §5.2–5.3). A row of Cols
// weights is Cols/32 blocks; the kernels take block counts, so there are no
// tails. Decode dots (MatVec, MatVecRows) quantize x to int8 blocks once per
// call, with a float32 scale per block, and multiply in integers, as GGML's
// vec_dot_q8_0_q8_0 and vec_dot_q4_0_q8_0 do. The neuron-row accumulation
// (AddRows) dequantizes the weights to float32 in registers. Prefill's MatMul
// multiplies Q8_0 and Q4_0 rows in integers where the set has the kernels
// (qgemm.go); otherwise, and for MatMulRowsT, it dequantizes blocks of
// weights to float32 scratch once per call and runs the float32
// micro-kernels over them.

// qDTypes are the block dtypes of the q tables' indices: the 32-element
// blocks first (the ones with SIMD forms), then Q5_0/Q5_1 and the K-quants
// (kquant.go).
var qDTypes = [nq]format.DType{format.Q8_0, format.Q4_0, format.Q5_0, format.Q5_1, format.Q4_K, format.Q5_K, format.Q6_K}

// nq is the number of block dtypes the kernels take.
const nq = 7

// qIndex maps a block dtype to its index in the kernel sets' q tables.
func qIndex(d format.DType) int {
	for q, v := range qDTypes {
		if v == d {
			return q
		}
	}
	panic("kernels: " + d.String() + " is not a block dtype the kernels take")
}

// qBlockElems and qBlockBytes are the elements and bytes of one block of q
// table index q.
var qBlockElems, qBlockBytes = func() (e, b [nq]int) {
	for q, d := range qDTypes {
		e[q], b[q] = d.Block()
	}
	return
}()

// quantizeX quantizes x (len a multiple of 32) to int8 blocks: per block b,
// d = max|x|/127, q = round(x/d) to nearest even, as GGML's AVX2
// quantize_row_q8_0 rounds. xq (2·len(x) bytes) gets 64 bytes a block: the
// 32 values q, then d eight times as float32 (for the AVX2 dot, which
// multiplies by it from memory); xd[b] = d, and xd[nb+b] = (8·Σ q)·d, the
// correction the Q4_0 dot subtracts (see qdotRows).
func quantizeX(xq []int8, xd []float32, x []float32) { quantizeXGroups(xq, xd, x, 1) }

// quantizeXK is quantizeX with one scale per 256 elements, the x of the
// K-quant dots (len(x) a multiple of 256): the eight blocks of each 256 share
// d = max|x| over the 256 / 127, as GGML's Q8_K quantizes x for its K-quant
// dots, so that a super-block's integer products are summed before one
// float multiply (the AVX2 kernels). The layout is quantizeX's: every
// kernel that takes quantizeX's x takes this one.
func quantizeXK(xq []int8, xd []float32, x []float32) { quantizeXGroups(xq, xd, x, 8) }

// q6XSums makes x quantized by quantizeXK (xq, 512 bytes a super-block) the
// x of the Q6_K dots, which no integer prefill (qgemm)
// reads: the 32 bytes after the levels of each super-block's second block
// (bytes 96–127 of its 512, d_x there in quantizeXK's layout) get the sums
// of the levels over its sixteen runs of 16 elements as int16 (|sum| ≤
// 2032), GGML's Q8_K bsums, from which the AVX2 dot takes the −32 of every
// weight once per super-block. The dots read d_x from the first block.
func q6XSums(xq []int8) {
	for s := 0; 512*s < len(xq); s++ {
		sb := xq[512*s : 512*(s+1)]
		for i := range 16 {
			var sum int16
			for _, q := range sb[64*(i/2)+16*(i%2):][:16] {
				sum += int16(q)
			}
			binary.LittleEndian.PutUint16(unsafe.Slice((*byte)(unsafe.Pointer(&sb[96+2*i])), 2), uint16(sum))
		}
	}
}

// quantizeXFor returns the portable x quantization of d's dots
// (quantizeXWith on the generic set), the reference of the tests.
func quantizeXFor(d format.DType) func(xq []int8, xd []float32, x []float32) {
	return func(xq []int8, xd []float32, x []float32) { quantizeXWith(genericSet, d, xq, xd, x) }
}

// quantizeXWith quantizes x (len a multiple of 32, of 256 for a K-quant)
// into xq (2·len(x) bytes) and xd (len(x)/16 floats) for the dots of the
// block-quantized dtype d with the set's quantizeX kernel: quantizeX's
// blocks, for the K-quants one scale per 256 (quantizeXK), for Q6_K with
// q6XSums' level sums too.
func quantizeXWith(ks *kernelSet, d format.DType, xq []int8, xd []float32, x []float32) {
	if len(x) == 0 {
		return
	}
	g := 1
	if d.KQuant() {
		g = 8
	}
	ks.quantizeX(&xq[0], &xd[0], &x[0], len(x)/32, g)
	if d.Base() == format.Q6_K {
		q6XSums(xq[:2*len(x)])
	}
}

// quantizeXGroups is quantizeX with the scale d shared by each group of g
// consecutive blocks (len(x) a multiple of 32·g).
func quantizeXGroups(xq []int8, xd []float32, x []float32, g int) {
	nb := len(x) / 32
	xq, xd = xq[:2*len(x)], xd[:2*nb]
	for s := 0; s < nb; s += g {
		var amax float32
		for _, v := range x[32*s : 32*(s+g)] {
			amax = max(amax, math.Float32frombits(math.Float32bits(v)&0x7fffffff))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		for b := s; b < s+g; b++ {
			q := xq[64*b : 64*b+32]
			var sum int32
			for e, v := range x[32*b : 32*b+32] {
				q[e] = int8(math.RoundToEven(float64(float32(v * id)))) // |q| ≤ 127
				sum += int32(q[e])
			}
			xd[b], xd[nb+b] = d, float32(8*sum)*d
			for i := range 8 {
				binary.LittleEndian.PutUint32(unsafe.Slice((*byte)(unsafe.Pointer(&xq[64*b+32+4*i])), 4), math.Float32bits(d))
			}
		}
	}
}

// ---- portable raw kernels ----

func quantizeXGo(xq *int8, xd *float32, x *float32, nb, g int) {
	if nb > 0 {
		quantizeXGroups(unsafe.Slice(xq, 64*nb), xs(xd, 2*nb), xs(x, 32*nb), g)
	}
}

func qdotRowsGo(q int, w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32) {
	bb := qBlockBytes[q]
	d, qx, dx := xs(dst, m), unsafe.Slice(xq, 64*nb), xs(xd, nb)
	for j := range d {
		row := unsafe.Slice((*byte)(rowAt(w, stride, idx, j)), nb*bb)
		var s float32
		for b := range dx {
			blk, xb := row[b*bb:(b+1)*bb], qx[64*b:64*b+32]
			var sum int32
			if q == 0 {
				for e, v := range blk[2:] {
					sum += int32(int8(v)) * int32(xb[e])
				}
			} else {
				for e, v := range blk[2:] {
					sum += (int32(v&15)-8)*int32(xb[e]) + (int32(v>>4)-8)*int32(xb[e+16])
				}
			}
			s += f16Table[binary.LittleEndian.Uint16(blk)] * dx[b] * float32(sum)
		}
		d[j] = s
	}
}

func qdotRowsQ8_0Go(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, _ int) {
	qdotRowsGo(0, w, stride, idx, xq, xd, nb, m, dst)
}

func qdotRowsQ4_0Go(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, _ int) {
	qdotRowsGo(1, w, stride, idx, xq, xd, nb, m, dst)
}

// qcvtGo dequantizes nb blocks of table index q at src into
// dst[:nb·qBlockElems[q]].
func qcvtGo(q int, dst *float32, src unsafe.Pointer, nb int) {
	if nb > 0 {
		// Lengths agree by construction: the error cannot happen.
		_ = format.Dequantize(xs(dst, qBlockElems[q]*nb), unsafe.Slice((*byte)(src), nb*qBlockBytes[q]), qDTypes[q])
	}
}

func qcvtQ8_0Go(dst *float32, src unsafe.Pointer, nb int) { qcvtGo(0, dst, src, nb) }
func qcvtQ4_0Go(dst *float32, src unsafe.Pointer, nb int) { qcvtGo(1, dst, src, nb) }

// qaxpyRowsGo adds Σ_{j<m} a[j]·w_r to dst[:nb·qBlockElems[q]] (rows as in
// dotRows), a block at a time through qcvtGo, skipping a[j] == 0.
func qaxpyRowsGo(q int, dst *float32, w unsafe.Pointer, stride int, idx *int32, a *float32, nb, m int) {
	bb, be := qBlockBytes[q], qBlockElems[q]
	d := xs(dst, be*nb)
	var buf [format.SuperBlockElems]float32
	blk := buf[:be]
	for j, aj := range xs(a, m) {
		if aj == 0 {
			continue
		}
		row := rowAt(w, stride, idx, j)
		for b := 0; b < nb; b++ {
			qcvtGo(q, &blk[0], unsafe.Add(row, b*bb), 1)
			out := d[be*b : be*b+be]
			for e, v := range blk {
				out[e] += aj * v
			}
		}
	}
}

// qaxpy4Go is the portable qaxpy4: four qaxpyRowsGo rows.
func qaxpy4Go(q int, dst *float32, w0, w1, w2, w3 unsafe.Pointer, a0, a1, a2, a3 float32, nb int) {
	a := [4]float32{a0, a1, a2, a3}
	for i, w := range [4]unsafe.Pointer{w0, w1, w2, w3} {
		qaxpyRowsGo(q, dst, w, 0, nil, &a[i], nb, 1)
	}
}

func qaxpy4Q8_0Go(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, nb int) {
	qaxpy4Go(0, dst, w0, w1, w2, w3, a0, a1, a2, a3, nb)
}

func qaxpy4Q4_0Go(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, nb int) {
	qaxpy4Go(1, dst, w0, w1, w2, w3, a0, a1, a2, a3, nb)
}

// qmatMulBlock returns the rows that qmatMulRange dequantizes at a time for
// rows of C columns (C > 0).
func qmatMulBlock(ks *kernelSet, C int) int {
	return max(ks.gr, gemmBlockBytes/(4*C)/ks.gr*ks.gr)
}

// qmatMulRange is matMulRange for block-quantized rows: blocks of rows are
// dequantized to float32 (about gemmBlockBytes of them) and go through the
// float32 micro-kernel, so each weight is decoded once per call.
func qmatMulRange(ks *kernelSet, dst []float32, w Mat, x []float32, T, lo, hi int, s *scratch) {
	C, R, rb := w.Cols, w.Rows, w.RowBytes()
	if C == 0 {
		for t := 0; t < T; t++ {
			clear(dst[t*R+lo : t*R+hi])
		}
		return
	}
	block := qmatMulBlock(ks, C)
	q := qIndex(w.DType)
	for r0 := lo; r0 < hi; r0 += block {
		r1 := min(r0+block, hi)
		ks.qcvt[q](&s.qw[0], unsafe.Add(dataPtr(w), r0*rb), (r1-r0)*C/qBlockElems[q])
		f := Mat{DType: format.F32, Rows: r1 - r0, Cols: C, Data: unsafe.Slice((*byte)(unsafe.Pointer(&s.qw[0])), 4*(r1-r0)*C)}
		matMulRows(ks, dst, R, f, r0, x, T, r0, r1)
	}
}
