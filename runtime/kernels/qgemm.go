package kernels

import (
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// Integer prefill (MatMul on block-quantized rows, sets with qgemm): x is
// quantized once per call to int8 blocks (Pool.quantizeX, as for decode;
// the K-quants' with one scale per 256), the weight rows are repacked eight
// (or sixteen: ks.qrows) at a time so that a register's 32-bit lanes are
// rows (qpack), and the qgemm micro-kernel multiplies those rows by four
// tokens in integers, converting once per block of 32. Each weight is
// repacked once per call and read from the packed copy by every group of
// four tokens. The packed layout is internal/asmgen/qgemm.go's: per block of
// the rows, d_w and m_w per row and the levels u, weight d_w·u − 8·m_w. Q8_0
// and Q4_0 pack in assembly, and on amd64 Q5_0, Q5_1, Q4_K and Q5_K; the
// others dequantize to float32 instead (Q6_K's scales are per 16). The results
// carry x's rounding as MatVec's do (at most max|x| of a block, or of a
// K-quant's 256, / 254 per element).

// qgemmKernels is a set's integer prefill kernels (kernelSet.qpack, qgemm,
// qrows).
type qgemmKernels struct {
	pack [nq]qpackFunc
	gemm [nq]qgemmFunc
	rows int
}

// qgemmFunc is the type of a set's qgemm kernels.
type qgemmFunc = func(pw *byte, xq *int8, xstride int, xc *float32, cstride int, nb int, dst *float32, dstride int, pf unsafe.Pointer)

// qpackStride is the bytes of one packed block of eight rows (a set with
// qrows 16 packs sixteen rows in twice that): 40 a row.
const qpackStride = 320

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
	if !w.DType.Quantized() || w.Cols == 0 {
		return false
	}
	if w.DType.Interleaved() { // packed from the file's groups (interleave.go)
		q := qIndex(w.DType.Base())
		return ks.qpackX[q] != nil && ks.qgemm[q] != nil
	}
	return ks.qgemm[qIndex(w.DType)] != nil
}

// xdotPrefill reports whether MatMul of w runs as MatVecBatch: Q4_0X16
// rows on a set with four-token interleaved dots (qdotXB; the dotprod set's
// two-token form is unmeasured against its SDOT GEMM), which unpack each
// block column once for four tokens and take the next four from L1 or L2,
// where qmatMulInt first repacks every block (qpackX, 640 bytes for 288).
// 2-vCPU Intel Xeon (AVX512-VNNI), dense Q4_0 files, 2 threads, prefill
// tokens/s repacked → batched: SmolLM2-135M 651 → 797 at a 5-token prompt,
// 1144 → 1285 at 16, 1543 → 1650 at 64, 1132 → 1230 at 512; Llama-3.2-1B
// 78.7 → 86.2 at 5, 213 → 244 at 256, 149 → 162 at 1024; at 1 thread
// SmolLM2 418 → 540 at 5, 1020 → 1029 at 64, 900 → 893 at 256. The AVX2
// set (SINF_KERNELS=avx2): 503 → 716 at 5, 996 → 1110 at 64, 793 → 931 at
// 256 (1B 121 → 153). Q8_0X16 keeps the repacked path: its 1B prefill at 64
// tokens went 201 → 175 batched (its block columns cost the dots no unpacking
// to share); so does the AVX-VNNI set, whose qgemm is VPDPBUSD and which has
// no multi-token interleaved dots (SmolLM2 at 64: 1172 repacked, 943 as
// per-token MatVecs).
func (ks *kernelSet) xdotPrefill(w Mat) bool {
	return w.DType == format.Q4_0X16 && ks.qdotXB[2][qIndex(format.Q4_0)] != nil
}

// qgemmScratch is the float32s of worker scratch qmatMulInt packs rows of
// cols columns into.
func (ks *kernelSet) qgemmScratch(cols int) int {
	nb := cols / 32
	rows := (ks.qgemmRows(nb) + xrows - 1) / xrows * xrows // interleaved rows pack whole groups
	return (rows*nb*qpackStride/8 + 3) / 4
}

