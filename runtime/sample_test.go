package runtime_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/runtime"
)

// softmax64 is the reference: softmax of x in float64.
func softmax64(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, v)
	}
	var sum float64
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = math.Exp(v - m)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func requireDist(t *testing.T, want, got []float64) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.InDelta(t, want[i], got[i], 1e-6, "p(%d): want %v, got %v", i, want, got)
	}
}

func logf32(p ...float64) []float32 {
	out := make([]float32, len(p))
	for i, v := range p {
		out[i] = float32(math.Log(v))
	}
	return out
}

// TestSamplerPenalties: the window holds the last PenaltyLastN ids of the
// prompt, and each token in it is penalized as HF's repetition_penalty
// (negative logits multiplied, others divided) then OpenAI's formula
// (count·frequency + presence subtracted); a token outside the window is
// untouched. Expected logits worked by hand.
func TestSamplerPenalties(t *testing.T) {
	logits := []float32{2, -1, 0.5, 1, -3, 0}
	s := runtime.NewSamplerParams(runtime.SamplingParams{Temperature: 1, TopP: 1, RepeatPenalty: 2,
		FrequencyPenalty: 0.5, PresencePenalty: 0.25, PenaltyLastN: 4}, 1)
	s.Start([]int{0, 1, 1, 3, 3, 3}) // window [1 3 3 3]: id 0 dropped out
	// id 1: −1·2 − (1·0.5 + 0.25) = −2.75; id 3: 1/2 − (3·0.5 + 0.25) = −1.25
	requireDist(t, softmax64([]float64{2, -2.75, 0.5, -1.25, -3, 0}), s.Distribution(logits, nil))
	require.Equal(t, []float32{2, -1, 0.5, 1, -3, 0}, logits, "logits are not changed")

	// the whole sequence (−1) reaches id 0: 2/2 − (1·0.5 + 0.25) = 0.25
	s.PenaltyLastN = -1
	s.Start([]int{0, 1, 1, 3, 3, 3})
	// id 1 seen twice: −2 − (2·0.5 + 0.25) = −3.25
	requireDist(t, softmax64([]float64{0.25, -3.25, 0.5, -1.25, -3, 0}), s.Distribution(logits, nil))

	// window 0: penalties off
	s.PenaltyLastN = 0
	s.Start([]int{0, 1, 1, 3, 3, 3})
	requireDist(t, softmax64([]float64{2, -1, 0.5, 1, -3, 0}), s.Distribution(logits, nil))

	// greedy applies them too (HF and llama.cpp do): 1/1.2 = 0.833 < 0.9
	g := runtime.NewSamplerParams(runtime.SamplingParams{RepeatPenalty: 1.2, PenaltyLastN: 64}, 1)
	g.Start([]int{0})
	require.Equal(t, 1, g.Sample([]float32{1, 0.9}))
	require.False(t, g.Greedy())
}

// TestSamplerPenaltyWindowSlides: each pick joins the window and the oldest
// id leaves it (window of 2, presence 2, greedy): the picks cycle 2, 0, 1.
func TestSamplerPenaltyWindowSlides(t *testing.T) {
	s := runtime.NewSamplerParams(runtime.SamplingParams{PresencePenalty: 2, PenaltyLastN: 2}, 1)
	logits := []float32{5, 4.9, 4.8}
	s.Start([]int{0, 0, 1}) // window [0 1]
	var got []int
	for range 4 {
		got = append(got, s.Sample(logits))
	}
	// [0 1] → 2 (4.8 beats 3, 2.9); [1 2] → 0; [2 0] → 1; [0 1] → 2
	require.Equal(t, []int{2, 0, 1, 2}, got)
}

