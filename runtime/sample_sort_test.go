package runtime

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSortByLogit: sortByLogit gives the comparison sort's permutation
// (logit descending, equal logits by ascending id, −0 equal to +0), and
// topByLogit its first k ids, on
// logits with many ties, both zeros, infinities, subnormals and signs, at
// small and vocabulary sizes, and leaves the logits unchanged.
func TestSortByLogit(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(-1)), float32(math.Inf(1)), 1e-45, -1e-45, math.MaxFloat32, -math.MaxFloat32}
	var s radixScratch
	for _, V := range []int{1, 2, 5, 2049, 49152, 151936} {
		logits := make([]float32, V)
		for i := range logits {
			switch rng.IntN(4) {
			case 0:
				logits[i] = special[rng.IntN(len(special))]
			case 1:
				logits[i] = float32(rng.IntN(7) - 3) // ties
			default:
				logits[i] = float32(rng.NormFloat64() * 10)
			}
		}
		before := append([]float32(nil), logits...)
		want := make([]int, V)
		for i := range want {
			want[i] = i
		}
		sort.Slice(want, func(a, b int) bool {
			la, lb := logits[want[a]], logits[want[b]]
			return la > lb || (la == lb && want[a] < want[b])
		})
		got := make([]int, V)
		sortByLogit(got, logits, &s)
		require.Equal(t, want, got, "V=%d", V)
		for _, k := range []int{1, 2, 40, 128} {
			if k <= V {
				require.Equal(t, want[:k], topByLogit(make([]int, k), logits), "V=%d top %d", V, k)
			}
		}
		require.Equal(t, before, logits)
	}
}
