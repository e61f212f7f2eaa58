//go:build !purego

package kernels

import (
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/cpu"

	"github.com/selectinfer/sinf/format"
)

// TestDetectAMD64: each set is offered exactly when CPUID has its features.
func TestDetectAMD64(t *testing.T) {
	x := cpu.X86
	base := x.HasAVX2 && x.HasFMA && x.HasF16C
	avx512 := base && x.HasAVX512F && x.HasAVX512BW
	sets := kernelSets()
	require.Equal(t, base, slices.Contains(sets, avx2Set))
	require.Equal(t, base && x.HasAVXVNNI, slices.Contains(sets, avxvnniSet))
	require.Equal(t, avx512, slices.Contains(sets, avx512Set))
	require.Equal(t, avx512 && x.HasAVX512VL && x.HasAVX512VNNI, slices.Contains(sets, avx512vnniSet))
}

// TestZMMMatchesAVX2: the AVX-512 sets' ZMM forms of the neuron-row sums do
// each element's arithmetic in the AVX2 forms' order, so their results are
// the AVX2 forms' bit for bit.
func TestZMMMatchesAVX2(t *testing.T) {
	if !slices.Contains(kernelSets(), avx512Set) {
		t.Skip("no AVX-512 here")
	}
	rng := rand.New(rand.NewPCG(61, 62))
	axpys := map[format.DType][2]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, nb int){
		format.Q8_0: {qaxpy4Q8_0AVX512, qaxpy4Q8_0AVX2}, format.Q4_0: {qaxpy4Q4_0AVX512, qaxpy4Q4_0AVX2},
		format.Q4_K: {qaxpy4Q4_KAVX512, qaxpy4Q4_KAVX2}, format.Q5_K: {qaxpy4Q5_KAVX512, qaxpy4Q5_KAVX2},
		format.Q6_K: {qaxpy4Q6_KAVX512, qaxpy4Q6_KAVX2},
	}
	for dt, f := range axpys {
		n := 512
		m := randQMat(t, rng, dt, 4, n)
		w := func(r int) unsafe.Pointer { return unsafe.Add(dataPtr(m.Mat), r*m.RowBytes()) }
		got, want := randVec(rng, n), make([]float32, n)
		copy(want, got)
		nb := n / blockElems(dt)
		f[0](&got[0], w(0), w(1), w(2), w(3), w(0), w(1), w(2), w(3), 0.5, -1.25, 3, 0.125, nb)
		f[1](&want[0], w(0), w(1), w(2), w(3), w(0), w(1), w(2), w(3), 0.5, -1.25, 3, 0.125, nb)
		require.Equal(t, want, got, "%v neuron-row sums", dt)
	}
}