// TestSamplerMinP: min-p keeps the tokens with p ≥ MinP·p_max after
// temperature, top-k and top-p, as HF's MinPLogitsWarper; worked by hand on
// p = (0.5, 0.2, 0.15, 0.1, 0.05).
func TestSamplerMinP(t *testing.T) {
	logits := logf32(0.5, 0.2, 0.15, 0.1, 0.05)
	dist := func(p runtime.SamplingParams) []float64 {
		return runtime.NewSamplerParams(p, 1).Distribution(logits, nil)
	}
	// T 1, min-p 0.25: keep p ≥ 0.125 → 0.5, 0.2, 0.15 over 0.85
	requireDist(t, []float64{0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85, 0, 0}, dist(runtime.SamplingParams{Temperature: 1, TopP: 1, MinP: 0.25}))
	// T 2: weights √p; relative to the max √(p/0.5) = 1, .632, .548, .447, .316; min-p 0.4 keeps four
	w := []float64{math.Sqrt(0.5), math.Sqrt(0.2), math.Sqrt(0.15), math.Sqrt(0.1)}
	sum := w[0] + w[1] + w[2] + w[3]
	requireDist(t, []float64{w[0] / sum, w[1] / sum, w[2] / sum, w[3] / sum, 0}, dist(runtime.SamplingParams{Temperature: 2, TopP: 1, MinP: 0.4}))
	// top-p 0.8 keeps three (0.5, 0.7, 0.85 ≥ 0.8), then min-p 0.35 keeps p ≥ 0.175: two
	requireDist(t, []float64{0.5 / 0.7, 0.2 / 0.7, 0, 0, 0}, dist(runtime.SamplingParams{Temperature: 1, TopP: 0.8, MinP: 0.35}))
	// top-k 2 then min-p 0.5: only the first (0.2 < 0.25)
	requireDist(t, []float64{1, 0, 0, 0, 0}, dist(runtime.SamplingParams{Temperature: 1, TopK: 2, TopP: 1, MinP: 0.5}))
}

// TestSamplerDrawsItsDistribution: Sample's frequencies over 20000 draws are
// Distribution's within 0.015 (a binomial's standard deviation here is at most
// 0.0036), penalties, top-k and min-p together.
func TestSamplerDrawsItsDistribution(t *testing.T) {
	logits := []float32{1.5, 1, 0.2, 2, -1, 0.7}
	p := runtime.SamplingParams{Temperature: 0.8, TopK: 5, TopP: 1, MinP: 0.05, RepeatPenalty: 1.3, PresencePenalty: 0.2, PenaltyLastN: 8}
	s := runtime.NewSamplerParams(p, 3)
	s.Start([]int{3, 3, 0})
	want := s.Distribution(logits, nil)
	counts := make([]float64, len(logits))
	const n = 20000
	for range n {
		s.Start([]int{3, 3, 0}) // keep the window as it was
		counts[s.Sample(logits)]++
	}
	for i := range counts {
		require.InDelta(t, want[i], counts[i]/n, 0.015, "token %d", i)
	}
	require.Zero(t, want[4], "top-k 5 drops the least likely")
}

// TestSamplerLogprobs: the chosen token's and the top tokens' log
// probabilities are log softmax of the raw logits (not of the penalized or
// tempered ones), most likely first, the lower id first on ties.
func TestSamplerLogprobs(t *testing.T) {
	logits := []float32{1, 3, 3, 0, 2}
	lse := math.Log(math.Exp(1) + 2*math.Exp(3) + 1 + math.Exp(2))
	s := runtime.NewSamplerParams(runtime.SamplingParams{TopP: 1, RepeatPenalty: 5, PenaltyLastN: 4}, 1)
	s.Logprobs, s.TopLogprobs = true, 3
	require.False(t, s.Greedy())
	s.Start([]int{1}) // id 1 penalized to 0.6: greedy picks 2
	require.Equal(t, 2, s.Sample(logits))
	lp := s.Last()
	require.Equal(t, 2, lp.Chosen.ID)
	require.InDelta(t, 3-lse, lp.Chosen.Logprob, 1e-6)
	require.Len(t, lp.Top, 3)
	for i, want := range []struct {
		id int
		lp float64
	}{{1, 3 - lse}, {2, 3 - lse}, {4, 2 - lse}} {
		require.Equal(t, want.id, lp.Top[i].ID, "rank %d", i)
		require.InDelta(t, want.lp, lp.Top[i].Logprob, 1e-6, "rank %d", i)
	}
	s.TopLogprobs = 0
	s.Sample(logits)
	require.Empty(t, s.Last().Top)
	s.TopLogprobs = 10 // more than the vocabulary: all five
	s.Sample(logits)
	require.Len(t, s.Last().Top, 5)
	require.Equal(t, 3, s.Last().Top[4].ID)
}

