package profile_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/dataset"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/convert/profile"
	"github.com/selectinfer/sinf/convert/scores"
	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// recorder keeps a copy of every activation batch it sees.
type recorder struct {
	batches []batch
}

type batch struct {
	layer int
	act   []float32
	T     int
}

func (r *recorder) ObserveFFN(layer int, act []float32, T int, rows []int32) {
	r.batches = append(r.batches, batch{layer, append([]float32(nil), act...), T})
}

// TestScoresByHand: on tinystories-656k and a two-prompt dataset, the
// profiler's s_n equals Σ_t |a_n(t)| summed by hand over the activations of
// every processed token (prompt, then each generated token fed back; dense,
// all neurons), within 1e-9 relative; token counts are exact.
func TestScoresByHand(t *testing.T) {
	dir := sharedtest.Path(t, "models", "tinystories-656k")
	ck, m, err := hf.Load(dir)
	require.NoError(t, err)
	defer ck.Close()
	tok, err := tokenizer.Load(dir)
	require.NoError(t, err)
	texts := []string{"Once upon a time, there was a little dog.", "Tom and Sue went to the park to play."}
	prompts := [][]int{tok.Encode(texts[0], true), tok.Encode(texts[1], true)}
	const gen = 5
	res, err := profile.Run(m, prompts, profile.Options{MaxNewTokens: gen, Threads: 2, BOS: tok.BOS()})
	require.NoError(t, err)
	require.Equal(t, 2, res.Prompts)
	require.Equal(t, int64(len(prompts[0])+len(prompts[1])), res.InputTokens)
	require.Equal(t, int64(2*gen), res.GeneratedTokens)

	// By hand: run each prompt the same way, record activations, sum.
	c := m.Config
	want := make([][]float64, c.Layers)
	for i := range want {
		want[i] = make([]float64, c.Intermediate)
	}
	p := kernels.NewPool(2)
	defer p.Close()
	tokens := 0
	for _, pr := range prompts {
		s := m.NewSession(p, 0)
		rec := &recorder{}
		s.Observe = rec
		logits, err := s.Forward(pr, false)
		require.NoError(t, err)
		for g := 0; g < gen; g++ {
			logits, err = s.Forward([]int{runtime.Argmax(logits)}, false)
			require.NoError(t, err)
		}
		for _, b := range rec.batches {
			if b.layer == 0 {
				tokens += b.T
			}
			for tk := 0; tk < b.T; tk++ {
				for n := 0; n < c.Intermediate; n++ {
					want[b.layer][n] += math.Abs(float64(b.act[tk*c.Intermediate+n]))
				}
			}
		}
	}
	require.Equal(t, int(res.InputTokens+res.GeneratedTokens), tokens)
	for l := range want {
		for n, w := range want[l] {
			require.InEpsilon(t, w, res.Sums[l][n], 1e-9, "layer %d neuron %d", l, n)
		}
	}
}