// qmatMulInt is qmatMulRange in integers: rows [lo, hi) of w by T tokens of
// x quantized (xq, xd as Pool.quantizeX leaves them). Rows are packed
// qgemmRows at a time; the last tokens short of four and the last rows short
// of a group (ks.qrows) go through the decode dots (qdotRows) on the same
// quantized x.
func qmatMulInt(ks *kernelSet, dst []float32, w Mat, T, lo, hi int, s *scratch, xq []int8, xd []float32) {
	C, R, rb := w.Cols, w.Rows, w.RowBytes()
	nb, q := C/32, qIndex(w.DType.Base()) // blocks of 32, K-quants' sub-blocks too
	x16 := w.DType.Interleaved()          // groups packed by qpackX; the tail rows are plain
	nq, nd := 2*C, 2*nb
	base := dataPtr(w)
	pack := unsafe.Slice((*byte)(unsafe.Pointer(&s.qw[0])), 4*len(s.qw))
	G := ks.qrows
	gstride := nb * qpackStride * G / 8 // bytes of one packed group
	dots := func(r0, n int, t int) {    // nb of the dtype's blocks
		ks.qdotRows[q](unsafe.Add(base, r0*rb), rb, nil, &xq[t*nq], &xd[t*nd], C/qBlockElems[q], n, &dst[t*R+r0], 0)
	}
	block := ks.qgemmRows(nb)
	full := R // rows before the plain tail of interleaved rows
	if x16 {
		full = R / xrows * xrows
		block = (block + xrows - 1) / xrows * xrows // eight-row groups in pairs
	}
	// pack packs the G rows from row as packed group g: an interleaved
	// group's by qpackX (with G = 8 both halves, groups g and g+1), plain
	// rows by qpack.
	pack1 := func(g, row int) {
		switch {
		case !x16 || row >= full:
			ks.qpack[q](&pack[g*gstride], unsafe.Add(base, row*rb), rb, nb)
		case G == xrows || row%xrows == 0:
			ks.qpackX[q](&pack[g*gstride], unsafe.Add(base, row*rb), nb)
		}
	}
	// xdots is dots, interleaved rows through MatVec's xmatVecRange.
	xdots := func(r0, n, t int) {
		if x16 {
			xmatVecRange(ks, dst[t*R:(t+1)*R], w, nil, xq[t*nq:], xd[t*nd:], r0, r0+n)
			return
		}
		dots(r0, n, t)
	}
	whole := func(n int) int { return n / G * G }
	r0 := lo
	for ; hi-r0 >= G; r0 += min(block, whole(hi-r0)) {
		ng := min(block, whole(hi-r0)) / G
		for g := range ng {
			pack1(g, r0+G*g)
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
			xdots(r0, G*ng, t)
		}
	}
	if r0 < hi {
		for t := range T {
			dots(r0, hi-r0, t)
		}
	}
}

// qpackFunc is the type of a set's qpack kernels.
type qpackFunc = func(dst *byte, w unsafe.Pointer, stride int, nb int)

// qgemmTable is a set's qgemm table: g for every dtype with a packer in
// pack but Q8_0 without q8 (a VPMADDUBSW form would saturate its w+128 times
// x). Dtypes without an assembly packer keep the float32 path: packing in
// Go (qpackGo, the tests' reference for the K-quants) cost more than it
// saved (SmolLM2-135M Q4_K_M prefill, whose 576-wide rows are Q5_0/Q5_1:
// 600 → 524 tokens/s; 979 with the assembly packers).
func qgemmTable(g qgemmFunc, pack [nq]qpackFunc, q8 bool) (t [nq]qgemmFunc) {
	for q := range nq {
		if pack[q] != nil && (q8 || q != 0) {
			t[q] = g
		}
	}
	return t
}
