package runcmd

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/runtime"
)

// TestFinishReason: EOS wins over the token limit (Generate checks it
// first); a run short of both stopped at the context end.
func TestFinishReason(t *testing.T) {
	eos := []int{2, 303}
	for _, c := range []struct {
		ids  []int
		max  int
		want string
	}{
		{[]int{5, 303}, 8, "eos"},
		{[]int{5, 2}, 2, "eos"},
		{[]int{5, 6}, 2, "length"},
		{nil, 0, "length"},
		{[]int{5, 6, 7}, 8, "context"},
	} {
		require.Equal(t, c.want, finishReason(runtime.Result{IDs: c.ids}, eos, c.max), "%v max %d", c.ids, c.max)
	}
}
