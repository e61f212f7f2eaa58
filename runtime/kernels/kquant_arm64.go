//go:build !purego

package kernels

import (
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// archQKernels puts the NEON K-quant accumulations (kaccumQ4_KNEON,
// kaccumQ5_KNEON, kaccumQ6_KNEON, kernels_arm64.s) into both arm64 sets:
// the neuron-row sums of down_proj.weight_t (qaxpy4) and prefill's
// dequantization (qcvt) of Q4_K, Q5_K and Q6_K. Their decode dots stay
// portable. Tested under qemu (make test-arm64); no arm64 speed is measured.
func archQKernels() {
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
