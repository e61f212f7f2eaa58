//go:build !purego

package kernels

import (
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// archQKernels puts this architecture's K-quant kernels (kquant_amd64.s)
// into its sets before fillPortableQ fills the rest: AVX2's Q4_K, Q5_K and
// Q6_K decode dots, used by the AVX-512 and VNNI sets too (one 256-bit step per 32
// weights already outruns memory, as for Q4_0).
func archQKernels() {
	archKAccum()
	for _, ks := range []*kernelSet{avx2Set, avx512Set, avxvnniSet, avx512vnniSet} {
		ks.qdotRows[qIndex(format.Q4_K)] = qdotRowsQ4_KAVX2
		ks.qdotRows[qIndex(format.Q5_K)] = qdotRowsQ5_KAVX2
		ks.qdotRows[qIndex(format.Q6_K)] = qdotRowsQ6_KAVX2
	}
}

// archKAccum puts the AVX2 K-quant accumulations (kaccumQ4_KAVX2,
// kaccumQ5_KAVX2, kaccumQ6_KAVX2) into the sets: the neuron-row sums of
// down_proj.weight_t (qaxpy4) and the dequantization of prefill (qcvt).
// Llama-3.2-1B's down_proj.weight_t (8192 × 2048), one thread, AMD EPYC
// (Zen 5): AddRows Q4_K 0.49 → 4.3 GB/s and Q5_K 0.48 → 3.3 GB/s against
// the portable kernels (format.Dequantize a block at a time), a 32-token
// MatMul 1633 → 3141 and 1351 → 2901 tokens/s.
func archKAccum() {
	for _, ks := range []*kernelSet{avx2Set, avx512Set, avxvnniSet, avx512vnniSet} {
		for _, q := range []int{qIndex(format.Q4_K), qIndex(format.Q5_K)} {
			five := q == qIndex(format.Q5_K)
			ks.qaxpy4[q] = kaxpy4(q, five)
			ks.qcvt[q] = kcvt(q, five)
		}
		ks.qaxpy4[qIndex(format.Q6_K)] = kaxpy4Q6
		ks.qcvt[qIndex(format.Q6_K)] = kcvtQ6
	}
}

// kaxpy4 returns qaxpy4 for Q4_K or Q5_K (q table index q; five: Q5_K's
// kernel): per super-block, each row's sub-block scales d·sc_j and minimums
// dmin·m_j (kScales), then the kernel over the levels.
func kaxpy4(q int, five bool) func(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, nb int) {
	bb := qBlockBytes[q]
	return func(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, nb int) {
		ws, as := [4]unsafe.Pointer{w0, w1, w2, w3}, [4]float32{a0, a1, a2, a3}
		var lv [4]unsafe.Pointer
		var sc, off [32]float32
		for b := range nb {
			for r, w := range ws {
				blk := (*[16]byte)(unsafe.Add(w, b*bb))
				kScales(blk, sc[8*r:8*r+8], off[8*r:8*r+8])
				lv[r] = unsafe.Add(unsafe.Pointer(blk), 16)
			}
			d := (*float32)(unsafe.Add(unsafe.Pointer(dst), 4*256*b))
			if five {
				kaccumQ5_KAVX2(d, &lv, &sc, &off, &as, 4)
			} else {
				kaccumQ4_KAVX2(d, &lv, &sc, &off, &as, 4)
			}
		}
	}
}

// kcvt returns qcvt for Q4_K or Q5_K: each block's weights, dequantized
// into cleared dst as format.Dequantize dequantizes them.
func kcvt(q int, five bool) func(dst *float32, src unsafe.Pointer, nb int) {
	bb := qBlockBytes[q]
	return func(dst *float32, src unsafe.Pointer, nb int) {
		var lv [4]unsafe.Pointer
		var sc, off [32]float32
		one := [4]float32{1}
		d := xs(dst, 256*nb)
		clear(d)
		for b := range nb {
			blk := (*[16]byte)(unsafe.Add(src, b*bb))
			kScales(blk, sc[:8], off[:8])
			lv[0] = unsafe.Add(unsafe.Pointer(blk), 16)
			if five {
				kaccumQ5_KAVX2(&d[256*b], &lv, &sc, &off, &one, 1)
			} else {
				kaccumQ4_KAVX2(&d[256*b], &lv, &sc, &off, &one, 1)
			}
		}
	}
}

// kScales sets sc[j] = d·sc_j and off[j] = dmin·m_j for the eight
// sub-blocks of the Q4_K / Q5_K super-block whose first 16 bytes (d, dmin,
// the 6-bit scales and minimums) are blk, rounded as format.Dequantize
// rounds them.
func kScales(blk *[16]byte, sc, off []float32) {
	d, dmin := f16(blk[0:2]), f16(blk[2:4])
	for j := range 8 {
		s, m := scaleMinK4(j, blk[4:16])
		sc[j] = d * float32(s)
		off[j] = dmin * float32(m)
	}
}

// kaxpy4Q6 is qaxpy4 for Q6_K: per super-block each row's sub-block scales
// d·sc_j, then kaccumQ6_KAVX2.
func kaxpy4Q6(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, nb int) {
	ws, as := [4]unsafe.Pointer{w0, w1, w2, w3}, [4]float32{a0, a1, a2, a3}
	var lv [4]unsafe.Pointer
	var sc [64]float32
	for b := range nb {
		for r, w := range ws {
			lv[r] = unsafe.Add(w, b*210)
			q6Scales((*[210]byte)(lv[r]), sc[16*r:16*r+16])
		}
		kaccumQ6_KAVX2((*float32)(unsafe.Add(unsafe.Pointer(dst), 4*256*b)), &lv, &sc, &as, 4)
	}
}

// kcvtQ6 is qcvt for Q6_K: each block dequantized into cleared dst.
func kcvtQ6(dst *float32, src unsafe.Pointer, nb int) {
	var lv [4]unsafe.Pointer
	var sc [64]float32
	one := [4]float32{1}
	d := xs(dst, 256*nb)
	clear(d)
	for b := range nb {
		lv[0] = unsafe.Add(src, b*210)
		q6Scales((*[210]byte)(lv[0]), sc[:16])
		kaccumQ6_KAVX2(&d[256*b], &lv, &sc, &one, 1)
	}
}

// q6Scales sets sc[j] = d·sc_j for the 16 sub-blocks of a Q6_K block,
// rounded as format.Dequantize rounds them.
func q6Scales(blk *[210]byte, sc []float32) {
	d := f16(blk[208:210])
	for j := range 16 {
		sc[j] = d * float32(int8(blk[192+j]))
	}
}
