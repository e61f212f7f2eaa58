//go:build !purego

package kernels

import "github.com/selectinfer/sinf/format"

// archQKernels puts this architecture's K-quant kernels (kquant_amd64.s)
// into its sets before fillPortableQ fills the rest: AVX2's Q4_K, Q5_K and
// Q6_K decode dots, used by the AVX-512 set too (one 256-bit step per 32
// weights already outruns memory, as for Q4_0).
func archQKernels() {
	q := qIndex(format.Q4_K)
	avx2Set.qdotRows[q] = qdotRowsQ4_KAVX2
	avx512Set.qdotRows[q] = qdotRowsQ4_KAVX2
	q = qIndex(format.Q5_K)
	avx2Set.qdotRows[q] = qdotRowsQ5_KAVX2
	avx512Set.qdotRows[q] = qdotRowsQ5_KAVX2
	q = qIndex(format.Q6_K)
	avx2Set.qdotRows[q] = qdotRowsQ6_KAVX2
	avx512Set.qdotRows[q] = qdotRowsQ6_KAVX2
}
