//go:build !purego

package kernels

import (
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// archQKernels puts the NEON K-quant accumulations (kaccumQ4_KNEON,
// kaccumQ5_KNEON, kaccumQ6_KNEON, kernels_arm64.s) into both arm64 sets:
// the neuron-row sums of down_proj.weight_t (qaxpy4) and prefill's
// dequantization (qcvt) of Q4_K, Q5_K and Q6_K; and their decode dots, the
// integer dots of each super-block's sub-blocks in NEON (kdotQ4_KNEON, …;
// SDOT in the dotprod set: kdotQ4_KDOTPROD, …) scaled in Go (k4Dot, q6Dot,
// as the portable dots are). Tested under qemu (make test-arm64); no arm64
// speed is measured.
func archQKernels() {
	for _, q := range []int{qIndex(format.Q4_K), qIndex(format.Q5_K), qIndex(format.Q6_K)} {
		neonSet.qdotRows[q] = kdotRows(q, false)
		dotprodSet.qdotRows[q] = kdotRows(q, true)
	}
	for _, ks := range declaredSets {
		for _, q := range []int{qIndex(format.Q4_K), qIndex(format.Q5_K), qIndex(format.Q6_K)} {
			ks.qaxpy4[q] = kaxpy4(q, true)
			ks.qcvt[q] = kcvt(q, true)
		}
	}
}

// kaccumSIMD runs the NEON form of kaccumK4Go (six: kaccumQ6Go's, with sc
// holding its 64 scales and off unused).
func kaccumSIMD(dst *float32, q *[4]unsafe.Pointer, sc *[64]float32, off *[32]float32, a *[4]float32, rows int, five, six bool) {
	switch {
	case six:
		kaccumQ6_KNEON(dst, q, sc, a, rows)
	case five:
		kaccumQ5_KNEON(dst, q, (*[32]float32)(sc[:32]), off, a, rows)
	default:
		kaccumQ4_KNEON(dst, q, (*[32]float32)(sc[:32]), off, a, rows)
	}
}

// kdotRows is qdotRows for the K-quant of q table index q over the NEON
// integer dots (dotprod: the SDOT forms), scaled as the portable dots are.
func kdotRows(q int, dotprod bool) func(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, pf int) {
	if q == qIndex(format.Q6_K) {
		return qdotRowsWith(q, func(blk []byte, qx []int8, xd, _ []float32) float32 {
			var sums [16]int32
			kdotNEON(q, dotprod, unsafe.Pointer(&blk[0]), &qx[0], &sums)
			return q6Dot(blk, &sums, xd)
		})
	}
	return qdotRowsWith(q, func(blk []byte, qx []int8, xd, xsum []float32) float32 {
		var sums [16]int32
		kdotNEON(q, dotprod, unsafe.Pointer(&blk[16]), &qx[0], &sums)
		return k4Dot(blk, (*[8]int32)(sums[:8]), xd, xsum)
	})
}

// kdotNEON runs the K-quant q's integer-dot kernel on the levels at lv.
func kdotNEON(q int, dotprod bool, lv unsafe.Pointer, xq *int8, sums *[16]int32) {
	s8 := (*[8]int32)(sums[:8])
	switch {
	case q == qIndex(format.Q4_K) && dotprod:
		kdotQ4_KDOTPROD(lv, xq, s8)
	case q == qIndex(format.Q4_K):
		kdotQ4_KNEON(lv, xq, s8)
	case q == qIndex(format.Q5_K) && dotprod:
		kdotQ5_KDOTPROD(lv, xq, s8)
	case q == qIndex(format.Q5_K):
		kdotQ5_KNEON(lv, xq, s8)
	case dotprod:
		kdotQ6_KDOTPROD(lv, xq, sums)
	default:
		kdotQ6_KNEON(lv, xq, sums)
	}
}