// TestShardsMergeToUnsharded: profiling a dataset in 3 shards and merging
// equals profiling it whole (within 1e-12 relative), and the result does not
// depend on the number of workers.
func TestShardsMergeToUnsharded(t *testing.T) {
	dir := sharedtest.Path(t, "models", "stories260k")
	ck, m, err := hf.Load(dir)
	require.NoError(t, err)
	defer ck.Close()
	tok, err := tokenizer.Load(dir)
	require.NoError(t, err)
	_, ex, err := dataset.Load("tinystories", sharedtest.Path(t, "data"), 7)
	require.NoError(t, err)
	digest := scores.ModelDigest(ck.ConfigJSON, convert.FFNShapes(ck))
	file := func(exs []dataset.Example, shard string, workers int) *scores.File {
		prompts := make([][]int, len(exs))
		for i, e := range exs {
			prompts[i] = tok.Encode(e.Prompt, true)
		}
		res, err := profile.Run(m, prompts, profile.Options{MaxNewTokens: 3, Workers: workers, Threads: 1, BOS: tok.BOS(), Context: 128})
		require.NoError(t, err)
		return &scores.File{ModelDigest: digest, Task: "tinystories", Dataset: "tinystories", Shard: shard,
			Prompts: res.Prompts, InputTokens: res.InputTokens, GeneratedTokens: res.GeneratedTokens, Scores: res.Sums}
	}
	whole := file(ex, "", 1)
	require.Equal(t, whole.Scores, file(ex, "", 3).Scores, "workers must not change the sums")
	var shards []*scores.File
	for i := 0; i < 3; i++ {
		part, err := dataset.Shard(ex, i, 3)
		require.NoError(t, err)
		shards = append(shards, file(part, scores.FormatShard(i, 3), 2))
	}
	merged, err := scores.Merge(shards, []string{"s0", "s1", "s2"})
	require.NoError(t, err)
	ref, err := scores.Merge([]*scores.File{whole}, []string{"whole"})
	require.NoError(t, err)
	require.Equal(t, whole.InputTokens, merged.InputTokens)
	require.Equal(t, whole.GeneratedTokens, merged.GeneratedTokens)
	for l := range ref.Scores {
		for n, w := range ref.Scores[l] {
			require.InEpsilon(t, w, merged.Scores[l][n], 1e-12)
		}
	}
}

func TestTruncate(t *testing.T) {
	p, cut := profile.Truncate([]int{1, 2, 3, 4, 5, 6}, 6, 2, 1)
	require.Equal(t, []int{1, 4, 5, 6}, p)
	require.Equal(t, 2, cut)
	p, cut = profile.Truncate([]int{7, 2, 3, 4, 5, 6}, 6, 2, -1)
	require.Equal(t, []int{3, 4, 5, 6}, p)
	require.Equal(t, 2, cut)
	p, cut = profile.Truncate([]int{1, 2}, 6, 2, 1)
	require.Equal(t, []int{1, 2}, p)
	require.Equal(t, 0, cut)
}

func TestRunErrors(t *testing.T) {
	ck, m, err := hf.Load(sharedtest.Path(t, "models", "stories260k"))
	require.NoError(t, err)
	defer ck.Close()
	_, err = profile.Run(m, nil, profile.Options{})
	require.ErrorContains(t, err, "no prompts")
	_, err = profile.Run(m, [][]int{{1, 2}, {}}, profile.Options{})
	require.ErrorContains(t, err, "prompt 1 is empty")
}

// TestChunks: per-chunk profiles cover consecutive prompts and add up to the
// whole profile exactly in token counts and within 1e-12 in sums.
func TestChunks(t *testing.T) {
	ck, m, err := hf.Load(sharedtest.Path(t, "models", "stories260k"))
	require.NoError(t, err)
	defer ck.Close()
	prompts := [][]int{{1, 5, 6}, {1, 7}, {1, 8, 9, 10}, {1, 11}, {1, 12, 13}}
	var chunks []*profile.Result
	var idx []int
	res, err := profile.Run(m, prompts, profile.Options{MaxNewTokens: 2, Workers: 2, ChunkSize: 2, OnChunk: func(i int, r *profile.Result) error {
		idx = append(idx, i)
		chunks = append(chunks, r)
		return nil
	}})
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2}, idx)
	require.Equal(t, []int{2, 2, 1}, []int{chunks[0].Prompts, chunks[1].Prompts, chunks[2].Prompts})
	require.Equal(t, int64(3+2), chunks[0].InputTokens)
	var in, gen int64
	for _, c := range chunks {
		in += c.InputTokens
		gen += c.GeneratedTokens
	}
	require.Equal(t, res.InputTokens, in)
	require.Equal(t, res.GeneratedTokens, gen)
	for l := range res.Sums {
		for n, want := range res.Sums[l] {
			got := chunks[0].Sums[l][n] + chunks[1].Sums[l][n] + chunks[2].Sums[l][n]
			require.InEpsilon(t, want, got, 1e-12)
		}
	}
}
