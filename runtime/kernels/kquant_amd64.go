//go:build !purego

package kernels

import "github.com/selectinfer/sinf/format"

// archQKernels puts this architecture's K-quant kernels (kquant_amd64.s)
// into its sets before fillPortableQ fills the rest: AVX2's Q4_K, Q5_K and
// Q6_K decode dots, used by the AVX-512 and VNNI sets too (one 256-bit step per 32
// weights already outruns memory, as for Q4_0).
func archQKernels() {
	for _, ks := range []*kernelSet{avx2Set, avx512Set, avxvnniSet, avx512vnniSet} {
		ks.qdotRows[qIndex(format.Q4_K)] = qdotRowsQ4_KAVX2
		ks.qdotRows[qIndex(format.Q5_K)] = qdotRowsQ5_KAVX2
		ks.qdotRows[qIndex(format.Q6_K)] = qdotRowsQ6_KAVX2
	}
}
