package runtime_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/runtime"
)

const limitsBase = `"model_type":"qwen2","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":100`

// TestConfigLimits (issue 16 item 4): a config value that sizes an
// allocation beyond any device is refused, naming the file, the field and
// the limit (max_position_embeddings 2147483647 ran out of memory).
func TestConfigLimits(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{` + limitsBase + `,"max_position_embeddings":2147483647}`, "c/config.json: field max_position_embeddings 2147483647 is above this runtime's limit of 16777216"},
		{`{` + limitsBase + `,"max_position_embeddings":64,"vocab_size":1000000000}`, "c/config.json: field vocab_size 1000000000 is above this runtime's limit of 16777216"},
		{`{` + limitsBase + `,"max_position_embeddings":64,"num_hidden_layers":100000}`, "c/config.json: field num_hidden_layers 100000 is above this runtime's limit of 1024"},
		{`{` + limitsBase + `,"max_position_embeddings":64,"head_dim":-2}`, "c/config.json: field head_dim must be positive, found -2"},
		{`{` + limitsBase + `,"max_position_embeddings":64,"head_dim":512,"num_attention_heads":256,"num_key_value_heads":256}`, "c/config.json: num_attention_heads 256 · head_dim 512 is above this runtime's limit of 65536"},
		{`{` + limitsBase + `,"max_position_embeddings":64,"use_sliding_window":true,"sliding_window":0}`, "c/config.json: field sliding_window 0 must be positive when use_sliding_window is true"},
	} {
		_, err := runtime.ParseConfig("c/config.json", []byte(c.json))
		require.EqualError(t, err, c.want)
	}
}

// TestSlidingWindowContext (issue 16 item 9): Qwen2's sliding window, used
// by the layers from max_window_layers on (HF Qwen2Attention), caps the
// context, since full attention equals it only within the window; a window
// no layer uses (max_window_layers ≥ layers, or use_sliding_window false)
// changes nothing.
func TestSlidingWindowContext(t *testing.T) {
	for _, c := range []struct {
		extra       string
		window, max int
	}{
		{`"use_sliding_window":true,"sliding_window":8,"max_window_layers":1`, 8, 8},
		{`"use_sliding_window":true,"sliding_window":8`, 0, 64}, // default max_window_layers 28 ≥ 2 layers
		{`"use_sliding_window":true,"sliding_window":8,"max_window_layers":2`, 0, 64},
		{`"use_sliding_window":false,"sliding_window":8,"max_window_layers":0`, 0, 64},
		{`"use_sliding_window":true,"sliding_window":null,"max_window_layers":0`, 0, 64},
		{`"use_sliding_window":true,"sliding_window":4096,"max_window_layers":0`, 4096, 64},
	} {
		cfg, err := runtime.ParseConfig("c", []byte(`{`+limitsBase+`,"max_position_embeddings":64,`+c.extra+`}`))
		require.NoError(t, err, c.extra)
		require.Equal(t, c.window, cfg.SlidingWindow, c.extra)
		require.Equal(t, c.max, cfg.MaxContext(), c.extra)
	}
}

// TestSessionContextBounded: a session's KV cache and RoPE tables are sized
// from the context asked for; 0 gives min(MaxContext, DefaultContext), not
// the model's maximum, and a sliding window caps it.
func TestSessionContextBounded(t *testing.T) {
	_, m := load(t, "stories260k")
	p := newPool(t)
	require.Equal(t, 512, m.NewSession(p, 0).Context())
	m.Config.MaxPositions = runtime.MaxPositions
	require.Equal(t, runtime.DefaultContext, m.NewSession(p, 0).Context())
	require.Equal(t, 100, m.NewSession(p, 100).Context())
	m.Config.SlidingWindow = 32
	require.Equal(t, 32, m.NewSession(p, 0).Context())
	require.Equal(t, 32, m.NewSession(p, 100).Context())
	require.Equal(t, int64(2*5*32*32*4), runtime.KVCacheBytes(m.Config, 32))
}
