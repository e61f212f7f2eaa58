package runcmd

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGroupThreads: --batch-groups deals the threads evenly, the first
// groups one more, never more groups than threads nor fewer than one.
func TestGroupThreads(t *testing.T) {
	require.Equal(t, []int{2}, groupThreads(2, 1))
	require.Equal(t, []int{1, 1}, groupThreads(2, 2))
	require.Equal(t, []int{1, 1}, groupThreads(2, 4))
	require.Equal(t, []int{2, 2, 1}, groupThreads(5, 3))
	require.Equal(t, []int{6}, groupThreads(6, 0))
}
