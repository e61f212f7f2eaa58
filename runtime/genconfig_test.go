package runtime_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/runtime"
)

// TestGenerationConfig: generation_config.json's EOS list and sampling
// defaults, resolved as HF generate does, and bad fields named.
func TestGenerationConfig(t *testing.T) {
	g, err := runtime.ParseGenerationConfig("g.json", []byte(`{"bos_token_id":1,"eos_token_id":[2,303],"do_sample":true,"temperature":0.6,"top_p":0.9}`))
	require.NoError(t, err)
	require.Equal(t, []int{2, 303}, g.EOS)
	require.Equal(t, runtime.SamplingParams{Temperature: 0.6, TopK: 50, TopP: 0.9, RepeatPenalty: 1, PenaltyLastN: 64}, g.Sampling())
	// Without do_sample, HF decodes greedily whatever temperature says.
	g, err = runtime.ParseGenerationConfig("g.json", []byte(`{"eos_token_id":7,"temperature":0.6,"top_k":3}`))
	require.NoError(t, err)
	require.Equal(t, []int{7}, g.EOS)
	require.Equal(t, runtime.SamplingParams{Temperature: 0, TopK: 0, TopP: 1, RepeatPenalty: 1, PenaltyLastN: 64}, g.Sampling())
	// repetition_penalty applies, greedy or not, over the whole sequence (Qwen2.5-Instruct's file)
	g, err = runtime.ParseGenerationConfig("g.json", []byte(`{"do_sample":true,"repetition_penalty":1.05,"temperature":0.7,"top_p":0.8,"top_k":20}`))
	require.NoError(t, err)
	require.Equal(t, runtime.SamplingParams{Temperature: 0.7, TopK: 20, TopP: 0.8, RepeatPenalty: 1.05, PenaltyLastN: -1}, g.Sampling())
	g, err = runtime.ParseGenerationConfig("g.json", []byte(`{"repetition_penalty":1.1}`))
	require.NoError(t, err)
	require.Equal(t, runtime.SamplingParams{TopP: 1, RepeatPenalty: 1.1, PenaltyLastN: -1}, g.Sampling())
	g, err = runtime.ParseGenerationConfig("g.json", nil)
	require.NoError(t, err)
	require.Equal(t, runtime.SamplingParams{TopP: 1, RepeatPenalty: 1, PenaltyLastN: 64}, g.Sampling())
	for _, c := range []struct{ json, want string }{
		{`{"temperature":-1}`, "g.json: field temperature -1: want a finite number ≥ 0"},
		{`{"top_k":-2}`, "g.json: field top_k -2: want ≥ 0"},
		{`{"top_p":1.5}`, "g.json: field top_p 1.5: want a probability in (0, 1]"},
		{`{"repetition_penalty":0}`, "g.json: field repetition_penalty 0: want a finite number > 0"},
		{`{"eos_token_id":"x"}`, `g.json: field eos_token_id: want an int or a list of ints, found "x"`},
	} {
		_, err := runtime.ParseGenerationConfig("g.json", []byte(c.json))
		require.EqualError(t, err, c.want)
	}
	require.Equal(t, []int{2, 303, 128009, 128008}, runtime.EOSUnion([]int{2, 303}, []int{128009, 2}, nil, []int{128008, 303}))
}
