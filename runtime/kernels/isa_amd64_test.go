//go:build !purego

package kernels

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/cpu"
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
