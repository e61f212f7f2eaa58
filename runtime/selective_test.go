package runtime

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/runtime/kernels"
)

// TestKthKey checks the radix select against a sort: the k-th largest key
// and the count above it, on vectors with many ties, some and none, with
// negative values, −0 and +0; and orderKey's order against the values'.
func TestKthKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3, 5, 17, 100, 1000, 5000} {
		for _, levels := range []int{2, 7, 1 << 20} { // many ties, some, none
			s := make([]float32, n)
			for i := range s {
				s[i] = float32(rng.IntN(levels)-levels/3) / 8
				if s[i] == 0 && rng.IntN(2) == 0 {
					s[i] = float32(math.Copysign(0, -1))
				}
			}
			desc := slices.Clone(s)
			slices.SortFunc(desc, func(a, b float32) int { return -cmp.Compare(a, b) })
			for _, k := range []int{1, n / 3, n / 2, n} {
				if k < 1 {
					continue
				}
				keys := make([]uint32, n)
				for i, v := range s {
					keys[i] = orderKey(v)
				}
				th, above, equal := kthKey(keys, make([]uint32, n), k)
				want := desc[k-1]
				require.Equal(t, want, fromKey(th), "n=%d levels=%d k=%d", n, levels, k)
				require.Equal(t, orderKey(want), th)
				wantAbove, wantEqual := 0, 0
				for _, v := range s {
					wantAbove += b2i(v > want)
					wantEqual += b2i(v == want)
				}
				require.Equal(t, wantAbove, above, "n=%d levels=%d k=%d", n, levels, k)
				require.Equal(t, wantEqual, equal, "n=%d levels=%d k=%d", n, levels, k)
			}
		}
	}
	vals := []float32{float32(math.Inf(-1)), -3e38, -1, -1e-45, 0, 1e-45, 1, 3e38, float32(math.Inf(1))}
	for i := range vals {
		for j := range vals {
			require.Equal(t, cmp.Compare(vals[i], vals[j]), cmp.Compare(orderKey(vals[i]), orderKey(vals[j])), "%v %v", vals[i], vals[j])
		}
		require.Equal(t, vals[i], fromKey(orderKey(vals[i])))
	}
	require.Equal(t, orderKey(0), orderKey(float32(math.Copysign(0, -1))))
}

// TestTopScoreNaN: a NaN score ranks by its bits (positive above +Inf,
// negative below −Inf; by magnitude both above +Inf) and the pick still has
// k rows.
func TestTopScoreNaN(t *testing.T) {
	nan, negNaN := float32(math.NaN()), float32(math.Copysign(math.NaN(), -1))
	score := []float32{1, nan, float32(math.Inf(1)), negNaN, 2, float32(math.Copysign(0, -1)), 0}
	sel := make([]uint32, 2*len(score))
	require.Equal(t, []int32{1}, topScore(nil, score, sel, 1, false))
	require.Equal(t, []int32{1, 2, 4}, topScore(nil, score, sel, 3, false))
	require.Equal(t, []int32{0, 1, 2, 4, 5}, topScore(nil, score, sel, 5, false)) // −0 ties +0: the lower row
	require.Equal(t, []int32{0, 1, 2, 4, 5, 6}, topScore(nil, score, sel, 6, false))
	// By magnitude: both NaNs above +Inf, −3 as 3.
	abs := []float32{1, nan, float32(math.Inf(1)), negNaN, -3, float32(math.Copysign(0, -1)), 0}
	require.Equal(t, []int32{1, 3}, topScore(nil, abs, sel, 2, true))
	require.Equal(t, []int32{1, 2, 3, 4}, topScore(nil, abs, sel, 4, true))
	require.Equal(t, []int32{0, 1, 2, 3, 4, 5}, topScore(nil, abs, sel, 6, true))
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
	// A NaN is not a positive activation, whatever its sign bit: with P = 3
	// and k = 1 the count goes to the 3.
	nan := float32(math.NaN())
	c := &Counter{Alpha: 0.34, Counts: [][]int32{make([]int32, 6)}}
	c.ObserveFFN(0, []float32{nan, 3, 2, 1, -1, -nan}, 1, nil)
	require.Equal(t, []int32{0, 1, 0, 0, 0, 0}, c.Counts[0])
}

// TestTopSiLU checks GateFirst's per-token pick: GateScores against
// |g/(1+e^−g)|·w in float64 (within float32 rounding), one case by hand —
// g = (−3, 0.5, 2, −0.1, 2) with w = (10, 1, 1, 1, 1) scores (1.42, 0.31,
// 1.76, 0.048, 1.76), so k = 2 keeps rows 2 and 4, k = 3 adds row 0 — and
// the rows against a stable sort of the scores (ties to the lower index) on
// vectors with many ties.
func TestTopSiLU(t *testing.T) {
	p := kernels.NewPool(2)
	defer p.Close()
	g := []float32{-3, 0.5, 2, -0.1, 2}
	w := []float32{10, 1, 1, 1, 1}
	sc, sel := make([]float32, 5), make([]uint32, 10)
	require.Equal(t, []int32{2, 4}, topSiLU(p, nil, sc, sel, g, w, 2))
	require.Equal(t, []int32{0, 2, 4}, topSiLU(p, nil, sc, sel, g, w, 3))
	require.Equal(t, []int32{1, 2, 4}, topSiLU(p, nil, sc, sel, g, []float32{1, 1, 1, 1, 1}, 3)) // unweighted: row 0 scores 0.142

	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 3, 64, 1000} {
		g, w := make([]float32, n), make([]float32, n)
		for i := range g {
			g[i] = float32(rng.IntN(9)-4) / 2 // ties
			w[i] = float32(1 + rng.IntN(3))
		}
		score := make([]float32, n)
		GateScores(p, score, g, w)
		for i, v := range g {
			want := math.Abs(float64(v)/(1+math.Exp(-float64(v)))) * float64(w[i])
			require.InDelta(t, want, float64(score[i]), 1e-6*want+1e-30, "n=%d score %d", n, i)
		}
		for _, k := range []int{1, (n + 1) / 2, n} {
			idx := make([]int32, n)
			for i := range idx {
				idx[i] = int32(i)
			}
			slices.SortStableFunc(idx, func(a, b int32) int { return cmp.Compare(score[b], score[a]) })
			want := slices.Clone(idx[:k])
			slices.Sort(want)
			got := topSiLU(p, nil, make([]float32, n), make([]uint32, 2*n), g, w, k)
			require.Equal(t, want, got, "n=%d k=%d", n, k)
		}
	}
}

// BenchmarkTopSiLU: GateFirst's per-token pick on one SmolLM2-135M layer of
// a γ=0.7 file (1075 stored rows, φ=0.25: 384 picked), a new gate vector
// each call (64 in turn): the same vector every call lets the branch
// predictor learn its comparisons, which decode never repeats.
func BenchmarkTopSiLU(b *testing.B) {
	p := kernels.NewPool(1)
	defer p.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	const n, k, vecs = 1075, 384, 64
	g, w := make([]float32, vecs*n), make([]float32, n)
	for i := range g {
		g[i] = float32(rng.NormFloat64())
	}
	for i := range w {
		w[i] = float32(0.5 + rng.Float64())
	}
	score, sel, rows := make([]float32, n), make([]uint32, 2*n), make([]int32, 0, n)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		rows = topSiLU(p, rows[:0], score, sel, g[i*n:(i+1)*n], w, k)
		i = (i + 1) % vecs
	}
}
