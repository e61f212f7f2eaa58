package convert

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOrderedNames checks the converter's tensor order: the embeddings, then
// each layer's tensors in the order a forward pass reads them (Qwen2's biases
// next to their weights, unknown tensors last in their layer), numeric layer
// order, then the final norm and the head.
func TestOrderedNames(t *testing.T) {
	want := []string{
		"model.embed_tokens.weight",
		"model.layers.2.input_layernorm.weight",
		"model.layers.2.self_attn.q_proj.bias",
		"model.layers.2.self_attn.q_proj.weight",
		"model.layers.2.self_attn.k_proj.bias",
		"model.layers.2.self_attn.k_proj.weight",
		"model.layers.2.self_attn.v_proj.weight",
		"model.layers.2.self_attn.o_proj.weight",
		"model.layers.2.post_attention_layernorm.weight",
		"model.layers.2.mlp.gate_proj.weight",
		"model.layers.2.mlp.up_proj.weight",
		"model.layers.2.mlp.down_proj.weight",
		"model.layers.2.self_attn.rotary_emb.inv_freq",
		"model.layers.10.input_layernorm.weight",
		"model.layers.10.mlp.down_proj.weight",
		"model.norm.weight",
		"lm_head.weight",
	}
	in := slices.Clone(want)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
	require.Equal(t, want, orderedNames(in))
}
