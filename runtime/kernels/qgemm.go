package kernels

import "unsafe"

// Integer prefill (MatMul on Q8_0 and Q4_0 rows, sets with qgemm): x is
// quantized once per call to int8 blocks (quantizeX, as for decode), the
// weight rows are repacked eight (or sixteen: ks.qrows) at a time so that a
// register's 32-bit lanes are rows (qpack), and the qgemm micro-kernel
// multiplies those rows by four tokens in integers, converting once per
// block. Each weight is repacked
// once per call and read from the packed copy by every group of four tokens.
// The packed layout is internal/asmgen/qgemm.go's; the results carry x's
// rounding as MatVec's do (at most max|x| of a block / 254 per element).

// qgemmKernels is a set's integer prefill kernels (kernelSet.qpack, qgemm,
// qrows).
type qgemmKernels struct {
	pack [2]func(dst *byte, w unsafe.Pointer, stride int, nb int)
	gemm [2]qgemmFunc
	rows int
}

// qgemmFunc is the type of a set's qgemm kernels.
type qgemmFunc = func(pw *byte, xq *int8, xstride int, xc *float32, cstride int, nb int, dst *float32, dstride int, pf unsafe.Pointer)

// qpackStride is the bytes of one packed block of eight rows (a set with
// qrows 16 packs sixteen rows in twice that).
const qpackStride = 288

// qpackBytes is about the size of the packed rows qmatMulInt keeps while every
// token goes over them (L2-resident).
const qpackBytes = 128 << 10

// qgemmRows returns the rows qmatMulInt packs at a time for rows of nb
// blocks: a whole number of the set's groups of qrows rows, at least one.
func (ks *kernelSet) qgemmRows(nb int) int {
	return ks.qrows * max(1, qpackBytes/(nb*qpackStride*ks.qrows/8))
}

// intPrefill reports whether ks multiplies w's rows in integers in MatMul.
func (ks *kernelSet) intPrefill(w Mat) bool {
	if !w.DType.Quantized() || w.DType.KQuant() {
		return false
	}
	q := qIndex(w.DType)
	return q < len(ks.qgemm) && ks.qgemm[q] != nil && w.Cols > 0
}

// qgemmScratch is the float32s of worker scratch qmatMulInt packs rows of
// cols columns into.
func (ks *kernelSet) qgemmScratch(cols int) int {
	nb := cols / 32
	return (ks.qgemmRows(nb)*nb*qpackStride/8 + 3) / 4
}

// prepareIntX turns quantizeX's Q4_0 offset corrections 8·d_x·Σ q_x (xd[nb+b]
// of each of T tokens) into Q8_0's, 128·d_x·Σ q_x, for the qgemm kernels
// (which subtract off·Σ x for weights stored as w + off).
func prepareIntX(xd []float32, nb, T int) {
	for t := range T {
		for i, v := range xd[t*2*nb+nb : (t+1)*2*nb] {
			xd[t*2*nb+nb+i] = 16 * v
		}
	}
}

// qmatMulInt is qmatMulRange in integers: rows [lo, hi) of w by T tokens of
// x quantized (xq, xd as Pool.quantizeX leaves them, Q8_0's corrections
// through prepareIntX). Rows are packed qgemmRows at a time; the last
// tokens short of four and the last rows short of a group (ks.qrows) go
// through the decode dots (qdotRows) on the same quantized x.
func qmatMulInt(ks *kernelSet, dst []float32, w Mat, T, lo, hi int, s *scratch, xq []int8, xd []float32) {
	C, R, rb := w.Cols, w.Rows, w.RowBytes()
	nb, q := C/32, qIndex(w.DType)
	nq, nd := 2*C, 2*nb
	base := dataPtr(w)
	pack := unsafe.Slice((*byte)(unsafe.Pointer(&s.qw[0])), 4*len(s.qw))
	G := ks.qrows
	gstride := nb * qpackStride * G / 8 // bytes of one packed group
	dots := func(r0, n int, t int) {
		ks.qdotRows[q](unsafe.Add(base, r0*rb), rb, nil, &xq[t*nq], &xd[t*nd], nb, n, &dst[t*R+r0], 0)
	}
	block := ks.qgemmRows(nb)
	whole := func(n int) int { return n / G * G }
	r0 := lo
	for ; hi-r0 >= G; r0 += min(block, whole(hi-r0)) {
		ng := min(block, whole(hi-r0)) / G
		for g := range ng {
			ks.qpack[q](&pack[g*gstride], unsafe.Add(base, (r0+G*g)*rb), rb, nb)
		}
		// While the tokens go over these rows, the kernel calls prefetch
		// the next ones, nb lines each, in order (the last lines again
		// once they are covered; the packed rows, in cache, after the
		// last rows).
		next, left := unsafe.Add(base, (r0+G*ng)*rb), min(block, whole(hi-r0-G*ng))*rb
		pf := func(k int) unsafe.Pointer {
			if left < nb*64 {
				return unsafe.Pointer(&pack[0])
			}
			return unsafe.Add(next, min(k*nb*64, left-nb*64))
		}
		k, t := 0, 0
		for ; t+4 <= T; t += 4 {
			for g := range ng {
				ks.qgemm[q](&pack[g*gstride], &xq[t*nq], nq, &xd[t*nd+nb], 4*nd, nb, &dst[t*R+r0+G*g], 4*R, pf(k))
				k++
			}
		}
		for ; t < T; t++ {
			dots(r0, G*ng, t)
		}
	}
	if r0 < hi {
		for t := range T {
			dots(r0, hi-r0, t)
		}
	}
}
