package runtime

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKthLargest(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3, 5, 17, 100, 1000} {
		for _, levels := range []int{2, 7, 1 << 20} { // many ties, some, none
			s := make([]float32, n)
			for i := range s {
				s[i] = float32(rng.IntN(levels)) / 8
			}
			desc := slices.Clone(s)
			slices.SortFunc(desc, func(a, b float32) int { return -cmp.Compare(a, b) })
			for _, k := range []int{1, n / 3, n / 2, n} {
				if k < 1 {
					continue
				}
				require.Equal(t, desc[k-1], kthLargest(slices.Clone(s), k), "n=%d levels=%d k=%d", n, levels, k)
			}
		}
	}
}

// TestCounterMatchesSort compares Counter with the definition: sort a token's
// positive activations descending (ties: lower row), count the first
// round(α·P).
func TestCounterMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const kept, T = 301, 13
	act := make([]float32, T*kept)
	for i := range act {
		act[i] = float32(rng.IntN(9)-4) / 4 // zeros, negatives and many ties
	}
	for _, alpha := range []float64{0.05, 0.2, 0.5, 1} {
		c := &Counter{Alpha: alpha, Counts: [][]int32{make([]int32, kept)}}
		c.ObserveFFN(0, act, T, nil)
		want := make([]int32, kept)
		for tok := 0; tok < T; tok++ {
			a := act[tok*kept : (tok+1)*kept]
			var order []int
			for j, v := range a {
				if v > 0 {
					order = append(order, j)
				}
			}
			slices.SortStableFunc(order, func(x, y int) int { return -cmp.Compare(a[x], a[y]) })
			for _, j := range order[:RoundCount(alpha, len(order))] {
				want[j]++
			}
		}
		require.Equal(t, want, c.Counts[0], "alpha %v", alpha)
	}
}
