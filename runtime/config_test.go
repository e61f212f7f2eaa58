package runtime_test

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
)

// TestParseConfigErrors: each bad config.json is an error naming the file and
// the field.
func TestParseConfigErrors(t *testing.T) {
	base := `"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":100,"max_position_embeddings":64`
	for _, c := range []struct{ json, want string }{
		{`{"model_type":"gemma2",` + base + `}`, `model_type "gemma2" is not supported (supported: llama, qwen2)`},
		{`{"model_type":"llama",` + base + `,"rms_norm_eps":-1}`, "rms_norm_eps"},
		{`{"model_type":"llama",` + base + `,"rope_theta":-5}`, "rope_theta"},
		{`{"model_type":"llama",` + base + `,"num_key_value_heads":3}`, "num_key_value_heads 3"},
		{`{"model_type":"llama",` + base + `,"hidden_act":"gelu"}`, "hidden_act"},
		{`{"model_type":"llama",` + base + `,"rope_scaling":{"rope_type":"yarn","factor":2}}`, "yarn"},
		{`{"model_type":"llama","hidden_size":64}`, "intermediate_size"},
		{`{"model_type":`, "config.json"},
	} {
		_, err := runtime.ParseConfig("x/config.json", []byte(c.json))
		require.Error(t, err, c.json)
		require.Contains(t, err.Error(), "x/config.json")
		require.Contains(t, err.Error(), c.want)
	}
	cfg, err := runtime.ParseConfig("c", []byte(`{"model_type":"llama",`+base+`,"eos_token_id":[7,9],"bos_token_id":5,
		"rope_scaling":{"rope_type":"llama3","factor":32,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8192}}`))
	require.NoError(t, err)
	require.Equal(t, []int{7, 9}, cfg.EOS)
	require.Equal(t, 5, cfg.BOS)
	require.Equal(t, 16, cfg.HeadDim)
	// llama3 scaling: the highest frequency is unchanged, the lowest divided by the factor.
	inv := cfg.RopeInvFreq()
	require.InDelta(t, 1.0, inv[0], 1e-12)
	require.InDelta(t, 1/math.Pow(10000, 14.0/16)/32, inv[7], 1e-12) // wavelength 2π·10000^(7/8) ≈ 19869 > 8192/low_freq_factor
}

// nanNorm serves a model with a NaN in its final norm weight.
type nanNorm struct{ runtime.Source }

func (n nanNorm) Tensor(name string) (format.Tensor, error) {
	t, err := n.Source.Tensor(name)
	if err != nil || name != "model.norm.weight" {
		return t, err
	}
	d := append([]byte(nil), t.Data...)
	bits := math.Float32bits(float32(math.NaN()))
	d[0], d[1], d[2], d[3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
	t.Data = d
	return t, nil
}

// TestGenerateRejectsNaN: weights holding NaN give an error, not a run of
// token 0.
func TestGenerateRejectsNaN(t *testing.T) {
	ck, _ := load(t, "stories260k")
	m, err := runtime.Load(ck.Config, nanNorm{ck}, runtime.LoadOptions{})
	require.NoError(t, err)
	_, err = m.NewSession(newPool(t), 0).Generate([]int{1, 5, 6}, runtime.GenerateOptions{MaxTokens: 4})
	require.ErrorContains(t, err, "not finite")
}

// TestTieDefault (issue 23 item 5): tie_word_embeddings absent from
// config.json is false for llama and qwen2, as HF's LlamaConfig and
// Qwen2Config default it, and TieNote says where the value came from.
func TestTieDefault(t *testing.T) {
	base := `"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"max_position_embeddings":64`
	for _, c := range []struct{ json, note string }{
		{`{"model_type":"llama",` + base + `}`, "tie_word_embeddings is false (absent from config.json: HF LlamaConfig's default)"},
		{`{"model_type":"qwen2",` + base + `}`, "tie_word_embeddings is false (absent from config.json: HF Qwen2Config's default)"},
		{`{"model_type":"llama","tie_word_embeddings":true,` + base + `}`, "tie_word_embeddings is true (config.json)"},
		{`{"model_type":"qwen2","tie_word_embeddings":false,` + base + `}`, "tie_word_embeddings is false (config.json)"},
	} {
		cfg, err := runtime.ParseConfig("c", []byte(c.json))
		require.NoError(t, err)
		require.Equal(t, c.note, cfg.TieNote(), c.json)
		require.Equal(t, strings.Contains(c.note, "true"), cfg.TieEmbeddings, c.json)
	}
}
