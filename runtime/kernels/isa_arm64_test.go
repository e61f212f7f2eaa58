//go:build !purego

package kernels

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/cpu"
)

// TestDetectARM64: the dotprod set is offered exactly when HWCAP announces
// the dot product (make test-arm64 runs under a CPU with it and one without).
func TestDetectARM64(t *testing.T) {
	t.Logf("asimddp %v", cpu.ARM64.HasASIMDDP)
	require.Equal(t, cpu.ARM64.HasASIMDDP, slices.Contains(kernelSets(), dotprodSet))
	require.True(t, slices.Contains(kernelSets(), neonSet))
}
