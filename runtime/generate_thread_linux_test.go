package runtime_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// TestGenerateOneThread: Session.Generate (and Score, by the same lock) keeps the calling
// goroutine on one OS thread (the pool's caller; see lockThread) through
// a generation whose OnToken blocks, as a server's handler writing a
// stream does, and release it after.
func TestGenerateOneThread(t *testing.T) {
	_, m := load(t, "stories260k")
	pool := kernels.NewPool(2)
	defer pool.Close()
	s := m.NewSession(pool, 64)
	tids := map[int]int{}
	_, err := s.Generate([]int{1, 2, 3}, runtime.GenerateOptions{MaxTokens: 40, OnToken: func(int) {
		tids[syscall.Gettid()]++
		time.Sleep(50 * time.Microsecond) // parks the goroutine
	}})
	require.NoError(t, err)
	require.Len(t, tids, 1, "OnToken ran on these OS threads (calls per thread id): %v", tids)
}