// evenOnly allows even ids and records what was accepted.
type evenOnly struct{ accepted []int }

func (e *evenOnly) Mask(a []bool) int {
	n := 0
	for i := range a {
		if a[i] = i%2 == 0; a[i] {
			n++
		}
	}
	return n
}
func (e *evenOnly) Allowed(id int) bool { return id%2 == 0 }
func (e *evenOnly) Accept(id int)       { e.accepted = append(e.accepted, id) }

// TestSamplerConstraint: a constraint removes tokens before everything else:
// greedy takes the most likely allowed token, sampling renormalizes over the
// allowed ones (then top-k counts only them), and the pick is accepted.
func TestSamplerConstraint(t *testing.T) {
	logits := []float32{1, 3, 2, 0.5, -1}
	c := &evenOnly{}
	g := runtime.NewSampler(0, 0, 1, 1)
	g.Constraint = c
	require.False(t, g.Greedy())
	require.Equal(t, 2, g.Sample(logits))
	require.Equal(t, []int{2}, c.accepted)
	s := runtime.NewSamplerParams(runtime.SamplingParams{Temperature: 1, TopP: 1}, 1)
	s.Constraint = c
	p := softmax64([]float64{1, 2, -1})
	requireDist(t, []float64{p[0], 0, p[1], 0, p[2]}, s.Distribution(logits, nil))
	s.TopK = 2 // the two most likely allowed: ids 2 and 0
	p = softmax64([]float64{1, 2})
	requireDist(t, []float64{p[0], 0, p[1], 0, 0}, s.Distribution(logits, nil))
}

// BenchmarkSample: one draw at temperature 0.8 from random logits of the
// SmolLM2 vocabulary (49152), with every token a candidate and with top-k
// 40 (CPU time per token, next to a decode step's milliseconds).
func BenchmarkSample(b *testing.B) {
	logits := make([]float32, 49152)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*12.9898)) * 8
	}
	for _, k := range []int{0, 40} {
		b.Run(fmt.Sprintf("topk=%d", k), func(b *testing.B) {
			s := runtime.NewSampler(0.8, k, 1, 1)
			for range b.N {
				s.Sample(logits)
			}
		})
	}
}

// TestArgmax: the lowest index of the largest value, as one compare a value
// finds it (NaN never larger), for lengths around the eight-value steps, ties
// within and across steps, −0 against +0, and NaN anywhere (at 0: index 0).
func TestArgmax(t *testing.T) {
	ref := func(x []float32) int {
		best := 0
		for i, v := range x {
			if v > x[best] {
				best = i
			}
		}
		return best
	}
	nan := float32(math.NaN())
	require.Equal(t, 0, runtime.Argmax(nil))
	for _, x := range [][]float32{
		{nan, 5, 7},
		{1, nan, 7, nan},
		{float32(math.Copysign(0, -1)), 0, -1},
		{-1, 0, float32(math.Copysign(0, -1))},
		{3, 1, 1, 1, 1, 1, 1, 1, 3, 3},
		{1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4, 1, 1, 1, 1, 1, 1, 4},
		{float32(math.Inf(-1)), float32(math.Inf(-1))},
	} {
		require.Equal(t, ref(x), runtime.Argmax(x), "%v", x)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for n := 1; n < 70; n++ {
		for range 20 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.IntN(9)) // many ties
				if rng.IntN(16) == 0 {
					x[i] = nan
				}
			}
			require.Equal(t, ref(x), runtime.Argmax(x), "%v", x)
		}
	}
	require.Equal(t, 1, runtime.Argmax([]float32{-3, 2, 2}))
}
