// Package convert rewrites a HuggingFace checkpoint into a .sinf file that
// stores, for each FFN layer in a range, only γ·N neurons: the base neurons
// (top δ·N of the task ranking) first, then secondary neurons (best of the
// model ranking not yet kept), with an index map (paper §4, spec/sinf.md).
package convert

import (
	"fmt"
	"math/rand/v2"

	"github.com/selectinfer/sinf/runtime"
)

// ResolveRange turns the paper's layer range flags into absolute layers
// [lo, hi): first counts from 0 (from the end when negative), last is
// exclusive and counts from the end when ≤ 0 (defaults 5 and -2: layers
// 5 … L−3; last 0 runs through the final layer). explicit says the user
// gave the flags; an empty or out-of-range result is an error that, for the
// defaults, tells the user to give the range explicitly.
func ResolveRange(first, last, layers int, explicit bool) (lo, hi int, err error) {
	lo, hi = first, last
	if lo < 0 {
		lo += layers
	}
	if hi <= 0 {
		hi += layers
	}
	if lo < 0 || hi > layers || lo >= hi {
		if !explicit {
			return 0, 0, fmt.Errorf("the default layer range --first-layer %d --last-layer %d is empty for a model of %d layers; give --first-layer and --last-layer explicitly (e.g. --first-layer 0 --last-layer %d)", first, last, layers, layers)
		}
		return 0, 0, fmt.Errorf("layer range --first-layer %d --last-layer %d resolves to [%d, %d), not a non-empty range within the model's %d layers", first, last, lo, hi, layers)
	}
	return lo, hi, nil
}

// Select returns the kept neurons of one layer in stored order and the base
// count: base = the first round(δ·N) of taskRank, then the best of modelRank
// not already kept until round(γ·N) (paper §4). Rankings list neuron indices
// by decreasing score (convert/scores.Rank).
func Select(taskRank, modelRank []int32, N int, gamma, delta float64) (kept []int32, base int, err error) {
	nKeep, nBase := runtime.RoundCount(gamma, N), runtime.RoundCount(delta, N)
	if len(taskRank) != N || len(modelRank) != N {
		return nil, 0, fmt.Errorf("rankings of %d and %d neurons for a layer of %d", len(taskRank), len(modelRank), N)
	}
	if nBase > nKeep {
		return nil, 0, fmt.Errorf("delta %g keeps %d base neurons, more than gamma %g keeps (%d)", delta, nBase, gamma, nKeep)
	}
	in := make([]bool, N)
	kept = make([]int32, 0, nKeep)
	for _, n := range taskRank[:nBase] {
		in[n] = true
		kept = append(kept, n)
	}
	for _, n := range modelRank {
		if len(kept) == nKeep {
			break
		}
		if !in[n] {
			in[n] = true
			kept = append(kept, n)
		}
	}
	return kept, nBase, nil
}

// SelectRandom keeps round(γ·N) neurons drawn uniformly without replacement
// from a PCG stream seeded by (seed, layer): the paper's random-loading
// baseline. The first round(δ·N) drawn are recorded as base.
func SelectRandom(N int, gamma, delta float64, seed uint64, layer int) (kept []int32, base int) {
	rng := rand.New(rand.NewPCG(seed, uint64(layer)))
	perm := rng.Perm(N)
	nKeep := runtime.RoundCount(gamma, N)
	kept = make([]int32, nKeep)
	for i := range kept {
		kept[i] = int32(perm[i])
	}
	return kept, min(runtime.RoundCount(delta, N), nKeep)
}
