package scores

import (
	"cmp"
	"math"
	"slices"
)

// Rank returns the neuron indices ordered by decreasing score; equal scores
// keep the lower index first (so -0 and +0 tie), and NaN ranks after every
// number. The order is fully determined by the scores.
func Rank(scores []float64) []int32 {
	idx := make([]int32, len(scores))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int {
		// cmp.Compare orders NaN below every number; reversed, NaN comes last.
		if c := cmp.Compare(scores[b], scores[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return idx
}

// Ranking returns the ranking of layer's neurons (see Rank).
func (f *File) Ranking(layer int) []int32 { return Rank(f.Scores[layer]) }

// TopCount returns how many of n neurons the top fraction frac selects:
// frac·n rounded to the nearest integer, halves away from zero, within
// [0, n]. A frac that is NaN or ≤ 0 selects none; ≥ 1 selects all.
func TopCount(n int, frac float64) int {
	if !(frac > 0) {
		return 0
	}
	if frac >= 1 {
		return n
	}
	k := int(math.Round(frac * float64(n)))
	return min(max(k, 0), n)
}

// TopSet returns, for each layer, the top fraction frac of its neurons
// (TopCount of them), in ranking order: TopSet(f, frac)[l] is the prefix of
// f.Ranking(l).
func TopSet(f *File, frac float64) [][]int32 {
	sets := make([][]int32, f.Layers())
	for l := range sets {
		r := f.Ranking(l)
		k := TopCount(len(r), frac)
		sets[l] = r[:k:k]
	}
	return sets
}
