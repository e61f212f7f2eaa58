//go:build !purego

package kernels

import (
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// archQKernels puts this architecture's K-quant kernels (kquant_amd64.s)
// into its sets before fillPortableQ fills the rest: AVX2's Q4_K, Q5_K and
// Q6_K decode dots, used by the AVX-512 and VNNI sets too except for Q5_K's,
// which have a 512-bit form (qdotRowsQ5_KAVX512, VNNI or not: faster by a
// tenth from L2 on an Intel Xeon, where Q4_K's was not, asmgen records the
// figures; on Zen 3 the AVX2 Q4_K dot runs from cache at 17–19 GB/s, near a
// core's 21–23 GB/s read; Q6_K's would need multi-token forms that agree with
// it bit for bit, as the AVX2 ones do), and the multi-token Q6_K
// dots of MatVecBatch (batch.go: such as a Q4_0 or K-quant file's output
// projection).
func archQKernels() {
	archKAccum()
	for _, ks := range []*kernelSet{avx2Set, avx512Set, avxvnniSet, avx512vnniSet} {
		ks.qdotRows[qIndex(format.Q4_K)] = qdotRowsQ4_KAVX2
		ks.qdotRows[qIndex(format.Q5_K)] = qdotRowsQ5_KAVX2
		ks.qdotRows[qIndex(format.Q6_K)] = qdotRowsQ6_KAVX2
		ks.kdotRowsB[0][qIndex(format.Q6_K)] = qdotRowsBT2Q6_KAVX2
		ks.kdotRowsB[1][qIndex(format.Q6_K)] = qdotRowsBT3Q6_KAVX2
		ks.kdotRowsB[2][qIndex(format.Q6_K)] = qdotRowsBT4Q6_KAVX2
	}
	avx512Set.qdotRows[qIndex(format.Q5_K)] = qdotRowsQ5_KAVX512
	avx512vnniSet.qdotRows[qIndex(format.Q5_K)] = qdotRowsQ5_KAVX512VNNI
}

// archKAccum puts the AVX2 K-quant kernels into the sets: the dequantization
// of prefill (qcvt, through kaccumQ4_KAVX2, kaccumQ5_KAVX2, kaccumQ6_KAVX2
// per super-block) and the neuron-row sums of down_proj.weight_t (qaxpy4,
// below). First form, per super-block for both, on Llama-3.2-1B's down_proj.weight_t (8192 × 2048), one thread, AMD EPYC
// (Zen 5): AddRows Q4_K 0.49 → 4.3 GB/s and Q5_K 0.48 → 3.3 GB/s against
// the portable kernels as they were (format.Dequantize a block at a time),
// Q6_K 0.25 → 3.5 GB/s; a 32-token MatMul 1633 → 3141, 1351 → 2901 and
// 716 → 2618 tokens/s.
//
// The neuron-row sums are one kernel over whole rows (qaxpy4Q4_KAVX2,
// qaxpy4Q5_KAVX2, qaxpy4Q6_KAVX2: the scales unpacked in the kernel, Go's
// share per super-block was the cost): AddRows of Llama-3.2-1B's
// down_proj.weight_t shape (8192 × 2048), 1 thread, Zen 5: Q4_K 3.1 → 11.4
// GB/s (Q4_0's 11.2), Q5_K 3.0 → 6.1, Q6_K 3.3 → 9.6. Prefill's
// dequantization (qcvt) keeps the per-super-block form.
//
// The AVX-512 sets take the ZMM forms (qaxpy4Q4_KAVX512, …: the same
// arithmetic, sixteen weights a step). Same benchmark, SINF_KERNELS=avx2
// against avx512vnni alternated, medians of 3: every row Q4_K 10.9 → 15.1
// GB/s, Q5_K 5.9 → 11.2, Q6_K 8.7 → 13.1; a random half of the rows 7.0 →
// 9.8, 5.3 → 8.6, 7.3 → 9.2.
func archKAccum() {
	for _, ks := range []*kernelSet{avx2Set, avx512Set, avxvnniSet, avx512vnniSet} {
		for _, q := range []int{qIndex(format.Q4_K), qIndex(format.Q5_K), qIndex(format.Q6_K)} {
			ks.qcvt[q] = kcvt(q, true)
		}
		ks.qaxpy4[qIndex(format.Q4_K)] = qaxpy4Q4_KAVX2
		ks.qaxpy4[qIndex(format.Q5_K)] = qaxpy4Q5_KAVX2
		ks.qaxpy4[qIndex(format.Q6_K)] = qaxpy4Q6_KAVX2
	}
	for _, ks := range []*kernelSet{avx512Set, avx512vnniSet} {
		ks.qaxpy4[qIndex(format.Q4_K)] = qaxpy4Q4_KAVX512
		ks.qaxpy4[qIndex(format.Q5_K)] = qaxpy4Q5_KAVX512
		ks.qaxpy4[qIndex(format.Q6_K)] = qaxpy4Q6_KAVX512
	}
}

// kaccumSIMD runs the AVX2 form of kaccumK4Go (six: kaccumQ6Go's, with sc
// holding its 64 scales and off unused).
func kaccumSIMD(dst *float32, q *[4]unsafe.Pointer, sc *[64]float32, off *[32]float32, a *[4]float32, rows int, five, six bool) {
	switch {
	case six:
		kaccumQ6_KAVX2(dst, q, sc, a, rows)
	case five:
		kaccumQ5_KAVX2(dst, q, (*[32]float32)(sc[:32]), off, a, rows)
	default:
		kaccumQ4_KAVX2(dst, q, (*[32]float32)(sc[:32]), off, a, rows)
	}
}
